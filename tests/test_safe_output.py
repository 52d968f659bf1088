"""Output that cannot be hijacked: hostile case ids, categories, replies, error messages, experiment and dataset
names, stored by real runs, show literally on the terminal, in markdown (and the gate's step summary) and in
HTML, while JSON keeps them raw."""

from __future__ import annotations

import csv
import io
import json
import os
import pty
import re
import subprocess
import sys
import unicodedata
from html.parser import HTMLParser

import pytest
from click.testing import CliRunner
from collect_clients import agent_spans
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.trace.export import SpanExportResult

from agenteval.analysis import build_report
from agenteval.cli import main
from agenteval.collect import Collector
from agenteval.dataset import Case, Dataset
from agenteval.render import to_html, to_json, to_markdown
from agenteval.render._console import run_summary
from agenteval.render._text_safety import BIDI_CONTROLS
from agenteval.run import evaluate
from agenteval.store import Store

CLEAR, TITLE, CSI_C1 = "\x1b[2J", "\x1b]0;pwned\x07", "\x9b31m"
RICH_MARKUP = "[bold red]loud[/bold red]"
HOSTILE_IDS = [
    f"q{CLEAR}0",
    f"q{TITLE}1",
    "q\u202e2cod.exe",
    "<img src=x onerror=alert(1)>",
    "![](http://evil.example/pixel.png)",
    f"q{RICH_MARKUP}",
    "a|b\r\nc",
    "`tick` *star* [link](http://evil.example)",
    f"q{CSI_C1}8",
    "q\x7f\x00\x089",
    "q\u2066iso\u2069",
    "q11",
]
HOSTILE_CATEGORIES = [f"cat{CLEAR}", "cat\u202eA", "[link=http://evil.example]c[/link]", "<b>c</b>|x"]
FAILURE = f"boom {CLEAR} <script>x</script> \u202e ![](http://evil.example/e.png)\nsecond line"
REPLY = f"reply {TITLE} \u202e [red]x[/red]"


def _cases() -> list[Case]:
    return [
        Case(id=case_id, input=f"What is {n} + 0?", expected_output=str(n), category=HOSTILE_CATEGORIES[n % 4])
        for n, case_id in enumerate(HOSTILE_IDS)
    ]


def _agent(question: str) -> str:
    n = int(question.split()[2])
    if n % 3 == 0:
        raise RuntimeError(FAILURE)
    return str(n) if n % 3 == 1 else REPLY


@pytest.fixture(scope="module")
def hostile(tmp_path_factory):
    store = tmp_path_factory.mktemp("hostile") / "store"

    def run(dataset_name: str, name: str):
        dataset = Dataset(dataset_name, "hostile(test)", "hash-" + dataset_name[:3], _cases())
        return evaluate(_agent, dataset, attempts=1, concurrency=2, store=store, name=name, progress="none")

    baseline = run(f"base{CLEAR}", f"exp{TITLE} {RICH_MARKUP} \u202e")
    candidate = run("cand\u202eX", f"cand{CLEAR}")
    return {"store": str(store), "baseline": baseline, "candidate": candidate}


SQL = "SELECT case_id, category, reply, error_message FROM trials JOIN cases USING (experiment_id, case_id)"
INVISIBLE = "\u00ad\u200b\u200c\u200d\u2060\ufeff\u2028\u2029"
"""Zero-width characters (an id reads as another) and the line and paragraph separators."""
UNSAFE = re.compile(f"[\x00-\x09\x0b-\x1f\x7f-\x9f{BIDI_CONTROLS}{INVISIBLE}]")


def assert_inert(text: str) -> None:
    """No raw control (but newline), bidirectional or invisible character."""
    found = sorted({f"U+{ord(c):04X}" for c in UNSAFE.findall(text)})
    assert not found, f"raw control or bidi characters in output: {found}"


def cli(*args: str, env: dict[str, str] | None = None):
    result = CliRunner().invoke(main, list(args), env={"COLUMNS": "400", **(env or {})})
    assert result.exception is None or isinstance(result.exception, SystemExit), result.output
    return result


