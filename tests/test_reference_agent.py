"""The reference agent (``--model``) against loopback servers through the real SDK clients: every built-in dataset
runs with it, each failure type is produced end to end, its version hashes model, prompt, parameters and tools,
rate-limit retries are not multiplied by the trial's, and the run's options record no key."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
from urllib.parse import parse_qs, urlsplit

import model_servers as ms
import pytest

from agenteval import evaluate
from agenteval.agents import ReferenceAgent, reference_agent
from agenteval.analysis import _experiments as ex
from agenteval.dataset import load_dataset
from agenteval.dataset._cases import Case, Dataset, dataset_hash
from agenteval.errors import UsageError
from agenteval.models import Model, RetryPolicy
from agenteval.run._plan import RunRefused
from agenteval.store import Store

BUILTIN = [("arithmetic", {"cases": 8}), ("mixed", {}), ("hard", {}), ("extended", {"sample": 24}), ("rag", {})]


def run(server, dataset, api=ms.OPENAI, **options):
    options.setdefault("attempts", 1)
    options.setdefault("concurrency", 8)
    options.setdefault("progress", "none")
    return evaluate("", dataset, model=f"{api}/test-model", base_url=server.url(api), **options)


@pytest.mark.parametrize("api", [ms.OPENAI, ms.ANTHROPIC])
@pytest.mark.parametrize(("name", "options"), BUILTIN, ids=[b[0] for b in BUILTIN])
def test_every_builtin_dataset_runs_with_the_reference_agent(model_server, api, name, options):
    dataset = load_dataset(name, cases=options.get("cases"))
    model_server.responder = ms.CaseResponder(dataset.cases)
    experiment = run(model_server, name, api, **options)
    summary = experiment.summary
    assert summary.failed == 0, summary.failures_by_type
    assert summary.trials == (len(dataset) if "sample" not in options else options["sample"])
    store = Store()
    tools = store.rows(
        "SELECT tool_name, count(*) AS n FROM spans WHERE experiment_id = ? AND operation = 'execute_tool' GROUP BY 1",
        [experiment.experiment_id],
    )
    assert tools, "the tools ran as real @tool spans"
    chats = store.rows(
        "SELECT provider, request_model, sum(input_tokens) AS tokens FROM spans "
        "WHERE experiment_id = ? AND operation = 'chat' GROUP BY ALL",
        [experiment.experiment_id],
    )
    assert [(c["provider"], c["request_model"]) for c in chats] == [(api, "test-model")] and chats[0]["tokens"] > 0
    if name == "rag":
        retrieved = store.rows(
            "SELECT count(*) AS n FROM spans WHERE experiment_id = ? AND operation = 'retrieval'",
            [experiment.experiment_id],
        )
        assert retrieved[0]["n"] > 0
    assert experiment.options["model"] == f"{api}/test-model"
    assert experiment.agent == "reference"


def _case(case_id: str, question: str, **fields) -> Case:
    return Case(id=case_id, input=question, expected_output=fields.pop("expected_output", "4"), **fields)


def _dataset(*cases: Case) -> Dataset:
    return Dataset("failures", "failures", dataset_hash(list(cases)), list(cases))


def _endless_tool_calls(request):
    return ms.tool_call("calculator", {"expression": "1 + 1"})


FAILURE_CASES = {
    "malformed arguments": (ms.tool_call("calculator", '{"expression": "2 +'), "invalid_model_output", False),
    "arguments off the schema": (ms.tool_call("calculator", {"formula": "2 + 2"}), "invalid_model_output", False),
    "a tool it was not offered": (ms.tool_call("rm_rf", {}), "invalid_model_output", False),
    "cut by the length limit": (ms.truncated("The answer is fo"), "output_truncated", False),
    "empty reply": (ms.text(""), "empty_output", False),
    "never answers": (_endless_tool_calls, "max_steps_exceeded", False),
    "quota": (ms.quota_exhausted(), "quota_exhausted", True),
    "server errors": (ms.server_error(500), "llm_error", True),
    "overloaded": (ms.overloaded(), "llm_error", True),
    "bad request": (ms.bad_request(), "llm_error", False),
}


@pytest.mark.parametrize("api", [ms.OPENAI, ms.ANTHROPIC])
# The loopback server sends a malformed tool input to Anthropic clients as a string (the real API's streamed
# JSON can be cut like that); pydantic warns when the instrumentation serialises that message object.
@pytest.mark.filterwarnings("ignore:Pydantic serializer warnings:UserWarning")
def test_each_failure_type_is_produced_end_to_end(model_server, api, monkeypatch):
    monkeypatch.setattr("agenteval.models._retry.DEFAULT_BASE_DELAY", 0.001)
    cases = [_case(f"case-{i}", question, expected_tools=("calculator",)) for i, question in enumerate(FAILURE_CASES)]
    model_server.responder = ms.CaseResponder(cases, {q: reply for q, (reply, _, _) in FAILURE_CASES.items()})
    experiment = run(model_server, _dataset(*cases), api, max_steps=3)
    rows = Store().rows(
        "SELECT c.input, t.failure_type, t.infrastructure FROM trials t JOIN cases c USING (experiment_id, case_id) "
        "WHERE t.experiment_id = ?",
        [experiment.experiment_id],
    )
    found = {row["input"]: (row["failure_type"], row["infrastructure"]) for row in rows}
    assert found == {question: (kind, infra) for question, (_, kind, infra) in FAILURE_CASES.items()}


def _chat_answer(message: dict, finish: str) -> ms.Reply:
    choice = {"index": 0, "finish_reason": finish, "message": {"role": "assistant", **message}}
    body = {"id": "c1", "object": "chat.completion", "created": 1, "model": "m", "choices": [choice]}
    return ms.Reply(body=json.dumps(body))


def test_tool_call_arguments_sent_as_an_object_are_the_arguments(model_server):
    """Some OpenAI-compatible servers and gateways send a tool call's arguments as a JSON object, not JSON text: the
    agent's json.loads raised TypeError and the trial was agent_error. They are the arguments, as Anthropic's are."""
    call = {"id": "c1", "type": "function", "function": {"name": "calculator", "arguments": {"expression": "2+2"}}}
    first = _chat_answer({"content": None, "tool_calls": [call]}, "tool_calls")

    def responder(request):
        tool_turns = [m for m in request.messages if m.get("role") == "tool"]
        return ms.text(f"It is {json.loads(tool_turns[0]['content'])}.") if tool_turns else first

    model_server.responder = responder
    experiment = run(model_server, _dataset(_case("object", "What is 2+2?", expected_tools=("calculator",))))
    sql = "SELECT failure_type, error_message, reply FROM trials WHERE experiment_id = ?"
    (trial,) = Store().rows(sql, [experiment.experiment_id])
    assert (trial["failure_type"], trial["reply"]) == (None, "It is 4."), trial["error_message"]
    sent_back = model_server.requests[-1].messages[2]["tool_calls"][0]["function"]["arguments"]
    assert json.loads(sent_back) == {"expression": "2+2"}


def test_written_turns_are_answered_with_the_conversation_so_far(model_server):
    case = _case("turns", "Hello?", turns=("What is 6 x 7?", "And doubled?"), expected_output="84")
    model_server.responder = lambda request: ms.text("42" if len(request.messages) < 4 else "84")
    experiment = run(model_server, _dataset(case))
    assert experiment.summary.passed == 1
    second = model_server.requests[-1].messages
    assert [m["role"] for m in second] == ["system", "user", "assistant", "user"]
    assert second[2]["content"] == "42" and second[3]["content"] == "And doubled?"


def test_a_trial_out_of_time_while_waiting_on_rate_limits_is_timeout_after_rate_limit(model_server):
    cases = [_case("limited", "Always rate limited?"), _case("slow", "Slow tool?")]
    model_server.responder = ms.CaseResponder(
        cases, {"Always rate limited?": ms.rate_limited(retry_after=0.2), "Slow tool?": ms.slow(5)}
    )
    experiment = run(model_server, _dataset(*cases), timeout=1.0)
    rows = Store().rows(
        "SELECT case_id, failure_type, infrastructure FROM trials WHERE experiment_id = ?", [experiment.experiment_id]
    )
    found = {row["case_id"]: (row["failure_type"], row["infrastructure"]) for row in rows}
    assert found == {"limited": ("timeout_after_rate_limit", True), "slow": ("timeout", False)}
    waits = Store().rows(
        "SELECT json_extract(attributes, '$.\"agenteval.rate_limit.waits\"')::INT AS waits FROM spans "
        "WHERE experiment_id = ? AND case_id = 'limited' AND operation = 'chat'",
        [experiment.experiment_id],
    )
    assert waits[0]["waits"] >= 2  # recorded on the span the timeout cut off


def test_rate_limit_retries_spent_by_the_model_layer_are_not_retried_again_by_the_trial(model_server):
    cases = [_case("limited", "Rate limited every time?")]
    model_server.responder = ms.CaseResponder(cases, {"Rate limited every time?": ms.rate_limited(retry_after_ms=1)})
    experiment = run(model_server, _dataset(*cases), timeout=30)
    (row,) = Store().rows("SELECT failure_type FROM trials WHERE experiment_id = ?", [experiment.experiment_id])
    assert row["failure_type"] == "timeout_after_rate_limit"
    assert len(model_server.requests) == RetryPolicy().max_retries + 1  # ours only: one layer, bounded


def test_the_version_hashes_model_prompt_parameters_and_tools(model_server):
    dataset = load_dataset("mixed")

    def version(**settings) -> str:
        agent = reference_agent(
            Model(settings.pop("name", "openai/m"), base_url=model_server.openai_url, **settings), dataset
        )
        from agenteval.agents._loading import LoadedAgent

        assert isinstance(agent, LoadedAgent) and isinstance(agent.fn, ReferenceAgent)
        return agent.version

    base = version()
    assert version() == base
    assert len({base, version(temperature=0.5), version(max_tokens=100), version(name="openai/other")}) == 4
    arithmetic = reference_agent(Model("openai/m", base_url=model_server.openai_url), load_dataset("arithmetic"))
    assert arithmetic.version != base  # other tools offered
    assert [s["name"] for s in arithmetic.fn.schemas] == ["calculator"]


@pytest.mark.parametrize("api", [ms.OPENAI, ms.ANTHROPIC])
def test_a_run_records_which_api_version_it_called_and_no_key(model_server, api, tmp_path):
    """The run's record and its agent's version left the base URL's query out: two runs against two API versions
    of one deployment recorded the same base URL and the same version."""
    model_server.responder = ms.CaseResponder(load_dataset("arithmetic").cases)
    secret = "sk-query-secret-0123456789"

    def recorded(version: str) -> tuple[str, str]:
        url = f"{model_server.url(api)}?api-version={version}&api-key={secret}"
        run = evaluate(
            "",
            "arithmetic",
            model=f"{api}/test-model",
            base_url=url,
            cases=2,
            attempts=1,
            store=tmp_path / "store",
            progress="none",
        )
        return run.options["base_url"], run.version

    (older_url, older_version), (newer_url, newer_version) = recorded("2024-06-01"), recorded("2025-01-01")
    assert older_url == f"{model_server.url(api)}?api-key=%2A%2A%2A&api-version=2024-06-01"
    assert newer_url == f"{model_server.url(api)}?api-key=%2A%2A%2A&api-version=2025-01-01"
    assert older_version != newer_version
    stored = Store(tmp_path / "store").rows("SELECT options FROM experiments ORDER BY started_at")
    assert [json.loads(row["options"])["base_url"] for row in stored] == [older_url, newer_url]
    assert secret not in repr(Store(tmp_path / "store").rows("SELECT * FROM experiment_history"))


def recorded_before_queries_were_kept(store, experiment):
    """``experiment`` as the code before 2026-12 recorded it: its options without ``record_version`` (that code
    wrote none), the base URL without its query, and the version hashed from that URL (checked against a run of
    that code). The row is appended: the newest row is the experiment's record, as for any status change."""
    options = {k: v for k, v in experiment.options.items() if k != "record_version"}
    assert options != experiment.options
    ex.save(Store(store), dataclasses.replace(experiment, options=options))


