"""The built-in ``support`` dataset end to end as the README runs it: the reference agent, simulated users and
the LLM judge, each through the real OpenAI SDK against the loopback model server, on the command line.

Every kind of case in it runs: conversations with a simulated user (who gives details only when asked),
scripted turns, and single questions; criteria (``must_contain``, ``acceptable_outputs``, lengths) are scored
by their scorers and each rubric reaches the judge."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import model_servers as ms

from agenteval.analysis import build_report
from agenteval.dataset._catalog import load_dataset
from agenteval.store import Store

DATASET = load_dataset("support")
SIMULATED = [case for case in DATASET if case.simulated_user]
DETAIL = "It was delivered 12 days ago and I have the order number."
# Replies that meet a case's criteria as a model would word them (the stand-in answers with the expected
# output alone otherwise, which is too short for some criteria).
WORDED = {
    "support-delivery-03": "The crew costs £29 and removing the old fridge £15 more: £44 in all.",
    "support-warranty-05": "We repair first; if a repair is not possible within 21 days, we replace it.",
    "support-care-plans-02": "You can cancel Care Basic at any time with one month's notice.",
}


def is_judge(request: ms.Request) -> bool:
    return "You grade an AI assistant" in request.system_text()


def is_simulator(request: ms.Request) -> bool:
    return "You play a user" in request.system_text()


def respond_as_the_agent():
    stand_in = ms.CaseResponder(
        DATASET.cases,
        overrides={
            (case.input if case.turns is None else case.turns[0]): _worded(case.id)
            for case in DATASET
            if case.id in WORDED
        },
    )

    def respond(request: ms.Request) -> ms.Reply:
        if is_judge(request):
            return ms.tool_call("grade", {"score": 1.0, "passed": True, "reasoning": "follows the rubric"})
        if is_simulator(request):
            # One detail when the conversation so far has none from the user, then the goal is met.
            transcript = request.last_user_text().split("The conversation so far:")[-1]
            return ms.text("[DONE]" if DETAIL in transcript else DETAIL, input_tokens=40, output_tokens=9)
        return stand_in(request)

    return respond


def _worded(case_id: str):
    """The stand-in's reply for a case, worded: it still calls the case's tools first."""
    case = next(c for c in DATASET if c.id == case_id)

    def reply(request: ms.Request) -> ms.Reply:
        if not ms._answered_tools(request):
            return ms.Reply(tool_calls=[ms.ToolCall("search_documents", json.dumps({"query": case.input}))])
        return ms.text(WORDED[case_id])

    return reply


def test_support_runs_with_simulated_users_and_the_judge_as_the_readme_shows(model_server, tmp_path):
    model_server.responder = respond_as_the_agent()
    url, store = model_server.openai_url, tmp_path / "store"
    command = [
        *(sys.executable, "-m", "agenteval.cli", "run", "--dataset", "support"),
        *("--model", "openai/gpt-4o-mini", "--base-url", url),
        *("--simulate-users", "openai/gpt-4o-mini", "--simulator-base-url", url),
        *("--judge", "openai/gpt-4o-mini", "--judge-base-url", url),
        *("--attempts", "1", "--store", str(store), "--quiet"),
    ]
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=300, env={**os.environ, "OPENAI_API_KEY": "k"}
    )
    assert done.returncode == 0, done.stderr
    assert len(DATASET) == 20 and len(SIMULATED) == 10 and sum(bool(c.turns) for c in DATASET) == 5

    read = Store(store)
    (experiment,) = read.rows("SELECT experiment_id FROM experiments")
    report = build_report(read, experiment["experiment_id"])
    assert report.trials == 20 and report.outcomes.failed == 0
    assert report.outcomes.passed == 20, report.outcomes

    # Each simulated user spoke after the agent's first reply, with the detail it was asked for.
    talks = {c.case_id: c.turns for c in report.conversations}
    for case in SIMULATED:
        users = [text for role, text in talks[case.id] if role == "user"]
        assert users == [case.input, DETAIL], case.id
    roles = {t.role: t for t in report.tokens}
    assert roles["simulated_user"].model_calls == 2 * len(SIMULATED)  # the detail, then [DONE]
    # One judgement a trial. A try the model server did not answer (a dropped connection under a loaded machine's
    # test run) is sent again and counted as a model call too, as every try is: those failed, and say why.
    judge_calls = read.rows(
        "SELECT status_code, error_type, status_message FROM spans WHERE role = 'judge' AND operation = 'chat'"
    )
    answered = [c for c in judge_calls if c["status_code"] != "ERROR"]
    assert len(answered) == 20, judge_calls
    assert roles["judge"].model_calls == len(judge_calls)

    # Every criterion was scored by its scorer, and every rubric was put before the judge.
    scored = {
        (r["case_id"], r["scorer"]): r["passed"]
        for r in read.rows("SELECT t.case_id, scorer, s.passed FROM scores s JOIN trials t USING (trial_id)")
    }
    for case in DATASET:
        assert scored[case.id, "llm_judge"] is True
        if case.must_contain:
            assert scored[case.id, "must_contain"] is True, case.id
        if case.min_length or case.max_length:
            assert scored[case.id, "reply_length"] is True, case.id
    judged = " ".join(r.last_user_text() for r in model_server.requests if is_judge(r))
    assert all(case.rubric in judged for case in DATASET)