def test_the_report_on_the_terminal_shows_hostile_values_as_visible_escapes(hostile):
    out = cli("report", hostile["baseline"].id, "--store", hostile["store"]).output
    assert_inert(out)
    assert "\\x1b[2J" in out and "\\x1b]0;pwned\\x07" in out and "<U+202E>" in out
    assert RICH_MARKUP in out  # shown as typed, never interpreted as rich markup
    assert "\\x9b31m" in out and "\\x7f\\x00\\x08" in out  # DEL, NUL, backspace, a C1 control sequence
    assert "boom" in out  # the failure message is there, escaped


@pytest.mark.parametrize(
    "args",
    [
        ["experiments"],
        ["sql", SQL],
        ["sql", SQL, "--format", "markdown"],
    ],
    ids=["experiments", "sql-table", "sql-markdown"],
)
def test_listings_and_sql_show_hostile_values_as_visible_escapes(hostile, args):
    out = cli(*args, "--store", hostile["store"]).output
    assert_inert(out)
    assert "U+202E" in out


def _sql_csv(store: str, *, terminal: bool) -> bytes:
    """`agenteval sql --format csv` in a process of its own, its output a pipe or a terminal (a pty)."""
    command = [sys.executable, "-m", "agenteval.cli", "sql", SQL, "--format", "csv", "--store", store]
    if not terminal:
        return subprocess.run(command, capture_output=True, check=True, timeout=60).stdout
    main_end, sub_end = pty.openpty()
    with subprocess.Popen(command, stdout=sub_end, stderr=subprocess.DEVNULL) as process:
        os.close(sub_end)
        out = b""
        while chunk := _read_pty(main_end):
            out += chunk
        assert process.wait(timeout=60) == 0
    os.close(main_end)
    return out.replace(b"\r\n", b"\n")  # the terminal's own line ends (onlcr)


def _read_pty(fd: int) -> bytes:
    try:
        return os.read(fd, 65536)
    except OSError:  # EIO: the process closed its end
        return b""


def test_sql_csv_keeps_the_raw_values_in_a_pipe_and_shows_escapes_on_a_terminal(hostile):
    """CSV is data: piped to a file or a program it is exactly what is stored (click stripped ANSI sequences from
    what was not a terminal, so ids lost bytes); on a terminal its values show as escapes, like every table."""
    rows = list(csv.DictReader(io.StringIO(_sql_csv(hostile["store"], terminal=False).decode(), newline="")))
    assert {row["case_id"] for row in rows} == set(HOSTILE_IDS)
    assert {row["category"] for row in rows} == set(HOSTILE_CATEGORIES)
    shown = _sql_csv(hostile["store"], terminal=True).decode()
    assert_inert(shown)
    assert "q\\x1b[2J0" in shown and "q<U+202E>2cod.exe" in shown


def test_compare_and_gate_on_the_terminal_and_in_the_step_summary(hostile, tmp_path):
    ids = hostile["baseline"].id, hostile["candidate"].id
    compared = cli("compare", *ids, "--store", hostile["store"]).output
    assert_inert(compared)
    assert "cat<U+202E>A" in compared and "[link=http://evil.example]c[/link]" in compared
    summary = tmp_path / "summary.md"
    gated = cli(
        "gate", "--baseline", ids[0], "--candidate", ids[1], "--store", hostile["store"],
        env={"GITHUB_STEP_SUMMARY": str(summary)},
    )  # fmt: skip
    assert gated.exit_code == 3  # refused: the datasets differ
    assert_inert(gated.output)
    assert "different-datasets" in gated.output
    markdown = summary.read_text(encoding="utf-8")
    assert_inert(markdown)
    assert "candidate 'cand\\\\u202eX'" in markdown and markdown.startswith("### agenteval gate: refused")


