"""A scorer that cannot judge (an LLM judge whose API is down) says nothing about the agent: the trial is a
``scorer_error`` failure counted as infrastructure, never a wrong answer, in the run's summary, the ``trials`` view,
the report, the dashboard and the gate; and a later rescore that succeeds turns it back into passed or wrong, with
the trial's row never rewritten. Real runs through the real openai client against a loopback server, real Parquet
and DuckDB, the real command line and dashboard process."""

from __future__ import annotations

import json

import httpx
import model_servers as ms
from click.testing import CliRunner
from dashboard_server import dashboard

from agenteval import evaluate
from agenteval.cli import main
from agenteval.dataset._cases import Case, Dataset, dataset_hash
from agenteval.render._console import run_summary
from agenteval.scorers import rescore
from agenteval.store import Store

CASES = [Case(id=f"q{n}", input=f"Question {n}?", expected_output=f"Answer {n}.") for n in range(10)]
"""Ten cases: as many as the gate needs shared to judge."""
JUDGE = "openai/judge-model"


def is_judge(request: ms.Request) -> bool:
    return "You grade an AI assistant" in request.system_text()


def judge_down(request: ms.Request) -> ms.Reply:
    """The judge's API is out: a 503 every time (Retry-After 0, so the client's own retries do not wait)."""
    return ms.Reply(status=503, error={"kind": "server"}, headers={"retry-after": "0"})


def judge_up(request: ms.Request) -> ms.Reply:
    return ms.tool_call("grade", {"score": 1.0, "passed": True, "reasoning": "matches the expected answer"})


def serve(server: ms.ModelServer, judge: ms.Responder) -> None:
    """The agent answers each question right; the judge answers as ``judge`` does."""

    def respond(request: ms.Request) -> ms.Reply:
        if is_judge(request):
            return judge(request)
        return ms.text(request.last_user_text().replace("Question", "Answer").replace("?", "."))

    server.responder = respond


def run(server: ms.ModelServer, **options: str):
    cases = list(CASES)
    return evaluate(
        "",
        Dataset("judged", "judged", dataset_hash(cases), cases),
        model="openai/agent-model",
        base_url=server.openai_url,
        judge=JUDGE,
        judge_base_url=server.openai_url,
        attempts=1,
        progress="none",
        **options,
    )


def agent_calls(server: ms.ModelServer) -> int:
    return sum(not is_judge(r) for r in server.requests)


def trials(experiment_id: str, view: str = "trials") -> list[dict]:
    return Store().rows(
        f"SELECT outcome, passed, failure_type, infrastructure, error_message FROM {view} WHERE experiment_id = ?",
        [experiment_id],
    )


def cli(*args: str) -> tuple[int, str]:
    done = CliRunner().invoke(main, list(args))
    return done.exit_code, done.output


def test_a_judge_outage_is_an_infrastructure_failure_until_a_rescore_judges_the_answers(model_server):
    serve(model_server, judge_up)
    baseline = run(model_server).experiment_id
    serve(model_server, judge_down)
    outage = run(model_server)
    candidate = outage.experiment_id

    summary = outage.summary
    assert summary.failures_by_type == {"scorer_error": 10}
    assert (summary.passed, summary.wrong, summary.failed, summary.infrastructure_failures) == (0, 0, 10, 10)
    assert summary.pass_rate == 0.0  # an error never passed: the pass rate is what it was
    assert (outage.summary.this_run["failed"], outage.summary.this_run["infrastructure"]) == (10, 10)
    printed = run_summary(summary)
    assert "passed 0 · wrong answers 0 · failures 10 (10 infrastructure)" in printed
    assert "failures: scorer_error 10" in printed

    judged = trials(candidate)
    assert {(t["outcome"], t["passed"], t["failure_type"], t["infrastructure"]) for t in judged} == {
        ("failed", False, "scorer_error", True)
    }
    assert all(t["error_message"].startswith("scorer llm_judge could not judge the answer: ") for t in judged)
    assert {t["failure_type"] for t in trials(candidate, "trial_history")} == {None}  # the trial itself answered

    code, report = cli("report", candidate, "--format", "json")
    assert code == 0, report
    outcomes = json.loads(report)["outcomes"]
    assert (outcomes["wrong"], outcomes["failed"], outcomes["infrastructure_failures"]) == (0, 10, 10)
    assert outcomes["failures_by_type"] == {"scorer_error": 10}
    with dashboard(str(Store().root)) as site:
        page = httpx.get(f"{site.rstrip('/')}/experiments/{candidate}")
    assert page.status_code == 200 and "scorer_error" in page.text

    code, decision = cli("gate", "--baseline", baseline, "--candidate", candidate)
    assert code == 3, decision  # refused: the judge, not the agent, decided these trials
    assert "(10 of 10) failed for infrastructure reasons" in decision
    assert f"agenteval rescore {candidate} --only-errors --judge {JUDGE}" in decision
    asked = agent_calls(model_server)  # the agent answered: re-running it is no remedy, and is not done
    assert run(model_server, resume=candidate, retry_failed="infra").summary.this_run["trials"] == 0
    assert agent_calls(model_server) == asked

    serve(model_server, judge_up)
    rescore(Store(), candidate, judge=JUDGE, judge_base_url=model_server.openai_url)
    assert {(t["outcome"], t["failure_type"], t["infrastructure"]) for t in trials(candidate)} == {
        ("passed", None, None)
    }
    code, report = cli("report", candidate, "--format", "json")
    outcomes = json.loads(report)["outcomes"]
    assert (outcomes["passed"], outcomes["failed"], outcomes["failures_by_type"]) == (10, 0, {})
    code, decision = cli("gate", "--baseline", baseline, "--candidate", candidate)
    assert code == 0, decision
