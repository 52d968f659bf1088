"""One bad value costs one trial, never a batch: replies, reasons and cases the store cannot hold as
they are, and scorers that misbehave, are recorded on the trial they belong to; the rest is saved."""

from __future__ import annotations

import threading
import time

import pytest
from opentelemetry import trace

from agenteval import tool
from agenteval.dataset import Case, Dataset, DatasetError, load_file
from agenteval.run import evaluate
from agenteval.scorers import Score, rescore, scorer
from agenteval.store import Store

CASES = [Case(id=f"q{i}", input=f"What is {i} + 0?", expected_output=str(i), category="c") for i in range(1, 6)]
DATASET = Dataset("five", "five(test)", "hash-five", CASES)


def correct(question: str) -> str:
    return question.split()[2]


def run(store, agent=correct, scorers=(), dataset=DATASET):
    return evaluate(agent, dataset, attempts=2, concurrency=1, store=store, scorers=list(scorers), progress="none")


def trial_rows(store, experiment_id):
    return Store(store).rows(
        "SELECT case_id, attempt, outcome, failure_type, error_message, reply FROM trials "
        "WHERE experiment_id = ? ORDER BY case_id, attempt",
        [experiment_id],
    )


def scores_of(store, experiment_id, name):
    return Store(store).rows(
        "SELECT case_id, value, passed, reason, error FROM scores WHERE experiment_id = ? AND scorer = ? "
        "ORDER BY case_id",
        [experiment_id, name],
    )


def test_a_reply_with_a_lone_surrogate_is_stored_repaired_and_scored(tmp_path):
    def agent(question: str) -> str:
        answer = correct(question)
        return f"{answer} \ud800" if answer == "3" else answer

    experiment = run(tmp_path / "s", agent)
    assert experiment.status == "completed"
    rows = trial_rows(tmp_path / "s", experiment.id)
    assert len(rows) == 10 and {r["outcome"] for r in rows} == {"passed"}
    assert [r["reply"] for r in rows if r["case_id"] == "q3"] == ["3 \ufffd", "3 \ufffd"]
    # The spans hold it too, as JSON that DuckDB can still parse.
    (reply,) = Store(tmp_path / "s").rows(
        """SELECT DISTINCT json_extract_string(json_extract_string(attributes, '$."gen_ai.output.messages"'),
                                               '$[0].parts[0].content') AS r
           FROM spans WHERE case_id = 'q3' AND scope_name = 'agenteval.runner'"""
    )
    assert reply["r"] == "3 \ufffd"


@tool
def echo_tool(text: str) -> str:
    return text + "\udc80"


def test_a_span_name_or_attribute_with_a_lone_surrogate_costs_no_span(tmp_path):
    def agent(question: str) -> str:
        tracer = trace.get_tracer("user-code")
        with tracer.start_as_current_span("step \ud800") as span:
            span.set_attribute("note", "odd \udfff value")
            span.set_attribute("gen_ai.tool.name", "name \ud800")
            echo_tool("x")
        return correct(question)

    experiment = run(tmp_path / "s", agent)
    spans = Store(tmp_path / "s").rows(
        "SELECT name, tool_name, json_extract_string(attributes, '$.note') AS note, "
        "json_extract_string(attributes, '$.\"gen_ai.tool.call.result\"') AS result FROM spans "
        "WHERE experiment_id = ?",
        [experiment.id],
    )
    assert len(spans) == 10 * 3  # root, the user's step, the tool: none lost
    steps = [s for s in spans if s["name"].startswith("step")]
    assert {s["name"] for s in steps} == {"step \ufffd"} and {s["note"] for s in steps} == {"odd \ufffd value"}
    assert {s["tool_name"] for s in steps} == {"name \ufffd"}
    assert {s["result"] for s in spans if s["name"] == "execute_tool echo_tool"} == {'"x\ufffd"'}
    assert experiment.summary.passed == 10


@scorer
def surrogate_reason(case, trial):
    return True, "fine \udc80"


