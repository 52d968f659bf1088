"""No confident wrong number from a run: a timeout is a timeout, an agent cannot end the run quietly,
resume keeps the caller's word, and content capture off does not turn right answers into wrong ones."""

from __future__ import annotations

import asyncio
import json
import os
import subprocess
import sys
import time

import pytest

from agenteval import configure_capture
from agenteval.dataset import Case, Dataset
from agenteval.errors import AgentevalError
from agenteval.run import RunRefused, evaluate
from agenteval.scorers import rescore
from agenteval.store import Store


def dataset(*ids: str) -> Dataset:
    cases = [Case(id=i, input=f"What is {n} + 0?", expected_output=str(n), category="c") for n, i in enumerate(ids)]
    return Dataset("tiny", "tiny(test)", f"hash-{len(ids)}", cases)


def outcomes(store, experiment_id) -> dict[str, tuple[str, str | None]]:
    rows = Store(store).rows(
        "SELECT case_id, outcome, failure_type, error_message FROM trials WHERE experiment_id = ?", [experiment_id]
    )
    return {r["case_id"]: (r["outcome"], r["failure_type"], r["error_message"]) for r in rows}


def answer(question: str) -> str:
    return question.split()[2]


def test_an_async_agent_that_blocks_the_loop_past_its_timeout_is_a_timeout(tmp_path, capsys):
    async def agent(question: str) -> str:
        if "0 +" in question:
            time.sleep(2.0)  # blocks the event loop: no timer can fire meanwhile
        else:
            await asyncio.sleep(0.01)
        return answer(question)

    experiment = evaluate(
        agent, dataset("blocks", "fine"), attempts=1, timeout=0.5, concurrency=2, store=tmp_path, progress="plain"
    )
    assert "the event loop was blocked for " in capsys.readouterr().err
    found = outcomes(tmp_path, experiment.id)
    assert found["blocks"][:2] == ("failed", "timeout")
    assert "event loop was blocked" in found["blocks"][2]
    assert found["fine"][0] in ("passed", "failed")  # its timer may only fire once the loop is free again
    if found["fine"][0] == "failed":
        assert found["fine"][1] == "timeout"


def test_an_agent_that_swallows_its_cancellation_still_times_out(tmp_path):
    async def agent(question: str) -> str:
        try:
            await asyncio.sleep(30)
        except asyncio.CancelledError:
            pass  # refuses to stop, and answers anyway
        return answer(question)

    experiment = evaluate(agent, dataset("stubborn"), attempts=2, timeout=0.2, store=tmp_path, progress="none")
    assert experiment.summary.failures_by_type == {"timeout": 2}
    assert experiment.summary.passed == 0


class AgentAbort(BaseException):
    """An agent's own BaseException subclass, as some frameworks define to unwind past ``except Exception``."""


@pytest.mark.parametrize("kind", ["sync", "async"])
@pytest.mark.parametrize(
    ("raised", "message"),
    [
        (SystemExit(0), "SystemExit"),
        (KeyboardInterrupt(), "KeyboardInterrupt"),
        (AgentAbort("gave up"), "AgentAbort"),
        (asyncio.CancelledError("the agent's own"), "CancelledError"),
        # A future cannot carry these two as they are: a sync agent's StopIteration never reported back (the trial
        # waited out its timeout) and its GeneratorExit closed the run's coroutines. A StopIteration is recorded as
        # the agent raised it, not as the RuntimeError a coroutine it passes through turns it into.
        (StopIteration("done"), "StopIteration: done"),
        (GeneratorExit("closed"), "GeneratorExit"),
    ],
    ids=["sys.exit", "KeyboardInterrupt", "BaseException subclass", "CancelledError", "StopIteration", "GeneratorExit"],
)
def test_an_agent_cannot_end_the_run(tmp_path, kind, raised, message):
    """Whatever the agent raises, even sys.exit() or its own BaseException subclass, fails that trial at once
    (an agent_error, not a timeout) and costs no other."""

    def sync_agent(question: str) -> str:
        if "0 +" in question:
            raise raised
        return answer(question)

    async def async_agent(question: str) -> str:
        return sync_agent(question)

    agent = sync_agent if kind == "sync" else async_agent
    experiment = evaluate(agent, dataset("exits", "a", "b"), attempts=2, timeout=20, store=tmp_path, progress="none")
    assert experiment.status == "completed"
    found = outcomes(tmp_path, experiment.id)
    assert found["exits"][:2] == ("failed", "agent_error")
    assert found["exits"][2].startswith(message)
    assert found["a"][0] == found["b"][0] == "passed"
    assert experiment.summary.trials == 6