def quota_then_answers(model_server, cases):
    """The first run's first case fails on an exhausted quota (an infrastructure failure that
    ``retry_failed="infra"`` runs again), every other call is answered; the resume's calls are all answered."""
    model_server.responder = ms.CaseResponder(cases, {cases[0].input: ms.quota_exhausted()})

    def answer_all():
        model_server.responder = ms.CaseResponder(cases)
        model_server.requests.clear()

    return answer_all


def an_old_record(model_server, api, tmp_path):
    """A run of three cases, one failed on an exhausted quota, recorded as the code before 2026-12 recorded a run
    of ``given`` (the deployment's URL with a query, which it did not keep); the server then answers every call.
    Returns the run, its options, the deployment's URL and ``given``."""
    cases = load_dataset("arithmetic", cases=3).cases
    answer_all = quota_then_answers(model_server, cases)
    deployment = model_server.url(api)
    options = dict(model=f"{api}/test-model", cases=3, attempts=1, store=tmp_path / "store", progress="none")
    old = evaluate("", "arithmetic", base_url=deployment, **options)
    assert old.options["base_url"] == deployment and old.summary.failures_by_type == {"quota_exhausted": 1}
    recorded_before_queries_were_kept(tmp_path / "store", old)
    answer_all()
    return old, options, deployment, f"{deployment}?api-version=2024-06-01"


