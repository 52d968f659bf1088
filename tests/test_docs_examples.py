"""The guides' examples run as written and say what the code does: the decorators' span names, your own
scorers, the power tables, the case format and `agenteval validate`'s messages."""

from __future__ import annotations

import ast
import json
import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from agenteval import load_dataset, retriever
from agenteval.cli import main
from agenteval.run import evaluate
from agenteval.store import Store

DOCS = Path(__file__).resolve().parents[1] / "docs"


def page(name: str) -> str:
    return (DOCS / name).read_text()


def blocks(text: str, language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", text, flags=re.S)


def table_after(text: str, marker: str) -> list[list[str]]:
    """The body rows of the first markdown table after ``marker``."""
    lines = text[text.index(marker) :].splitlines()
    first = next(i for i, line in enumerate(lines) if line.startswith("|"))
    rows = []
    for line in lines[first:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.split("|")[1:-1]])
    return rows[2:]


def test_the_instrumentation_example_makes_the_spans_its_table_names(spans):
    text = page("instrument.md")
    code = blocks(text, "python")[0]
    scope: dict = {}
    exec(compile(code, "docs/instrument.md", "exec"), scope)
    scope["convert_currency"](100.0, "EUR", "USD")
    scope["travel_agent"]("How much is 100 EUR in USD?")
    with pytest.raises(NameError):  # the example's `client` is the reader's own model client
        scope["chat"]([{"role": "user", "content": "hi"}])

    @retriever
    def search(query: str) -> list[str]:
        return ["doc-1"]

    search("refunds")
    made = {s.attributes["gen_ai.operation.name"]: s for s in spans.get_finished_spans()}
    names = {"{model}": "gpt-4o-mini", "{tool name}": "convert_currency", "{agent name}": "travel-agent"}
    names["{name}"] = "search"
    rows = table_after(text, "| decorator |")
    assert [row[0] for row in rows] == ["`@llm_call`", "`@tool`", "`@agent`", "`@retriever`"]
    for _, span_name, operation, kind, _ in rows:
        span = made[operation.strip("`")]
        template = span_name.strip("`")
        assert span.name == re.sub(r"\{[^}]+\}", lambda m: names[m.group(0)], template)
        assert span.kind.name == kind


def test_the_scorer_example_scores_a_run(tmp_path):
    """The three kinds of scorer the guide defines, used by a run as its last line shows."""
    (code,) = [b for b in blocks(page("scoring.md"), "python") if "batch_scorer" in b]
    tree = ast.parse(code)
    *definitions, last = tree.body
    call = last.value
    assert isinstance(call, ast.Call) and call.func.id == "evaluate"
    scope: dict = {}
    exec(compile(ast.Module(definitions, type_ignores=[]), "docs/scoring.md", "exec"), scope)
    (keyword,) = [k for k in call.keywords if k.arg == "scorers"]
    scorers = eval(compile(ast.Expression(keyword.value), "docs/scoring.md", "eval"), scope)
    experiment = evaluate("mock", "arithmetic", cases=6, attempts=1, scorers=scorers, store=tmp_path, progress="none")
    rows = Store(tmp_path).rows(
        "SELECT scorer, count(*) AS n, count(error) AS errors, min(value) AS low, max(value) AS high "
        "FROM scores WHERE experiment_id = ? GROUP BY scorer",
        [experiment.id],
    )
    by_scorer = {row["scorer"]: row for row in rows}
    for name in ("mentions_answer", "few_calls", "token_thrift"):
        row = by_scorer[name]
        assert row["n"] == 6 and row["errors"] == 0 and 0 <= row["low"] <= row["high"] <= 1, row
    assert by_scorer["mentions_answer"]["high"] == 1.0  # the mock's right answers mention the expected answer


def test_the_power_table_shown_is_what_the_command_prints():
    (console,) = [b for b in blocks(page("reports.md"), "console") if "agenteval power" in b]
    command, *shown = console.strip().splitlines()
    result = CliRunner().invoke(main, shlex.split(command.removeprefix("$ agenteval ")))
    assert result.exit_code == 0, result.output
    printed = result.output.splitlines()
    for line in shown:
        assert line in printed, line


