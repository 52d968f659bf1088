"""--request-timeout and --max-retries: how long one model request may take and how often a transient failure is sent
again, for every command that calls a model. Before them a request had 60 s and 5 retries, whatever the model: a slow
local model that answers in 90 s could never be run, and a judge that hung held a rescore about 6 minutes an answer.
Each test runs the real OpenAI SDK against a loopback server whose answers are held for a while."""

from __future__ import annotations

import json

import model_servers as ms
import pytest
from click.testing import CliRunner

from agenteval import evaluate
from agenteval.cli import main
from agenteval.errors import UsageError
from agenteval.store import Store

HELD = 3.0
"""Seconds the server holds each answer: far above the short timeouts given here, far below their defaults."""


def invoke(*arguments: str) -> tuple[int, str]:
    result = CliRunner().invoke(main, list(arguments))
    return result.exit_code, result.output


def held(request: ms.Request) -> ms.Reply:
    return ms.slow(HELD, ms.text("4"))


def test_a_run_whose_model_is_slower_than_the_request_timeout_fails_each_trial_once_retried(model_server, tmp_path):
    """Two trials, each request given up after 0.5 s and sent again once: 4 requests in all, each trial an
    infrastructure llm_error naming the option; a resume with a longer --request-timeout then answers them."""
    model_server.responder = held
    store = str(tmp_path / "store")
    common = ("--model", "openai/slow-local", "--base-url", model_server.openai_url, "--store", store, "--json")
    code, output = invoke(
        "run", "--dataset", "arithmetic", "--cases", "2", "--attempts", "1", *common,
        "--request-timeout", "0.5", "--max-retries", "1",
    )  # fmt: skip
    assert code == 0, output
    summary = json.loads(output)
    eid = summary["experiment_id"]
    assert len(model_server.requests) == 4  # 2 trials x (1 + 1 retry)
    trials = Store(store).rows("SELECT outcome, failure_type, error_message FROM trials WHERE experiment_id = ?", [eid])
    assert [(t["outcome"], t["failure_type"]) for t in trials] == [("failed", "llm_error")] * 2
    assert all("no whole answer within 0.5 s; --request-timeout" in t["error_message"] for t in trials), trials
    options = Store(store).rows("SELECT options FROM experiments WHERE experiment_id = ?", [eid])[0]["options"]
    assert {k: json.loads(options)[k] for k in ("request_timeout", "max_retries")} == {
        "request_timeout": 0.5,
        "max_retries": 1,
    }

    # A resume may give them anew (they bound how the run waits, not what it asks).
    code, output = invoke("run", "--resume", eid, "--retry-failed", "infra", "--request-timeout", "30", *common[4:])
    assert code == 0, output
    assert len(model_server.requests) == 6  # one request each, answered after HELD seconds
    resumed = json.loads(output)
    assert (resumed["trials"], resumed["failed"]) == (2, 0), resumed  # answered ("4": right or wrong, not failed)


def test_a_rescore_whose_judge_hangs_gives_each_answer_up_after_the_request_timeout(model_server, tmp_path):
    """A judge that never answers in time: with --request-timeout 0.5 --max-retries 0 each answer costs one request
    and is a scorer error (which rescore --only-errors can judge again later), not 6 minutes of waiting."""
    store = str(tmp_path / "store")
    experiment = evaluate("mock", "arithmetic", cases=3, attempts=1, store=store, progress="none")
    model_server.responder = held
    code, output = invoke(
        "rescore", experiment.id, "--judge", "openai/judge", "--judge-base-url", model_server.openai_url,
        "--request-timeout", "0.5", "--max-retries", "0", "--store", store, "--json",
    )  # fmt: skip
    assert code == 0, output
    assert len(model_server.requests) == 3
    errors = Store(store).rows(
        "SELECT error FROM scores WHERE experiment_id = ? AND scorer = 'llm_judge' AND error IS NOT NULL",
        [experiment.id],
    )
    assert len(errors) == 3 and all("0.5 s" in e["error"] for e in errors), errors


@pytest.mark.parametrize(
    ("arguments", "said"),
    [
        (("--request-timeout", "0"), "--request-timeout"),
        (("--request-timeout", "nan"), "--request-timeout"),
        (("--request-timeout", "inf"), "--request-timeout must be a positive number of seconds, not inf"),
        (("--max-retries", "-1"), "--max-retries"),
    ],
)
def test_unusable_limits_are_refused_naming_the_option(tmp_path, arguments, said):
    code, output = invoke("run", "--dataset", "arithmetic", "--agent", "mock", "--store", str(tmp_path), *arguments)
    assert code in (1, 2) and said in output, output
    assert not (tmp_path / "experiments").exists()


@pytest.mark.parametrize(
    ("limits", "said"),
    [
        ({"request_timeout": -1}, "--request-timeout must be a positive number of seconds, not -1"),
        ({"request_timeout": "60"}, "request_timeout"),
        ({"max_retries": 1.5}, "max_retries"),
        ({"max_retries": True}, "max_retries"),
    ],
)
def test_unusable_limits_from_python_are_refused(tmp_path, limits, said):
    with pytest.raises(UsageError, match=said):
        evaluate("mock", "arithmetic", cases=2, store=tmp_path, progress="none", **limits)