def queries_sent(model_server):
    return [parse_qs(urlsplit(r.path).query) for r in model_server.requests]


@pytest.mark.parametrize("api", [ms.OPENAI, ms.ANTHROPIC])
def test_a_run_recorded_before_the_query_was_kept_resumes_with_its_query_and_no_other_url(model_server, api, tmp_path):
    """Runs recorded before the base URL's query was kept stored the URL without it, and hashed the agent's version
    from that: a resume given the very URL they ran with, query and all (Azure's ?api-version=), was refused as a
    changed base_url. Now the URL given is compared in the form the run recorded it, in the options and in the
    version; another scheme, host, port or path is refused still, and so is another query beside a recorded one."""
    old, options, deployment, given = an_old_record(model_server, api, tmp_path)
    elsewhere = f"http://127.0.0.1:{ms.refused_port()}/v1?api-version=2024-06-01"
    for other in (elsewhere, f"{deployment}/other?api-version=2024-06-01", f"https{given.removeprefix('http')}"):
        with pytest.raises(RunRefused, match="base_url"):
            evaluate("", "arithmetic", base_url=other, resume=old.id, retry_failed="infra", **options)
    resumed = evaluate("", "arithmetic", base_url=given, resume=old.id, retry_failed="infra", **options)
    assert resumed.id == old.id and resumed.summary.this_run["trials"] == 1 and resumed.summary.passed == 3
    assert model_server.requests  # each call of the resumed trial carried the query
    assert all(query == {"api-version": ["2024-06-01"]} for query in queries_sent(model_server))
    assert (resumed.version, resumed.options["base_url"]) == (old.version, deployment)  # the record as it was
    assert "record_version" not in resumed.options  # still read as a record that could not keep the query

    recorded = evaluate("", "arithmetic", base_url=given, **options)  # a run that recorded its query
    assert recorded.options["base_url"] == given
    with pytest.raises(RunRefused, match="base_url"):
        evaluate("", "arithmetic", base_url=f"{deployment}?api-version=2025-01-01", resume=recorded.id, **options)