SETTINGS = {
    "3 attempts, cases alike (`--spread 0`)": ["--spread", "0"],
    "3 attempts, default spread (s² = p(1 - p) / 2)": [],
    "3 attempts, cases mostly all-or-nothing (`--spread 0.32`)": ["--spread", "0.32"],
    "3 attempts, every case all-or-nothing (`--spread 0.357`)": ["--spread", "0.357"],
    "1 attempt, default spread": ["--attempts", "1"],
    "3 attempts, default spread, drop in a fifth of the cases (`--affected 0.2`)": ["--affected", "0.2"],
    "3 attempts, default spread, two-sided 95% (`--alpha 0.025`)": ["--alpha", "0.025"],
    "3 attempts, mostly all-or-nothing, two-sided 95%": ["--spread", "0.32", "--alpha", "0.025"],
}


def test_the_how_many_cases_table_gives_what_power_prints():
    text = page("reports.md")
    rows = table_after(text, "### How many cases?")
    assert [row[0] for row in rows] == list(SETTINGS)
    for setting, paired, unpaired in rows:
        args = ["power", "--pass-rate", "0.85", "--cases", "55", "--drop", "0.1", "--json", *SETTINGS[setting]]
        result = CliRunner().invoke(main, args)
        assert result.exit_code == 0, result.output
        figures = json.loads(result.output)
        printed = [re.search(r"(\d+)% /", cell).group(1) for cell in (paired, unpaired)]
        assert printed == [f"{figures[k][0][0]:.0%}".rstrip("%") for k in ("paired", "unpaired")], setting


def test_the_case_format_example_is_a_valid_dataset(tmp_path):
    text = page("datasets.md")
    (example,) = [b for b in blocks(text, "json") if "refund-01" in b]
    lines = example.strip().splitlines()
    # The guide shows its last case on two lines "to fit"; in a file it is one.
    cases = [*lines[:-2], lines[-2] + " " + lines[-1].strip()]
    path = tmp_path / "cases.jsonl"
    path.write_text("\n".join(cases) + "\n")
    dataset = load_dataset(str(path))
    assert [c.id for c in dataset][0] == "refund-01" and len(dataset) == 5
    assert dataset.cases[4].simulated_user.startswith("Bought them") and dataset.cases[4].max_turns == 4
    assert dataset.cases[3].turns[-1] == dataset.cases[3].input


OPEN_ENDED_REPLIES = {
    "refund-policy": (
        "You can return an item within 30 days with its receipt.",
        "We guarantee a refund within 30 days.",
    ),
    "roman-paris": ("The Romans called it Lutetia Parisiorum.", "It was called Londinium."),
    "pi": ("It is 3.14.", "About 3.2."),
    "summary": (
        "Bring the item back within 30 days of purchase with your receipt, and we refund the original payment.",
        "Bring it back.",
    ),
}


def test_the_open_ended_example_validates_and_is_scored(tmp_path):
    (example,) = [b for b in blocks(page("datasets.md"), "json") if "must_contain" in b]
    path = tmp_path / "open.jsonl"
    path.write_text(example)
    checked = CliRunner().invoke(main, ["validate", str(path)])
    assert checked.exit_code == 0 and "4 cases" in checked.output
    questions = {case.input: case.id for case in load_dataset(str(path))}
    store = Store(tmp_path / "s")
    for which, outcome in ((0, "passed"), (1, "wrong")):
        experiment = evaluate(
            lambda question, which=which: OPEN_ENDED_REPLIES[questions[question]][which],
            str(path),
            attempts=1,
            store=store,
            progress="none",
        )
        rows = store.rows(
            "SELECT case_id, coalesce(list_sort(list(scorer) FILTER (WHERE NOT passed)), []) AS failed FROM scores "
            "WHERE experiment_id = ? GROUP BY case_id ORDER BY case_id",
            [experiment.id],
        )
        failed = {row["case_id"]: row["failed"] for row in rows}
        trials = store.rows("SELECT DISTINCT outcome FROM trials WHERE experiment_id = ?", [experiment.id])
        assert trials == [{"outcome": outcome}]
        assert failed == (
            dict.fromkeys(OPEN_ENDED_REPLIES, [])
            if outcome == "passed"
            else {
                "pi": ["answer_match"],
                "refund-policy": ["must_contain", "must_not_contain"],
                "roman-paris": ["answer_match"],
                "summary": ["reply_length"],
            }
        )