def test_a_stopiteration_from_an_agent_is_recorded_as_the_agents_own_exception(tmp_path):
    """A StopIteration leaving a coroutine or generator becomes Python's ``RuntimeError: coroutine raised
    StopIteration``, and a sync agent's call always passes through the run's coroutines: the trial said RuntimeError
    and lost the agent's message. It now records the StopIteration, whichever way the agent raised it."""

    def empty_next(question: str) -> str:
        return next(x for x in [] if x)

    def streams_then_stops(question: str):
        yield "4"
        raise StopIteration("halted mid-stream")

    async def streams_async_then_stops(question: str):
        yield "4"
        raise StopIteration("halted async")

    expected = {
        empty_next: "StopIteration: ",
        streams_then_stops: "StopIteration: halted mid-stream",
        streams_async_then_stops: "StopIteration: halted async",
    }
    for agent, message in expected.items():
        store = tmp_path / agent.__name__
        experiment = evaluate(agent, dataset("stops"), attempts=1, timeout=20, store=store, progress="none")
        assert outcomes(store, experiment.id)["stops"] == ("failed", "agent_error", message), agent.__name__


def run_json(tmp_path, agent_source: str, *options: str) -> subprocess.CompletedProcess[str]:
    """``agenteval run --json`` over the arithmetic dataset with ``answer`` from a file holding ``agent_source``."""
    agent_file = tmp_path / "agent_file.py"
    agent_file.write_text(agent_source)
    return subprocess.run(
        [sys.executable, "-m", "agenteval.cli", "run", "--dataset", "arithmetic", *options]
        + ["--agent", f"{agent_file}:answer", "--json"],
        capture_output=True,
        text=True,
        env={**os.environ, "AGENTEVAL_STORE": str(tmp_path / "store")},
        timeout=120,
    )


def test_sys_exit_in_an_agent_file_gives_a_summary_and_the_right_exit_code(tmp_path):
    done = run_json(tmp_path, "import sys\n\ndef answer(question):\n    sys.exit(0)\n", "--cases", "3")
    assert done.returncode == 0, done.stderr
    assert '"agent_error": 9' in done.stdout


def test_run_json_keeps_stdout_for_the_summary_when_the_agent_prints(tmp_path):
    """With --json, stdout is for a program (``| jq``): an agent that prints, or starts a process that does,
    put its lines before the JSON, and nothing could read the summary. They go to stderr while the run lasts."""
    chatty = (
        "import os, sys\n\n"
        "def answer(question):\n"
        "    print('thinking about', question)\n"
        "    os.system(f'{sys.executable} -c \"print(123456789)\"')\n"
        "    return question.split()[2]\n"
    )
    done = run_json(tmp_path, chatty, "--cases", "2", "--attempts", "1")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["trials"] == 2
    assert done.stderr.count("thinking about") == 2 and done.stderr.count("123456789") == 2, done.stderr


def test_resume_refuses_options_that_differ_from_the_stored_run(tmp_path):
    first = evaluate("mock", "arithmetic", cases=4, attempts=3, store=tmp_path, progress="none")
    with pytest.raises(RunRefused) as refused:
        evaluate("mock", "arithmetic", attempts=5, resume=first.id, store=tmp_path, progress="none", timeout=9)
    message = str(refused.value)
    assert "attempts (5 given, 3 in the run)" in message and "timeout (9 given, 120.0 in the run)" in message
    # Concurrency is how fast, not what: it may change. Options left out take the stored ones.
    again = evaluate("mock", "arithmetic", resume=first.id, concurrency=1, store=tmp_path, progress="none")
    assert again.summary.trials == 12 and again.summary.this_run["trials"] == 0