def test_the_step_summary_of_a_refusal_quoting_hostile_ids_renders_literally(hostile, tmp_path):
    summary = tmp_path / "summary.md"
    image, tag = "![](http://evil.example/p.png)", "<img src=x>"
    gated = cli(
        "gate", "--baseline", image, "--candidate", tag, "--store", hostile["store"],
        env={"GITHUB_STEP_SUMMARY": str(summary)},
    )  # fmt: skip
    assert gated.exit_code == 3
    markdown = summary.read_text(encoding="utf-8")
    assert "<" not in markdown and "![" not in markdown and "`" not in markdown
    assert "\\!\\[\\](http://evil.example/p.png)" in markdown and "&lt;img src=x&gt;" in markdown


def test_the_run_summary_shows_hostile_names_as_visible_escapes(hostile):
    text = run_summary(hostile["baseline"].summary)
    assert_inert(text)
    assert "dataset base\\x1b[2J" in text


def test_a_hostile_jsonl_dataset_run_through_the_cli_shows_literally(tmp_path):
    dataset = tmp_path / f"data{CLEAR}\u202e.jsonl"  # the dataset's name comes from its file name
    lines = [
        {"id": f"x{CLEAR}", "input": "What is 1 + 1?", "expected_output": "2", "category": f"c\u202e{RICH_MARKUP}"},
        {"id": "<img src=x>", "input": "What is 2 + 2?", "expected_output": "4", "category": "![](http://e.example/p)"},
    ]
    dataset.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    store = str(tmp_path / "store")
    ran = cli("run", "--dataset", str(dataset), "--agent", "mock", "--attempts", "1", "--store", store, "-q")
    assert ran.exit_code == 0, ran.output
    assert_inert(ran.output)
    assert "data\\x1b[2J<U+202E>" in ran.output
    shown = cli("report", "--store", store).output
    assert_inert(shown)
    assert f"c<U+202E>{RICH_MARKUP}" in shown and "<img src=x>" in shown
    markdown = cli("report", "--format", "markdown", "--store", store).output
    assert_inert(markdown)
    assert "<img" not in markdown and "![" not in markdown


class _Markdown:
    """The tables of a markdown document, split on unescaped pipes."""

    def __init__(self, text: str) -> None:
        self.tables: list[list[list[str]]] = []
        current: list[list[str]] | None = None
        for line in text.split("\n"):
            if line.startswith("|"):
                cells = re.split(r"(?<!\\)\|", line)[1:-1]
                current = current if current is not None else []
                current.append(cells)
            else:
                if current:
                    self.tables.append(current)
                current = None
        if current:
            self.tables.append(current)


def test_the_markdown_report_renders_literally_and_keeps_its_table_shape(hostile):
    report = build_report(Store(hostile["store"]), hostile["baseline"].id)
    text = to_markdown(report)
    assert_inert(text)
    assert "<" not in text and ">" not in text  # HTML only as entities: no tag, no image loads
    assert not re.search(r"(?<!\\)[\[`*]", text), "an unescaped link, image, code span or emphasis marker"
    tables = _Markdown(text).tables
    assert len(tables) == 10 and all(len({len(row) for row in table}) == 1 for table in tables)
    categories, worst = tables[3], tables[9]
    assert len(categories) == 2 + len(HOSTILE_CATEGORIES) and len(categories[0]) == 6
    assert (
        len(worst) == 2 + 10 and len(worst[0]) == 4
    )  # header, rule, the ten worst cases; how their attempts ended in one


def test_the_html_report_escapes_markup_and_shows_bidi_characters(hostile):
    page = to_html(build_report(Store(hostile["store"]), hostile["baseline"].id))
    assert_inert(page)
    parsed = _Page()
    parsed.feed(page)
    assert set(parsed.tags) <= {"html", "head", "meta", "title", "style", "body", "h1", "h2", "table", "tr"} | {
        "th", "td", "svg", "text", "rect", "line", "p",
    }  # fmt: skip
    text = "".join(parsed.text)
    assert "<img src=x onerror=alert(1)>" in text and "q<U+202E>2cod.exe" in text and "\\x1b[2J" in text