def test_validate_prints_the_messages_the_guide_shows(tmp_path, monkeypatch):
    (console,) = [b for b in blocks(page("datasets.md"), "console") if "agenteval validate cases.jsonl" in b]
    command, *shown = console.strip().splitlines()
    good = '{"input": "What is 2 + 2?", "expected_output": "4"}'
    lines = [
        '{"input": "q", "expected_output": "a", "expected_tool": ["x"]}',
        '{"id": "refund-01", "input": "What is the refund window?", "expected_output": "30 days"}',
        '{"expected_output": "a"}',
        "not json",
        *[good] * 4,
        '{"id": "refund-01", "input": "Again?", "expected_output": "30 days"}',
    ]
    monkeypatch.chdir(tmp_path)
    Path("cases.jsonl").write_text("\n".join(lines) + "\n")
    result = CliRunner().invoke(main, shlex.split(command.removeprefix("$ agenteval ")))
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == shown


def test_validate_of_an_empty_file_prints_what_the_guide_shows(tmp_path, monkeypatch):
    (console,) = [b for b in blocks(page("datasets.md"), "console") if "agenteval validate empty.jsonl" in b]
    command, *shown = console.strip().splitlines()
    monkeypatch.chdir(tmp_path)
    Path("empty.jsonl").write_bytes(b"")
    result = CliRunner().invoke(main, shlex.split(command.removeprefix("$ agenteval ")))
    assert result.exit_code == 1
    assert result.output.strip().splitlines() == shown


def test_the_dataset_loading_example_runs(capsys):
    (code,) = [b for b in blocks(page("datasets.md"), "python") if "sample_cases" in b]
    scope: dict = {}
    exec(compile(code, "docs/datasets.md", "exec"), scope)
    assert len(scope["subset"]) == 20 and len(capsys.readouterr().out.splitlines()) == len(scope["hard"])


def test_the_dataset_card_example_reviews_a_dataset(tmp_path, monkeypatch, capsys):
    (code,) = [b for b in blocks(page("datasets.md"), "python") if "review_dataset" in b]
    monkeypatch.chdir(tmp_path)
    (tmp_path / "support.jsonl").write_text('{"input": "Refund window?", "expected_output": "30 days"}\n')
    (tmp_path / "support.card.json").write_text(
        '{"owner": "support-evals team", "created": "2025-01-02", "last_reviewed": "2025-01-02"}'
    )
    scope: dict = {}
    exec(compile(code, "docs/datasets.md", "exec"), scope)
    assert capsys.readouterr().out.startswith("support-evals team: last reviewed ")
    assert scope["status"].due and scope["status"].changed_since_review is None
    from agenteval.dataset import read_card

    assert read_card("support.jsonl").reviewed_sha256 is not None  # the review was recorded


README = (DOCS.parent / "README.md").read_text()


def test_the_readme_decorator_example_makes_its_spans(spans):
    (code,) = blocks(README, "python")
    scope: dict = {}
    exec(compile(code, "README.md", "exec"), scope)
    scope["convert_currency"](100.0, "EUR", "USD")
    scope["chat"]([{"role": "user", "content": "hi"}])
    scope["travel_agent"]("How much is 100 EUR in USD?")
    names = [s.name for s in spans.get_finished_spans()]
    assert names == ["execute_tool convert_currency", "chat gpt-4o-mini", "invoke_agent travel-agent"]


@pytest.mark.parametrize("source", ["README.md", "reference/cli.md"])
def test_the_error_example_is_what_the_command_prints(source, tmp_path, monkeypatch):
    text = README if source == "README.md" else page(source)
    (console,) = [b for b in blocks(text, "console") if "--timeout nan" in b]
    lines = console.strip().splitlines()
    command = next(i for i, line in enumerate(lines) if "--timeout nan" in line)
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(main, shlex.split(lines[command].removeprefix("$ agenteval ")))
    assert result.exit_code == 2 and result.output.strip() == lines[command + 1]