@pytest.mark.parametrize("api", [ms.OPENAI, ms.ANTHROPIC])
def test_a_run_recorded_with_no_query_is_not_resumed_with_one(model_server, api, tmp_path):
    """A run recorded since queries were kept, whose base URL had no query, read like a run recorded before: a
    resume given the URL with a query was accepted, and its trials called another endpoint than the first ones (a
    deployment's other API version) in one experiment. Now the record says which form it is in, and the resume is
    refused, naming --base-url and the URL recorded; left out, or given as recorded, the URL resumes the run."""
    cases = load_dataset("arithmetic", cases=3).cases
    deployment = model_server.url(api)
    options = dict(model=f"{api}/test-model", cases=3, attempts=1, store=tmp_path / "store", progress="none")
    for again in ({"base_url": deployment}, {}):  # given as recorded, or left out
        answer_all = quota_then_answers(model_server, cases)
        first = evaluate("", "arithmetic", base_url=deployment, **options)
        assert first.options["base_url"] == deployment and first.summary.failures_by_type == {"quota_exhausted": 1}
        answer_all()
        with pytest.raises(RunRefused, match="--base-url") as refused:
            with_query = f"{deployment}?api-version=2024-06-01"
            evaluate("", "arithmetic", base_url=with_query, resume=first.id, retry_failed="infra", **options)
        assert repr(deployment) in str(refused.value) and "with no query" in str(refused.value)
        assert not model_server.requests
        resumed = evaluate("", "arithmetic", resume=first.id, retry_failed="infra", **again, **options)
        assert resumed.id == first.id and resumed.summary.passed == 3 and resumed.version == first.version
        assert model_server.requests and all(query == {} for query in queries_sent(model_server))