def test_the_command_line_refuses_a_resume_with_other_options(tmp_path):
    env = {**os.environ, "AGENTEVAL_STORE": str(tmp_path)}
    base = [sys.executable, "-m", "agenteval.cli", "run"]
    first = subprocess.run(
        [*base, "--dataset", "arithmetic", "--agent", "mock", "--cases", "2", "-q"], env=env, capture_output=True
    )
    assert first.returncode == 0
    (experiment,) = Store(tmp_path).rows("SELECT DISTINCT experiment_id FROM experiments")
    refused = subprocess.run(
        [*base, "--resume", experiment["experiment_id"], "--attempts", "5"], env=env, capture_output=True, text=True
    )
    assert refused.returncode == 1 and "attempts (5 given, 3 in the run)" in refused.stderr


@pytest.fixture
def content_off():
    configure_capture(enabled=False)
    yield
    configure_capture(enabled=True)


def test_content_capture_off_still_scores_the_replies_at_run_time(tmp_path, content_off):
    experiment = evaluate("mock", "arithmetic", cases=6, attempts=2, store=tmp_path, progress="none")
    assert experiment.summary.pass_rate == 1.0
    stored = Store(tmp_path).rows("SELECT count(*) FILTER (WHERE reply IS NOT NULL) AS replies FROM trials")
    assert stored == [{"replies": 0}]  # nothing of the content was stored
    spans = Store(tmp_path).rows(
        "SELECT count(*) AS n FROM spans WHERE attributes LIKE '%gen_ai.output.messages%' "
        "OR attributes LIKE '%gen_ai.tool.call.arguments%'"
    )
    assert spans == [{"n": 0}]


def test_rescoring_without_content_leaves_content_scorers_unjudged_and_says_so(tmp_path, content_off):
    experiment = evaluate(
        "mock", "arithmetic", cases=6, attempts=2, store=tmp_path, progress="none", agent_options={"seed": "1"}
    )
    result = rescore(Store(tmp_path), experiment.id)
    assert result.not_scored == {"answer_match": 12}
    current = Store(tmp_path).rows(
        """SELECT scorer, count(*) AS n, bool_and(passed) AS all_passed FROM (
               SELECT * FROM scores
               QUALIFY row_number() OVER (PARTITION BY trial_id, scorer ORDER BY scored_at DESC) = 1
           ) GROUP BY scorer ORDER BY scorer"""
    )
    # answer_match keeps its run-time judgement; tool_use (tool names are not content) was re-run.
    assert current == [
        {"scorer": "answer_match", "n": 12, "all_passed": True},
        {"scorer": "tool_use", "n": 12, "all_passed": True},
    ]
    env = {**os.environ, "AGENTEVAL_STORE": str(tmp_path)}
    said = subprocess.run(
        [sys.executable, "-m", "agenteval.cli", "rescore", experiment.id], env=env, capture_output=True, text=True
    )
    assert said.returncode == 0
    assert "not re-run, for want of message content" in said.stdout and "answer_match (12 trials)" in said.stdout
    assert "pass rate with the current scores: 100.0%" in said.stdout


@pytest.mark.parametrize(
    ("dataset_spec", "options", "refusal"),
    [
        ("arithmetic", {"cases": 0}, "--cases must be between 1 and"),
        ("file", {"sample": 0}, "--sample must be at least 1"),
        ("file", {"sample": -5}, "--sample must be at least 1"),
    ],
    ids=["cases=0", "sample=0", "sample=-5"],
)
def test_zero_cases_or_a_sample_of_zero_is_refused_not_taken_for_every_case(tmp_path, dataset_spec, options, refusal):
    # The command line refuses these (IntRange); from Python, 0 ran the whole dataset, at the model's cost.
    if dataset_spec == "file":
        dataset_spec = tmp_path / "cases.jsonl"
        dataset_spec.write_text('{"input": "What is 1 + 0?", "expected_output": "1"}\n')
    with pytest.raises(AgentevalError, match=refusal):
        evaluate(answer, dataset_spec, attempts=1, store=tmp_path / "s", progress="none", **options)
    assert not (tmp_path / "s" / "trials").exists()