@scorer(when=lambda case: case.id != "q2" or 1 / 0)
def raising_when(case, trial):
    return True


@scorer
def says_yes(case, trial):
    return {"value": 1.0, "passed": "yes"} if case.id == "q4" else True


@scorer
def score_says_yes(case, trial):
    return Score("score_says_yes", "1", 1.0, "yes", "looked")  # type: ignore[arg-type]  # the bad value under test


class Unprintable:
    def __str__(self) -> str:
        raise RuntimeError("no text")


@scorer
def unprintable_reason(case, trial):
    return True, Unprintable()


@pytest.mark.parametrize(
    ("scorer_", "bad_cases", "error"),
    [
        (surrogate_reason, set(), None),
        (raising_when, {"q2"}, "when= condition raised ZeroDivisionError"),
        (says_yes, {"q4"}, "passed='yes'"),
        (score_says_yes, {"q1", "q2", "q3", "q4", "q5"}, "passed='yes'"),
        (unprintable_reason, set(), None),
    ],
    ids=["surrogate-reason", "raising-when", "passed-yes", "score-passed-yes", "unprintable-reason"],
)
def test_a_misbehaving_scorer_costs_its_own_scores_only(tmp_path, scorer_, bad_cases, error):
    experiment = run(tmp_path / "s", scorers=[scorer_])
    assert experiment.status == "completed"
    rows = trial_rows(tmp_path / "s", experiment.id)
    assert len(rows) == 10
    # The bad trials' answers could not be judged: a scorer_error (the scorer's failure), never a wrong answer.
    assert {r["case_id"] for r in rows if r["outcome"] == "failed"} == bad_cases
    assert {r["failure_type"] for r in rows if r["outcome"] == "failed"} <= {"scorer_error"}
    assert {r["case_id"] for r in rows if r["outcome"] == "passed"} == {c.id for c in CASES} - bad_cases
    scores = scores_of(tmp_path / "s", experiment.id, scorer_.name)
    assert len(scores) == 10  # an error score for each bad trial, a real one for the others
    errored = [s for s in scores if s["error"]]
    assert {s["case_id"] for s in errored} == bad_cases
    assert all(error in s["error"] and s["passed"] is None for s in errored)
    assert len(scores_of(tmp_path / "s", experiment.id, "answer_match")) == 10
    if scorer_ is surrogate_reason:
        assert {s["reason"] for s in scores} == {"fine \ufffd"}
    # Rescoring meets the same values and copes the same way.
    result = rescore(Store(tmp_path / "s"), experiment.id)
    assert result.trials == 10


def test_a_case_the_scorers_cannot_read_costs_that_trial_only(tmp_path):
    # Made in Python, so validate never saw it: a budget past 64-bit integers.
    huge = Case(id="huge", input="What is 7 + 0?", expected_output="7", category="c", max_tool_calls=10**20)
    dataset = Dataset("six", "six(test)", "hash-six", [*CASES, huge])
    experiment = run(tmp_path / "s", dataset=dataset)
    assert experiment.status == "completed"
    rows = trial_rows(tmp_path / "s", experiment.id)
    assert len(rows) == 12
    assert {r["case_id"] for r in rows if r["outcome"] == "passed"} == {c.id for c in CASES}
    errors = [s for s in scores_of(tmp_path / "s", experiment.id, "answer_match") if s["error"]]
    assert {s["case_id"] for s in errors} == {"huge"}
    assert all("could not be scored" in s["error"] for s in errors)


def test_an_exception_whose_message_raises_is_still_a_typed_failure(tmp_path):
    class Weird(Exception):
        def __str__(self) -> str:
            raise RuntimeError("no message")

    def agent(question: str) -> str:
        if "2 +" in question:
            raise Weird()
        return correct(question) + " \ud800" if "3 +" in question else correct(question)

    experiment = run(tmp_path / "s", agent)
    rows = trial_rows(tmp_path / "s", experiment.id)
    failed = [r for r in rows if r["outcome"] == "failed"]
    assert {r["case_id"] for r in failed} == {"q2"} and {r["failure_type"] for r in failed} == {"agent_error"}
    assert all(r["error_message"].startswith("Weird: <the exception") for r in failed)
    assert sum(r["outcome"] == "passed" for r in rows) == 8