@pytest.mark.parametrize("api", [ms.OPENAI, ms.ANTHROPIC])
def test_a_run_recorded_before_the_query_was_kept_is_not_resumed_without_its_url(model_server, api, tmp_path):
    """A run recorded before queries were kept, whose base URL had a query, resumed without --base-url called the
    recorded URL: without its query, another endpoint than its first trials'. The record cannot say whether the URL
    had one, so such a resume is refused, asking for the URL again; given with its query, it resumes."""
    old, options, deployment, given = an_old_record(model_server, api, tmp_path)
    with pytest.raises(RunRefused, match="--base-url") as refused:
        evaluate("", "arithmetic", resume=old.id, retry_failed="infra", **options)
    assert f"--base-url {deployment} may have lost" in str(refused.value)
    assert not model_server.requests
    resumed = evaluate("", "arithmetic", base_url=given, resume=old.id, retry_failed="infra", **options)
    assert resumed.summary.passed == 3 and resumed.version == old.version
    assert model_server.requests and all(
        query == {"api-version": ["2024-06-01"]} for query in queries_sent(model_server)
    )


def test_a_resume_is_given_a_base_url_whose_secret_the_run_masked_again(model_server, tmp_path):
    """The record masks a secret in the base URL's query; a resume left without --base-url called the URL as
    recorded, so every request sent the mask (api-key=***) for a key. Now it is refused, asking for the URL, as a
    resume is asked for agent options whose secrets were masked; given again, it resumes."""
    cases = load_dataset("arithmetic", cases=2).cases
    model_server.responder = ms.CaseResponder(cases, {cases[0].input: ms.quota_exhausted()})
    url = f"{model_server.openai_url}?api-version=2024-06-01&api-key=sk-query-secret-0123456789"
    options = dict(model="openai/test-model", cases=2, attempts=1, store=tmp_path / "store", progress="none")
    first = evaluate("", "arithmetic", base_url=url, **options)
    assert first.summary.failures_by_type == {"quota_exhausted": 1}
    model_server.responder = ms.CaseResponder(cases)
    model_server.requests.clear()
    with pytest.raises(RunRefused, match="--base-url"):
        evaluate("", "arithmetic", resume=first.id, retry_failed="infra", **options)
    assert not model_server.requests
    resumed = evaluate("", "arithmetic", base_url=url, resume=first.id, retry_failed="infra", **options)
    assert resumed.summary.passed == 2
    sent = {parse_qs(urlsplit(r.path).query)["api-key"][0] for r in model_server.requests}
    assert sent == {"sk-query-secret-0123456789"}