def test_json_keeps_the_raw_values_and_stays_valid(hostile):
    data = json.loads(to_json(build_report(Store(hostile["store"]), hostile["baseline"].id)))
    assert data["experiment"]["name"] == f"exp{TITLE} {RICH_MARKUP} \u202e"
    assert {c["category"] for c in data["categories"]} == set(HOSTILE_CATEGORIES)
    assert any(FAILURE in (w["a_failure"] or "") for w in data["worst_cases"])


def test_stored_values_are_the_raw_ones(hostile):
    """Escaping is for display only: the store keeps what the agent and the dataset gave."""
    out = cli("sql", "SELECT DISTINCT case_id FROM trials", "--format", "json", "--store", hostile["store"]).output
    assert {row["case_id"] for row in json.loads(out)} == set(HOSTILE_IDS)
    assert any(unicodedata.category(c) == "Cc" for c in "".join(HOSTILE_IDS))  # the ids really are hostile


class _Page(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.tags: list[str] = []
        self.text: list[str] = []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)

    def handle_data(self, data):
        self.text.append(data)


def test_the_progress_notes_show_hostile_case_ids_as_visible_escapes(tmp_path, capsys):
    # Cases left out for want of a user simulator are named on the progress output as the run starts.
    cases = [
        Case(id=f"sim{TITLE}{CLEAR}\u202e", input="Hello", expected_output="", simulated_user="a customer"),
        Case(id="plain", input="What is 1 + 1?", expected_output="2"),
    ]
    dataset = Dataset("notes", "notes(test)", "hash-notes", cases)
    experiment = evaluate(
        lambda question: "2", dataset, attempts=1, skip_simulated=True, store=tmp_path / "s", progress="plain"
    )
    assert experiment.summary.this_run["not_run_simulated"] == 1
    err = capsys.readouterr().err
    assert_inert(err)
    assert "sim\\x1b]0;pwned\\x07\\x1b[2J<U+202E>" in err


def test_validate_shows_a_hostile_field_name_as_visible_escapes(tmp_path):
    # An unknown field is named as the file spells it: the one place a problem quotes the dataset without repr().
    dataset = tmp_path / "cases.jsonl"
    line = {"input": "What is 1 + 1?", "expected_output": "2", f"note{TITLE}{CLEAR}\u202e": "x"}
    dataset.write_text(json.dumps(line) + "\n", encoding="utf-8")
    result = cli("validate", str(dataset))
    assert result.exit_code == 1
    assert_inert(result.output)
    assert "cases.jsonl:1: note\\x1b]0;pwned\\x07\\x1b[2J<U+202E>: unknown field" in result.output


def test_a_path_holding_a_line_break_shows_on_one_line(tmp_path):
    """A folder named "data\\nforged: ..." made every message quoting a path inside it print a line of its own
    ("forged: ..."), one that no file or problem of the run had: errors (a missing dataset, agent or store, a
    report that cannot be written, a dataset's problems), validate's lines, and the report's dataset header. Each
    shows on one line, its line break as an escape."""
    folder = tmp_path / "data\nforged: all cases passed"
    folder.mkdir()
    good = folder / "cases.jsonl"
    cases = [{"id": "a", "input": "1 + 1", "expected_output": "2"}, {"id": "b", "input": "2", "expected_output": "2"}]
    good.write_text("".join(json.dumps(case) + "\n" for case in cases))
    named = folder / "cases\nforged: named.jsonl"  # the dataset's name comes from its file name
    named.write_text(good.read_text())
    broken = folder / "broken.jsonl"
    broken.write_text('{"id": "a", "input": "1 + 1"}\n{bad\n')
    store = str(folder / "store")
    ran = cli("run", "--dataset", str(named), "--agent", "mock", "--attempts", "1", "--store", store, "-q")
    assert ran.exit_code == 0, ran.output
    outputs = {
        "validate": cli("validate", str(good)),
        "validate problems": cli("validate", str(broken)),
        "audit problems": cli("audit", str(broken)),
        "no dataset": cli("run", "--dataset", str(folder / "missing.jsonl"), "--agent", "mock", "--store", store),
        "no agent": cli("run", "--dataset", str(good), "--agent", f"{folder}/agent.py:answer", "--store", store),
        "no store": cli("report", "--store", str(folder / "missing")),
        "no store to query": cli("sql", "SELECT 1", "--store", str(folder / "missing")),
        "nothing to resume": cli("run", "--resume", "--store", store),
        "not writable": cli("report", "--store", store, "-o", str(folder / "missing" / "report.html")),
        "written": cli("report", "--store", store, "-o", str(folder / "report.html")),
        "report": cli("report", "--store", store),
    }
    for name, result in outputs.items():
        lines = result.output.splitlines()
        assert not any(line.strip(" │┃").startswith("forged") for line in lines), f"{name}:\n{result.output}"
        assert "\\x0aforged: " in result.output, f"{name}:\n{result.output}"