class _BrokenResponse(Exception):
    """An SDK-shaped error whose lazily built ``response`` breaks as it is read."""

    @property
    def response(self) -> object:
        raise RuntimeError("the response could not be built")


class _BrokenStatus(Exception):
    @property
    def status_code(self) -> int:
        raise ZeroDivisionError("no status")


class _BrokenHeaders(Exception):
    """A 429 whose headers' lookup breaks: still a rate limit, with no Retry-After said."""

    status_code = 429

    class headers:  # lower-case: an attribute, as an SDK response has it
        @staticmethod
        def get(name: str) -> str:
            raise KeyError(name)


def test_an_exception_whose_sdk_attributes_raise_is_still_a_typed_failure_of_that_trial(tmp_path):
    raised = {"1 +": _BrokenResponse("down"), "2 +": _BrokenStatus("odd"), "3 +": _BrokenHeaders("slow")}

    def agent(question: str) -> str:
        for part, error in raised.items():
            if part in question:
                raise error
        return correct(question)

    experiment = evaluate(agent, DATASET, attempts=1, concurrency=1, timeout=1, store=tmp_path / "s", progress="none")
    typed = {r["case_id"]: (r["failure_type"], r["error_message"]) for r in trial_rows(tmp_path / "s", experiment.id)}
    assert typed == {
        "q1": ("agent_error", "_BrokenResponse: down"),
        "q2": ("agent_error", "_BrokenStatus: odd"),
        "q3": ("timeout_after_rate_limit", typed["q3"][1]),  # waited 1, 2 s... until the trial's second ran out
        "q4": (None, None),
        "q5": (None, None),
    }


def test_validate_rejects_unstorable_values_with_line_and_field(tmp_path):
    path = tmp_path / "cases.jsonl"
    path.write_text(
        '{"id": "ok", "input": "What is 1 + 1?", "expected_output": "2"}\n'
        '{"id": "big", "input": "x", "expected_output": "1", "max_tool_calls": 100000000000000000000}\n'
        '{"id": "turns", "input": "x", "expected_output": "1", "max_turns": 1e20}\n'
        '{"id": "s", "input": "hi \\ud800", "expected_output": "1"}\n'
        '{"id": "m", "input": "x", "expected_output": "1", "metadata": {"notes": ["fine", "bad \\udc00"]}}\n'
        '{"id": "pair", "input": "a smile \\ud83d\\ude00", "expected_output": "1"}\n',
        encoding="utf-8",
    )
    with pytest.raises(DatasetError) as info:
        load_file(path)
    problems = [(p.line, p.field, p.message) for p in info.value.problems]
    assert [(line, field) for line, field, _ in problems] == [
        (2, "max_tool_calls"),
        (3, "max_turns"),
        (4, "input"),
        (5, "metadata.notes"),
    ]
    assert "at most 1,000,000" in problems[0][2]
    assert "lone surrogate" in problems[2][2]


def test_a_micro_batch_whose_spans_pass_an_arrow_column_s_limit_saves_every_trial(tmp_path, monkeypatch):
    """The runner encoded a micro-batch's spans as one Arrow batch, whose JSON columns hold at most 2 GB: past it
    (a thousand trials of agents that capture long prompts) the run raised ColumnTooLarge and saved no trial. The
    limit is lowered here to what a few trials' spans take; the batch is encoded in as many parts as it needs."""
    from agenteval_exporters import encode

    monkeypatch.setattr(encode, "MAX_COLUMN_BYTES", 20_000)
    result = evaluate("mock", "arithmetic", cases=40, attempts=2, store=tmp_path / "s", progress="none")
    store = Store(tmp_path / "s")
    assert store.rows("SELECT count(*) AS n, count(DISTINCT trial_id) AS d FROM trials") == [{"n": 80, "d": 80}]
    (spans,) = store.rows("SELECT count(DISTINCT trace_id) AS traces FROM spans")
    assert spans == {"traces": 80} and result.summary.trials == 80
    assert store.rows("SELECT count(DISTINCT trial_id) AS n FROM scores") == [{"n": 80}]