def test_evaluate_runs_the_reference_agent_with_the_agent_left_out(model_server):
    """docs/run.md gives `evaluate(model=..., ...)` the command line's options, and the docstring says the agent may
    be left empty with a model; `agent` was a required positional, so evaluate(dataset=..., model=...) raised
    TypeError and only evaluate("", ...) worked."""
    model_server.responder = ms.CaseResponder(load_dataset("mixed").cases)
    experiment = evaluate(
        dataset="mixed", model="openai/test-model", base_url=model_server.openai_url, attempts=1, progress="none"
    )
    assert experiment.agent == "reference" and experiment.summary.passed == experiment.summary.trials == 16


def test_model_and_agent_together_and_reference_without_a_model_are_usage_errors(model_server):
    with pytest.raises(UsageError, match="reference agent"):
        evaluate("mock", "arithmetic", model="openai/m", base_url=model_server.openai_url, progress="none")
    with pytest.raises(UsageError, match="needs --model"):
        evaluate("reference", "arithmetic", progress="none")


def test_the_command_line_runs_hard_against_a_local_server_and_records_no_key(model_server, tmp_path):
    model_server.responder = ms.CaseResponder(load_dataset("hard").cases)
    secret = "sk-test-SECRETKEY-0123456789abcdefghij"
    env = {"OPENAI_API_KEY": secret, "AGENTEVAL_STORE": str(tmp_path / "store"), "PATH": "/usr/bin:/bin"}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agenteval.cli",
            "run",
            "--model",
            "openai/gpt-4o-mini",
            "--dataset",
            "hard",
            "--base-url",
            model_server.openai_url,
            "--temperature",
            "0.3",
            "--max-tokens",
            "300",
            "--attempts",
            "1",
            "-j",
            "8",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=300,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    assert summary["failed"] == 0 and summary["trials"] == len(load_dataset("hard"))
    (experiment,) = Store(tmp_path / "store").rows("SELECT options, environment FROM experiments")
    options = json.loads(experiment["options"]) if isinstance(experiment["options"], str) else experiment["options"]
    assert options["model"] == "openai/gpt-4o-mini" and options["base_url"] == model_server.openai_url
    assert (options["temperature"], options["max_tokens"]) == (0.3, 300)
    assert secret not in done.stdout + done.stderr and secret not in json.dumps(experiment, default=str)
    assert all(r.headers.get("authorization") == f"Bearer {secret}" for r in model_server.requests)


def test_a_cached_run_answers_every_call_again_and_says_so(model_server, tmp_path):
    from agenteval.render._console import run_summary

    dataset = load_dataset("mixed")
    model_server.responder = ms.CaseResponder(dataset.cases)
    first = run(model_server, "mixed", cache=True, attempts=2)
    asked = len(model_server.requests)
    second = run(model_server, "mixed", cache=True, attempts=2)
    assert len(model_server.requests) == asked  # every call of every attempt answered from the cache
    assert second.summary.this_run["cache_hits"] == asked and "cache_hits" not in first.summary.this_run
    assert f"{asked} model call(s) answered from the response cache" in run_summary(second.summary)
    assert second.summary.passed == first.summary.passed
    assert (Store().root / ".model-cache").is_dir()
    (tokens,) = Store().rows(
        "SELECT sum(input_tokens) AS n FROM trials WHERE experiment_id = ?", [second.experiment_id]
    )
    assert tokens["n"] == 0  # nothing spent