LOOKALIKE = "case\u200b1\u2060\ufeff"  # reads as "case1"
SEPARATED = "sep\u2028forged: line\u2029x\u00ad"


def test_zero_width_characters_and_line_separators_show_as_code_points(tmp_path):
    """A case id with a zero-width space read as another id ("case\u200b1" as "case1"), and U+2028, which
    splitlines and some terminals take for a line break, went out raw to the terminal, markdown and HTML."""
    dataset = tmp_path / "cases.jsonl"
    lines = [
        {"id": LOOKALIKE, "input": "What is 1 + 1?", "expected_output": "2", "category": SEPARATED},
        {"id": "case1", "input": "What is 2 + 2?", "expected_output": "4", "category": "plain"},
    ]
    dataset.write_text("".join(json.dumps(line) + "\n" for line in lines), encoding="utf-8")
    store = str(tmp_path / "store")
    ran = cli("run", "--dataset", str(dataset), "--agent", "mock", "--attempts", "1", "--store", store, "-q")
    assert ran.exit_code == 0, ran.output
    for fmt in ("table", "markdown", "html"):
        shown = cli("report", "--format", fmt, "--store", store).output
        assert_inert(shown)
        assert "case<U+200B>1<U+2060><U+FEFF>" in shown.replace("&lt;", "<").replace("&gt;", ">"), fmt
        assert "sep<U+2028>forged: line<U+2029>x<U+00AD>" in shown.replace("&lt;", "<").replace("&gt;", ">"), fmt
    listed = cli("sql", "SELECT case_id, category FROM cases", "--store", store).output
    assert_inert(listed)
    assert "case<U+200B>1" in listed


def test_collected_spans_with_hostile_names_show_literally_in_the_traces_report(tmp_path):
    """Service and span names sent over OTLP/HTTP to `agenteval collect` by whatever client reaches it."""
    hostile = f"svc{CLEAR}{TITLE}\x1b]8;;http://evil.example\x1b\\l\x1b]8;;\x1b\\{CSI_C1}\u202e{LOOKALIKE}"
    hostile += f"{RICH_MARKUP}<img src=x onerror=alert(1)>|![](http://evil.example/p)"
    with Collector(tmp_path / "store", port=0, grpc_port=0) as collector:
        exporter = HttpExporter(endpoint=collector.http_endpoint)
        assert exporter.export(agent_spans(2, service=hostile, prefix=hostile)) == SpanExportResult.SUCCESS
        exporter.shutdown()
    store = str(tmp_path / "store")
    shown = cli("report", "--traces", "--store", store).output
    assert_inert(shown)
    assert "svc\\x1b[2J\\x1b]0;pwned\\x07\\x1b]8;;http" in shown and RICH_MARKUP in shown
    assert "<U+202E>case<U+200B>1" in shown
    markdown = cli("report", "--traces", "--format", "markdown", "--store", store).output
    assert_inert(markdown)
    assert "<img" not in markdown and "![" not in markdown and "&lt;U+202E&gt;case&lt;U+200B&gt;1" in markdown
    page = cli("report", "--traces", "--format", "html", "--store", store).output
    assert_inert(page)
    parsed = _Page()
    parsed.feed(page)
    assert "img" not in parsed.tags and "<img src=x onerror=alert(1)>" in "".join(parsed.text)