def test_the_python_run_example_runs_and_prints_its_figures(tmp_path, monkeypatch, capsys):
    (code,) = [b for b in blocks(page("run.md"), "python") if 'evaluate("my_agent.py:answer"' in b]
    (tmp_path / "my_agent.py").write_text("def answer(question):\n    return 'unknown'\n")
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("AGENTEVAL_STORE", raising=False)
    exec(compile(code.replace('"hard", attempts=3', '"hard", sample=10, attempts=3'), "run.md", "exec"), {})
    experiment_id, status, rate, *rest = capsys.readouterr().out.split(" ", 3)
    assert status == "completed" and 0.0 <= float(rate) <= 1.0
    assert Store(tmp_path / ".agenteval").rows("SELECT count(*) AS n FROM trials") == [{"n": 30}]


def test_the_python_report_example_runs_and_writes_its_page(tmp_path, monkeypatch, capsys):
    (code,) = [b for b in blocks(page("reports.md"), "python") if "build_report(Store" in b]
    monkeypatch.chdir(tmp_path)
    evaluate("mock", "arithmetic", cases=8, attempts=2, store=tmp_path / ".agenteval", progress="none")
    exec(compile(code, "reports.md", "exec"), {})
    first, *categories = capsys.readouterr().out.splitlines()
    rate, _ = first.split(" ", 1)
    assert 0.0 <= float(rate) <= 1.0 and categories
    assert (tmp_path / "report.html").read_text().startswith("<!doctype html>")


def test_the_models_python_example_runs_against_a_local_server(model_server, monkeypatch, capsys):
    """Run as written: the example defined main() and never ran it, so a reader's copy printed nothing."""
    import model_servers as ms

    (code,) = [b for b in blocks(page("models.md"), "python") if "Model(" in b]
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_url)
    model_server.script(ms.text("4"))
    exec(compile(code, "docs/models.md", "exec"), {"__name__": "__main__"})
    assert capsys.readouterr().out.startswith("4 stop Usage(input_tokens=12, output_tokens=7) ()")
    assert model_server.requests[0].body["temperature"] == 0


def test_the_judge_check_label_lines_shown_are_read(tmp_path):
    from agenteval.scorers._judge_check import read_labels

    (block,) = blocks(page("judge.md"), "json")
    case_lines = [line for line in block.splitlines() if '"case"' in line]
    labels = tmp_path / "labels.jsonl"
    labels.write_text("\n".join(case_lines))
    (item,) = read_labels(labels)
    assert item.case.expected_output == "Canberra" and item.replies == ("Sydney",) and item.human is False


def test_the_simulated_user_case_shown_is_a_valid_case(tmp_path):
    (block,) = blocks(page("simulator.md"), "json")
    path = tmp_path / "cases.jsonl"
    path.write_text(block)
    (case,) = load_dataset(path).cases
    assert case.simulated_user and case.max_turns == 4