def test_a_sync_callable_that_returns_a_coroutine_is_awaited_not_scored_as_its_repr(tmp_path):
    # A lambda or a plain wrapper around an async agent: its answer is what the coroutine returns, not
    # "<coroutine object ...>" scored as a wrong answer (with the coroutine never run).
    async def real_agent(question: str) -> str:
        await asyncio.sleep(0.01)
        return answer(question)

    experiment = evaluate(
        lambda question: real_agent(question), dataset("a", "b"), attempts=2, store=tmp_path, progress="none"
    )
    assert experiment.summary.passed == 4
    assert {row[0] for row in outcomes(tmp_path, experiment.id).values()} == {"passed"}


def test_an_agent_that_changes_the_working_directory_cannot_move_the_store(tmp_path):
    # The default store, ./.agenteval, is relative; an agent that works in a folder of its own (os.chdir into a
    # workspace) must not send the rest of the run's files into a second store there.
    workspace = tmp_path / "workspace"
    workspace.mkdir()
    agent_file = tmp_path / "wanderer.py"
    agent_file.write_text(
        f"import os\n\ndef answer(question):\n    os.chdir({str(workspace)!r})\n    return question.split()[2]\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "agenteval.cli", "run", "--dataset", "arithmetic", "--cases", "3", "--attempts", "2"]
        + ["--agent", f"{agent_file}:answer", "-q"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        env={k: v for k, v in os.environ.items() if k != "AGENTEVAL_STORE"},
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    assert not (workspace / ".agenteval").exists()
    store = Store(tmp_path / ".agenteval")
    assert store.rows("SELECT status FROM experiments") == [{"status": "completed"}]
    assert store.rows("SELECT count(*) AS n FROM trials") == [{"n": 6}]


FORKING_AGENT = """
import os


def _fork_and_wait(question):
    # A child for some work of its own, which forgets os._exit and returns, as a function does: into the harness.
    child = os.fork()
    if child == 0:
        return "the child's reply"
    _, status = os.waitpid(child, 0)
    return question.split()[2] + " (child ended with " + str(os.waitstatus_to_exitcode(status)) + ")"


def answer(question):
    return _fork_and_wait(question)


async def answer_async(question):
    return _fork_and_wait(question)
"""


@pytest.mark.parametrize("function", ["answer", "answer_async"], ids=["sync", "async"])
def test_an_agent_that_forks_and_returns_in_the_child_costs_nothing(tmp_path, function):
    """The child of a fork inside the agent came back into the harness: a sync agent's child waited on the worker
    pool's queue, so a parent waiting for it hung its trial (and any pipe the run's output went to); an async
    agent's child ran the rest of the run itself, every trial again, into the same store. The child now ends at
    once, writing nothing, and the parent's trial goes on: every trial once, each passed."""
    (tmp_path / "forking_agent.py").write_text(FORKING_AGENT)
    cases = [{"id": f"c{n}", "input": f"What is {n} + 0?", "expected_output": str(n)} for n in range(4)]
    (tmp_path / "cases.jsonl").write_text("".join(json.dumps(case) + "\n" for case in cases))
    store = tmp_path / "store"
    done = subprocess.run(
        [sys.executable, "-m", "agenteval.cli", "run", "--dataset", str(tmp_path / "cases.jsonl")]
        + ["--agent", f"{tmp_path / 'forking_agent.py'}:{function}", "--attempts", "2", "--timeout", "20"]
        + ["--store", str(store), "--json"],
        capture_output=True,
        text=True,
        timeout=120,  # a bound on a hang, not a measure of speed
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)  # one document: the child flushed no copy of the parent's output
    assert summary["trials"] == 8 and summary["status"] == "completed", summary
    rows = Store(store).rows("SELECT trial_id, outcome, reply FROM trials")
    assert len(rows) == len({row["trial_id"] for row in rows}) == 8
    assert {row["outcome"] for row in rows} == {"passed"}
    assert all(row["reply"].endswith("(child ended with 0)") for row in rows), rows