def test_a_stored_value_quoted_by_a_sql_error_cannot_forge_lines(tmp_path):
    """DuckDB's errors quote values ("Could not convert string '...'"); the message was split at every line
    boundary str.splitlines knows (carriage return, form feed, NEL, U+2028, ...), so a reply holding one printed
    a line of its own. The error's own line breaks (DuckDB points at the statement) stay."""
    reply = "1\rforged: cr\x85forged: nel\x0cforged: ff\u2028forged: ls\x1cforged: fs"
    dataset = Dataset("sep", "sep(test)", "hash-sep", [Case(id="a", input="What is 1 + 0?", expected_output="1")])
    store = tmp_path / "store"
    evaluate(lambda question: reply, dataset, attempts=1, store=store, progress="none")
    failed = cli("sql", "SELECT CAST(reply AS INTEGER) FROM trials", "--store", str(store))
    assert failed.exit_code != 0
    assert_inert(failed.output)
    assert not any(line.startswith("forged") for line in failed.output.splitlines()), failed.output
    assert "1\\x0dforged: cr\\x85forged: nel\\x0cforged: ff<U+2028>forged: ls\\x1cforged: fs" in failed.output
    assert "LINE 1: SELECT CAST" in failed.output  # DuckDB's own lines are kept


FORGED_ID, FORGED_CATEGORY = "ok\nforged-case", "cat\nforged-category"


def _line_breaking_runs(store) -> tuple[str, str]:
    """A baseline whose case with a line break in its id and category passes two of three attempts (flaky, and among
    the worst cases), and a candidate that fails it every time (newly failing); ten plain cases beside it."""
    cases = [Case(id=FORGED_ID, input="What is 7 + 0?", expected_output="7", category=FORGED_CATEGORY)]
    cases += [Case(id=f"plain-{n}", input=f"What is {n} + 0?", expected_output=str(n)) for n in range(10)]
    dataset = Dataset("breaks", "breaks(test)", "hash-breaks", cases)
    asked: dict[str, int] = {}

    def baseline(question: str) -> str:
        asked[question] = asked.get(question, 0) + 1
        n = question.split()[2]
        return n if n != "7" or asked[question] != 2 else "8"

    def candidate(question: str) -> str:
        n = question.split()[2]
        return "8" if n == "7" else n

    ids = []
    for agent in (baseline, candidate):
        run = evaluate(agent, dataset, attempts=3, concurrency=1, store=store, progress="none")
        ids.append(run.id)
    return ids[0], ids[1]


def _forged_lines(out: str) -> list[str]:
    return [line for line in out.split("\n") if line.strip(" │┃|").startswith("forged")]


def test_a_line_break_in_a_case_id_or_category_never_draws_a_row_of_its_own(tmp_path):
    """A case id "ok\\nforged-case" in the flaky list, the worst cases, the categories and the newly failing cases
    was drawn as two lines of a one-line cell: the list read as holding a case "forged-case" more than it counted."""
    store = str(tmp_path / "store")
    baseline, candidate = _line_breaking_runs(store)
    shown = {
        "report": cli("report", baseline, "--store", store).output,
        "report markdown": cli("report", baseline, "--format", "markdown", "--store", store).output,
        "compare": cli("compare", baseline, candidate, "--store", store).output,
    }
    for name, out in shown.items():
        assert not _forged_lines(out), f"{name}:\n{out}"
        assert "ok\\x0aforged-case" in out.replace("\\\\", "\\"), f"{name}:\n{out}"  # markdown escapes the \
        assert "cat\\x0aforged-category" in out.replace("\\\\", "\\"), f"{name}:\n{out}"
    report = build_report(Store(store), baseline)
    assert report.flaky.cases == [FORGED_ID] and report.worst_cases[0].case_id == FORGED_ID  # JSON keeps it raw