def test_the_setup_tracing_example_files_spans_under_its_service(tmp_path):
    """Run as a program of its own (it installs the process's tracer provider), a decorated call in place of
    its `...`: the guide never said how the service of `report --traces --service` is named (it was `agenteval`)."""
    (code,) = [b for b in blocks(page("export.md"), "python") if "setup_tracing(" in b]
    call = "from agenteval import tool\ntool(lambda: 1)()\n"
    (tmp_path / "app.py").write_text(re.sub(r"^\.\.\..*$", call, code, flags=re.M))
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTEVAL_"))}
    done = subprocess.run([sys.executable, "app.py"], cwd=tmp_path, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    (service,) = re.findall(r'service_name="(\w+)"', code)
    rows = Store(tmp_path / ".agenteval").rows("SELECT DISTINCT service_name FROM spans")
    assert rows == [{"service_name": service}]
    assert list((tmp_path / ".agenteval" / "spans").glob(f"date=*/service={service}/*.parquet"))


def test_the_traces_report_percentiles_are_those_the_guide_names():
    """The guide said p50, p90, p95 and p99 of each kind of span; the span rows carry p50 and p95."""
    import dataclasses

    from agenteval.analysis._report_data import SpanLatency
    from agenteval.analysis._traces import TraceLatency

    def percentiles(cls: type) -> str:
        names = [f.name for f in dataclasses.fields(cls) if re.fullmatch(r"p\d+_ms", f.name)]
        return ", ".join(name.removesuffix("_ms") for name in names)

    text = " ".join(page("production.md").split())
    traces, spans = percentiles(TraceLatency), percentiles(SpanLatency)
    assert f"latency percentiles of traces ({traces}) and of each kind of span ({spans})" in text


# Every Python example of the README and the guides runs ----------------------------------------------------------

EXAMPLES_WITH_A_TEST_OF_THEIR_OWN = {
    "README.md": ['@agent(name="travel-agent")'],
    "docs/instrument.md": ["client.chat.completions.create"],
    "docs/scoring.md": ["batch_scorer"],
    "docs/reports.md": ["build_report(Store"],
    "docs/datasets.md": ["sample_cases", "review_dataset"],
    "docs/run.md": ['evaluate("my_agent.py:answer"'],
    "docs/models.md": ["Model("],
    "docs/export.md": ["setup_tracing("],
    "docs/store.md": ["pd.read_parquet", "SPAN_SCHEMA.empty_table", "def table(name)"],  # tests/test_readable_store.py
}
"""Examples that a test above (or the one named) runs and checks, each found by a text only it holds."""

EXAMPLES_RUN_HERE = {
    "docs/instrument.md": {"configure_capture(max_string": ""},
    "docs/collect.md": {"Collector(": r"http://127\.0\.0\.1:\d+/v1/traces \d+\nCollectStats\(spans_received=0,"},
    "docs/production.md": {
        "score_traces(": r"[1-9]\d* scores for [1-9]\d* traces",
        "TraceScorer(": r"TraceScoreResult\(pass_id='\w+', traces=6,",
    },
}
"""The other examples, run as programs of their own in a folder whose store holds production traces, with what
each prints (a regular expression)."""

PRODUCTION_AGENT = """
from agenteval import agent, tool
from agenteval.tracing import setup_tracing

tracing = setup_tracing(service_name="shop")


@tool
def order_status(order: str) -> str:
    if order.endswith("3"):
        raise RuntimeError("the order service is down")
    return "shipped"


@agent(name="shop")
def shop(order: str) -> str:
    return f"Order {order} is {order_status(order)}; no secret here."


for number in range(6):
    try:
        shop(f"A-{number}")
    except RuntimeError:
        pass
tracing.flush()
"""


def python_examples() -> list[tuple[str, str]]:
    """Every ``python`` block of the README and docs/*.md, with the page it is on."""
    pages = ["README.md", *sorted(str(p.relative_to(DOCS.parent)) for p in DOCS.rglob("*.md"))]
    return [(name, code) for name in pages for code in blocks((DOCS.parent / name).read_text(), "python")]


def test_every_python_example_of_the_docs_is_run_by_a_test():
    """Four examples (the collector, both trace-scoring ones, capture settings) were run by nothing, and one of them
    used names it never defined (`Store`, `path`, `writer`); a new example must join one of the two lists."""
    unaccounted = []
    for name, code in python_examples():
        markers = [*EXAMPLES_WITH_A_TEST_OF_THEIR_OWN.get(name, []), *EXAMPLES_RUN_HERE.get(name, {})]
        if sum(marker in code for marker in markers) != 1:
            unaccounted.append(f"{name}: {code.splitlines()[0]!r}")
    assert unaccounted == []
    for lists in (EXAMPLES_WITH_A_TEST_OF_THEIR_OWN, EXAMPLES_RUN_HERE):
        for name, markers in lists.items():
            for marker in markers:
                assert sum(marker in code for page, code in python_examples() if page == name) == 1, (name, marker)


@pytest.fixture(scope="module")
def production_folder(tmp_path_factory):
    """A folder whose ./.agenteval holds six production traces of service shop, one that failed in a tool."""
    folder = tmp_path_factory.mktemp("production")
    (folder / "agent.py").write_text(PRODUCTION_AGENT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTEVAL_"))}
    done = subprocess.run([sys.executable, "agent.py"], cwd=folder, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    return folder, env


@pytest.mark.parametrize(
    ("name", "marker"), [(name, marker) for name, markers in EXAMPLES_RUN_HERE.items() for marker in markers]
)
def test_the_other_python_examples_run_as_written(name, marker, production_folder):
    folder, env = production_folder
    (code,) = [code for page, code in python_examples() if page == name and marker in code]
    done = subprocess.run([sys.executable, "-c", code], cwd=folder, env=env, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert re.match(EXAMPLES_RUN_HERE[name][marker], done.stdout), done.stdout