def test_an_endless_sync_stream_is_no_longer_read_once_its_trial_timed_out(tmp_path):
    """The harness reads a sync agent's generator on its worker; it read on past the trial's timeout, so an endless
    one grew the run's memory for as long as the run lasted (a 16-way run was OOM-killed with nothing saved)."""
    closed, test_over = threading.Event(), threading.Event()

    def endless():
        try:
            while not test_over.is_set():  # ends only once the test is over, fixed or not
                yield ""
        finally:
            closed.set()

    def agent(question: str):
        return endless() if "2 +" in question else correct(question)

    try:
        experiment = evaluate(agent, DATASET, attempts=1, timeout=0.2, store=tmp_path / "s", progress="none")
        failed = [r for r in trial_rows(tmp_path / "s", experiment.id) if r["outcome"] == "failed"]
        assert [(r["case_id"], r["failure_type"]) for r in failed] == [("q2", "timeout")]
        assert closed.wait(10), "the harness still reads the stream of a trial it gave up on"
    finally:
        test_over.set()


def test_an_endless_async_stream_that_never_awaits_costs_its_trial_only(tmp_path):
    """The harness read an async agent's generator on the event loop without ever giving the loop a turn, so one
    that yields without awaiting held the loop for good: the trial's timeout never fired and the run hung."""
    read_on = []

    async def endless():
        started = time.monotonic()
        while time.monotonic() - started < 10:  # a way out, so the run before the fix ends (and the test fails)
            yield ""
        read_on.append(True)

    async def agent(question: str):
        return endless() if "2 +" in question else correct(question)

    experiment = evaluate(agent, DATASET, attempts=1, timeout=0.2, store=tmp_path / "s", progress="none")
    failed = [r for r in trial_rows(tmp_path / "s", experiment.id) if r["outcome"] == "failed"]
    assert [(r["case_id"], r["failure_type"]) for r in failed] == [("q2", "timeout")]
    assert not read_on, "the stream was read past its trial's timeout"


def test_an_exception_whose_text_never_comes_costs_its_trial_not_the_run(tmp_path):
    """A sync agent's exception whose __str__ never returned froze the whole run: its text was read on the event
    loop, recording the trial's error, and not even Ctrl-C got through (found by a hostile check). It is read on
    the agent's worker first, so only that trial waits, until its timeout. (In a process of its own: before the
    fix it never ended.)"""
    import subprocess
    import sys

    agent = tmp_path / "silent.py"
    agent.write_text(
        "import threading\n\n"
        "class Silent(Exception):\n"
        "    def __str__(self):\n"
        "        threading.Event().wait()\n\n"
        "def answer(question):\n"
        "    if question == 'hang':\n"
        "        raise Silent()\n"
        "    return '4'\n"
    )
    cases = tmp_path / "cases.jsonl"
    cases.write_text(
        "".join(f'{{"id": "{q}", "input": "{q}", "expected_output": "4"}}\n' for q in ("hang", "2+2", "1+3"))
    )
    ran = subprocess.run(
        [
            sys.executable,
            "-m",
            "agenteval",
            "run",
            "--dataset",
            str(cases),
            "--agent",
            f"{agent}:answer",
            "--attempts",
            "1",
            "--timeout",
            "1",
            "--store",
            str(tmp_path / "s"),
            "--quiet",
        ],
        capture_output=True,
        text=True,
        timeout=60,
        cwd=tmp_path,
    )
    assert ran.returncode == 0, ran.stderr
    outcomes = {
        r["case_id"]: (r["outcome"], r["failure_type"])
        for r in Store(tmp_path / "s").rows("SELECT case_id, outcome, failure_type FROM trials")
    }
    assert outcomes == {"hang": ("failed", "timeout"), "2+2": ("passed", None), "1+3": ("passed", None)}
