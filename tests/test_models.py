"""Models through the real openai and anthropic SDK clients against loopback servers: responses in one shape,
failures typed right for both providers, retries that honour Retry-After and are bounded and recorded, the shared
AIMD limiter under a 429 storm, the response cache keyed by attempt, and errors that name what to do."""

from __future__ import annotations

import asyncio
import datetime
import json
import random
import sys
import time
from urllib.parse import parse_qs, urlsplit

import model_servers as ms
import pytest
from opentelemetry.trace import StatusCode

from agenteval.models import AdaptiveLimiter, MissingAPIKey, MissingSDK, Model, ResponseCache, RetryPolicy
from agenteval.run._collect import TrialTag, current_trial, trial_context
from agenteval.run._failures import classify, provider_error
from agenteval_instrumentation import attributes as A

APIS = (ms.OPENAI, ms.ANTHROPIC)
FAST = RetryPolicy(base_delay=0.001, max_delay=0.05)
USER = [{"role": "user", "content": "What is 2 + 2?"}]


def model(server: ms.ModelServer, api: str, **options) -> Model:
    options.setdefault("retry", FAST)
    return Model(f"{api}/test-model", base_url=server.url(api), **options)


def complete(m: Model, messages=USER, **options):
    async def go():
        try:
            return await m.complete(messages, **options)
        finally:
            await m.aclose()

    return asyncio.run(go())


def raised(m: Model, **options) -> BaseException:
    with pytest.raises(Exception) as caught:
        complete(m, **options)
    return caught.value


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_a_reply_reads_the_same_from_either_provider(model_server, api, stream, spans):
    model_server.script(
        ms.tool_call("calculator", {"expression": "2 + 2"}, input_tokens=30, output_tokens=9),
        ms.text("It is 4.", input_tokens=41, output_tokens=5),
    )
    m = model(model_server, api, stream=stream)
    tools = [{"name": "calculator", "description": "Arithmetic.", "parameters": {"type": "object"}}]
    first = complete(m, tools=tools)
    assert first.finish_reason == "tool_calls" and first.text == ""
    (call,) = first.tool_calls
    assert call.name == "calculator" and call.parsed() == {"expression": "2 + 2"} and call.id
    assert (first.usage.input_tokens, first.usage.output_tokens) == (30, 9)
    assert first.model == "test-model" and first.response_id and not first.cache_hit
    second = complete(m)
    assert (second.text, second.finish_reason) == ("It is 4.", "stop")
    chats = [s for s in spans.get_finished_spans() if s.attributes.get(A.GEN_AI_OPERATION_NAME) == "chat"]
    assert len(chats) == 2
    attributes = chats[0].attributes
    assert chats[0].name == "chat test-model"
    assert attributes[A.GEN_AI_PROVIDER_NAME] == api
    assert attributes[A.GEN_AI_REQUEST_MODEL] == attributes[A.GEN_AI_RESPONSE_MODEL] == "test-model"
    assert (attributes[A.GEN_AI_USAGE_INPUT_TOKENS], attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS]) == (30, 9)
    assert attributes[A.GEN_AI_RESPONSE_FINISH_REASONS] == (("tool_calls",) if api == ms.OPENAI else ("tool_use",))
    assert "What is 2 + 2?" in attributes[A.GEN_AI_INPUT_MESSAGES]


def test_an_anthropic_request_carries_the_system_text_apart_and_tool_results_as_user_turns(model_server):
    messages = [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": "What is 2 + 2?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [{"id": "t1", "type": "function", "function": {"name": "calc", "arguments": '{"x": 1}'}}],
        },
        {"role": "tool", "tool_call_id": "t1", "content": "4"},
    ]
    complete(model(model_server, ms.ANTHROPIC), messages=messages)
    body = model_server.requests[-1].body
    assert body["system"] == "Be brief."
    assert [turn["role"] for turn in body["messages"]] == ["user", "assistant", "user"]
    assert body["messages"][1]["content"] == [{"type": "tool_use", "id": "t1", "name": "calc", "input": {"x": 1}}]
    assert body["messages"][2]["content"][0] == {"type": "tool_result", "tool_use_id": "t1", "content": "4"}


FAILURES = [
    # (scripted reply, failure type, infrastructure, what the registry says before classifying)
    ("rate limited", lambda: ms.rate_limited(), "timeout_after_rate_limit", True, "rate_limited"),
    (
        "rate limited, Retry-After",
        lambda: ms.rate_limited(retry_after=2),
        "timeout_after_rate_limit",
        True,
        "rate_limited",
    ),
    (
        "rate limited, retry-after-ms",
        lambda: ms.rate_limited(retry_after_ms=250),
        "timeout_after_rate_limit",
        True,
        "rate_limited",
    ),
    ("quota", ms.quota_exhausted, "quota_exhausted", True, "quota_exhausted"),
    ("server error", lambda: ms.server_error(500), "llm_error", True, "llm_error"),
    ("bad gateway", lambda: ms.server_error(502), "llm_error", True, "llm_error"),
    ("overloaded", ms.overloaded, "llm_error", True, "llm_error"),
    ("slower than the timeout", lambda: ms.slow(10), "llm_error", True, "llm_error"),
    ("bad request", ms.bad_request, "llm_error", False, "llm_error"),
]


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize(
    ("reply", "expected", "infrastructure", "registry"), [f[1:] for f in FAILURES], ids=[f[0] for f in FAILURES]
)
def test_each_failure_of_either_provider_is_typed(model_server, api, reply, expected, infrastructure, registry):
    model_server.script(reply())
    # Well under the slow reply's 10 s, and well over what a quick reply takes on a loaded machine (at 0.5 s, a quota
    # reply was once a timeout under the full suite).
    exc = raised(model(model_server, api, retry=RetryPolicy(max_retries=0), timeout=3))
    failure = classify(exc, raised_in="chat")
    assert (failure.type, failure.infrastructure) == (expected, infrastructure), repr(exc)
    assert provider_error(exc).type == registry


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize(
    ("header", "seconds"), [({"retry_after": 2}, 2.0), ({"retry_after_ms": 250}, 0.25), ({}, None)]
)
def test_the_wait_a_429_asks_for_is_read_from_either_header(model_server, api, header, seconds):
    model_server.script(ms.rate_limited(**header))
    exc = raised(model(model_server, api, retry=RetryPolicy(max_retries=0)))
    assert provider_error(exc).retry_after == seconds


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("header", [{"retry-after": "-5"}, {"retry-after-ms": "-250"}], ids=["seconds", "ms"])
def test_a_negative_wait_is_no_wait_the_provider_asked_for(model_server, api, header):
    """A delay below zero is no delay (RFC 9110's delay-seconds are digits): it was read as "send again at once",
    so every retry went out with no wait at all, recorded as the wait the provider asked for; the backoff applies."""
    model_server.script(ms.Reply(status=429, error={"kind": "rate_limit"}, headers=header))
    exc = raised(model(model_server, api, retry=RetryPolicy(max_retries=0)))
    assert provider_error(exc).retry_after is None


def _http_date(form: str, seconds_from_now: float) -> str:
    """An HTTP date in one of the three forms RFC 9110 says a recipient must read: IMF-fixdate, RFC 850, asctime
    (and RFC 2822's "-0000" zone, which Python reads as a time without a zone)."""
    when = datetime.datetime.now(datetime.UTC) + datetime.timedelta(seconds=seconds_from_now)
    return {
        "imf": when.strftime("%a, %d %b %Y %H:%M:%S GMT"),
        "rfc850": when.strftime("%A, %d-%b-%y %H:%M:%S GMT"),
        "asctime": when.strftime("%a %b ") + f"{when.day:2d}" + when.strftime(" %H:%M:%S %Y"),
        "minus-zero": when.strftime("%a, %d %b %Y %H:%M:%S -0000"),
    }[form]


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("form", ["imf", "rfc850", "asctime", "minus-zero"])
def test_a_retry_after_date_in_any_http_form_is_honoured(model_server, api, form):
    model_server.script(
        ms.Reply(status=429, error={"kind": "rate_limit"}, headers={"retry-after": _http_date(form, 30)})
    )
    exc = raised(model(model_server, api, retry=RetryPolicy(max_retries=0)))
    assert 25 <= provider_error(exc).retry_after <= 31
    assert (classify(exc).type, classify(exc).infrastructure) == ("timeout_after_rate_limit", True)
    past = _http_date(form, -3600)  # a date gone by: send again at once
    model_server.script(
        ms.Reply(status=429, error={"kind": "rate_limit"}, headers={"retry-after": past}), ms.text("ok")
    )
    response = complete(model(model_server, api))
    assert response.text == "ok" and response.retries == 1 and response.waits[0].retry_after


@pytest.mark.parametrize("api", APIS)
def test_a_stream_dropped_half_way_is_a_transient_infrastructure_failure(model_server, api):
    model_server.script(ms.dropped(after=3))
    exc = raised(model(model_server, api, stream=True, retry=RetryPolicy(max_retries=0)))
    failure = classify(exc, raised_in="chat")
    assert (failure.type, failure.infrastructure) == ("llm_error", True), repr(exc)
    model_server.script(ms.dropped(after=3), ms.text("whole"))
    assert complete(model(model_server, api, stream=True)).text == "whole"  # and it is retried


STREAM_ERROR_EVENTS = {
    # What each API sends when it fails after the stream began (its status already 200): Anthropic documents an
    # overloaded_error event (a 529 had it not streamed); OpenAI-compatible servers send an error object as data.
    ms.ANTHROPIC: "event: error\ndata: "
    + json.dumps({"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}}),
    ms.OPENAI: "data: " + json.dumps({"error": {"message": "The server had an error.", "type": "server_error"}}),
}


@pytest.mark.parametrize("api", APIS)
def test_a_provider_error_sent_inside_a_stream_is_a_transient_infrastructure_failure(model_server, api):
    """The SDKs raise such an event as an APIError with no status (OpenAI) or the stream's 200 (Anthropic): it was
    recognised by no matcher, so the trial was an agent_error, the agent's own bug, and was never retried."""
    body = STREAM_ERROR_EVENTS[api] + "\n\n"
    model_server.script(ms.Reply(body=body, content_type="text/event-stream"))
    exc = raised(model(model_server, api, stream=True, retry=RetryPolicy(max_retries=0)))
    failure = classify(exc, raised_in="chat")
    assert (failure.type, failure.infrastructure) == ("llm_error", True), repr(exc)
    model_server.script(ms.Reply(body=body, content_type="text/event-stream"), ms.text("whole"))
    response = complete(model(model_server, api, stream=True))
    assert response.text == "whole" and response.retries == 1


STREAMED_ERRORS = [
    # (API, the error object, the status the API sends it with unstreamed)
    (ms.ANTHROPIC, {"type": "rate_limit_error", "message": "Number of request tokens has exceeded your limit"}, 429),
    (ms.ANTHROPIC, {"type": "invalid_request_error", "message": "prompt is too long"}, 400),
    (ms.ANTHROPIC, {"type": "authentication_error", "message": "invalid x-api-key"}, 401),
    (ms.ANTHROPIC, {"type": "permission_error", "message": "not allowed"}, 403),
    (ms.ANTHROPIC, {"type": "not_found_error", "message": "model: test-model"}, 404),
    (ms.ANTHROPIC, {"type": "request_too_large", "message": "Request exceeds the maximum size"}, 413),
    (ms.ANTHROPIC, {"type": "api_error", "message": "Internal server error"}, 500),
    (ms.ANTHROPIC, {"type": "overloaded_error", "message": "Overloaded"}, 529),
    (ms.OPENAI, {"message": "Rate limit reached", "type": "requests", "code": "rate_limit_exceeded"}, 429),
    (ms.OPENAI, {"message": "You exceeded your current quota", "type": "insufficient_quota", "code": None}, 429),
    (ms.OPENAI, {"message": "too long", "type": "invalid_request_error", "code": "context_length_exceeded"}, 400),
    (ms.OPENAI, {"message": "Incorrect API key", "type": "invalid_request_error", "code": "invalid_api_key"}, 401),
    (ms.OPENAI, {"message": "The server had an error.", "type": "server_error", "code": None}, 500),
    (ms.OPENAI, {"message": "Input too long", "type": "BadRequestError", "code": 400}, 400),  # vLLM's
    (ms.ANTHROPIC, {"type": "billing_error", "message": "Your account has a billing issue"}, 402),
]


@pytest.mark.parametrize("api", APIS)
def test_a_payment_required_answer_is_an_exhausted_quota_not_the_agents_bad_request(model_server, api):
    """A 402 (Anthropic's billing_error, a gateway whose credits ran out) was a 4xx, read as the agent's own bad
    request: a failure of the agent on a day the account could not pay."""
    body = {"type": "error", "error": {"type": "billing_error", "message": "Your account has a billing issue"}}
    model_server.script(ms.Reply(status=402, body=json.dumps(body)))
    failure = classify(raised(model(model_server, api, retry=RetryPolicy(max_retries=0))), raised_in="chat")
    assert (failure.type, failure.infrastructure) == ("quota_exhausted", True)


def _error_replies(api: str, error: dict, status: int) -> tuple[ms.Reply, ms.Reply]:
    """The error unstreamed (with its status), and sent as each API sends it inside a stream (after its 200)."""
    body = {"type": "error", "error": error} if api == ms.ANTHROPIC else {"error": error}
    event = ("event: error\n" if api == ms.ANTHROPIC else "") + f"data: {json.dumps(body)}\n\n"
    return ms.Reply(status=status, body=json.dumps(body)), ms.Reply(body=event, content_type="text/event-stream")


def _typed(exc: BaseException) -> tuple:
    """All that is made of a failure: the registry's reading, the trial's type, and whether it is retried."""
    failure = classify(exc)
    return provider_error(exc), failure.type, failure.infrastructure, FAST.decide(exc, 0, random.Random(0)) is None


@pytest.mark.parametrize(
    ("api", "error", "status"),
    STREAMED_ERRORS,
    ids=[f"{api}-{error.get('code') or error['type']}" for api, error, _ in STREAMED_ERRORS],
)
def test_an_error_sent_inside_a_stream_is_typed_as_the_same_error_unstreamed(model_server, api, error, status):
    """Only overloaded_error, api_error and server_error were read inside a stream: an invalid_request_error or a
    context_length_exceeded sent there (with the stream's 200, or no status) was recognised by no matcher, an
    agent_error wherever no chat span raised it; and a retried one was waited on as a 200 or a lost connection."""
    unstreamed, streamed = _error_replies(api, error, status)
    once = RetryPolicy(max_retries=0)
    model_server.script(unstreamed)
    plain = raised(model(model_server, api, retry=once))
    model_server.script(streamed)
    inside = raised(model(model_server, api, stream=True, retry=once))
    assert provider_error(plain) is not None and _typed(inside) == _typed(plain), (repr(plain), repr(inside))
    if FAST.decide(plain, 0, random.Random(0)) is not None:  # retried: waited on for the same reason and status
        model_server.script(unstreamed, ms.text("whole"))
        waited = complete(model(model_server, api)).waits
        model_server.script(streamed, ms.text("whole"))
        response = complete(model(model_server, api, stream=True))
        assert response.text == "whole" and response.retries == 1
        assert (response.waits[0].reason, response.waits[0].status) == (waited[0].reason, waited[0].status)


STREAMS_CUT_IN_THEIR_FIRST_EVENT = {
    ms.ANTHROPIC: 'event: message_start\ndata: {"type": "message_start", "message": {"id": "m',
    ms.OPENAI: 'data: {"id": "chatcmpl-1", "object": "chat.completion.chu',
}


@pytest.mark.parametrize("api", APIS)
def test_a_stream_whose_body_ends_inside_its_first_event_is_a_transient_infrastructure_failure(model_server, api):
    """A body that ends (its length reached, or its connection closed) before its first event is whole: the SDKs drop
    the part-event and assert on the final message that never came, an AssertionError typed as the agent's bug."""
    body = STREAMS_CUT_IN_THEIR_FIRST_EVENT[api]
    model_server.script(ms.Reply(body=body, content_type="text/event-stream"))
    exc = raised(model(model_server, api, stream=True, retry=RetryPolicy(max_retries=0)))
    failure = classify(exc, raised_in="chat")
    assert (failure.type, failure.infrastructure) == ("llm_error", True), repr(exc)
    assert "ended before" in str(exc)
    model_server.script(ms.Reply(body=body, content_type="text/event-stream"), ms.text("whole"))
    response = complete(model(model_server, api, stream=True))
    assert response.text == "whole" and response.retries == 1


@pytest.mark.parametrize("api", APIS)
def test_a_refused_connection_is_an_infrastructure_failure(api):
    url = f"http://127.0.0.1:{ms.refused_port()}" + ("/v1" if api == ms.OPENAI else "")
    exc = raised(Model(f"{api}/m", base_url=url, retry=RetryPolicy(max_retries=0)))
    failure = classify(exc, raised_in="chat")
    assert (failure.type, failure.infrastructure) == ("llm_error", True)


@pytest.mark.parametrize("api", APIS)
def test_a_429_is_retried_after_the_wait_it_asks_for_and_the_wait_is_on_the_span(model_server, api, spans):
    model_server.script(ms.rate_limited(retry_after_ms=40), ms.text("done"))
    response = complete(model(model_server, api))
    assert response.text == "done" and response.retries == 1
    (wait,) = response.waits
    assert (wait.reason, wait.status, wait.retry_after) == ("rate_limit", 429, True) and wait.seconds >= 0.04
    assert len(model_server.requests) == 2  # the SDK's own retries are off: ours are the only ones
    (chat,) = [s for s in spans.get_finished_spans() if s.name.startswith("chat")]
    assert chat.attributes[A.MODEL_RETRIES] == 1 and chat.attributes[A.RATE_LIMIT_WAITS] == 1
    assert chat.attributes[A.RATE_LIMIT_WAIT_MS] >= 40
    (event,) = [e for e in chat.events if e.name == A.MODEL_WAIT_EVENT]
    assert event.attributes[A.WAIT_REASON] == "rate_limit" and event.attributes[A.HTTP_RESPONSE_STATUS_CODE] == 429


@pytest.mark.parametrize("api", APIS)
def test_an_exhausted_quota_is_never_retried(model_server, api):
    model_server.script(ms.quota_exhausted(), ms.text("never asked"))
    exc = raised(model(model_server, api))
    assert classify(exc).type == "quota_exhausted" and len(model_server.requests) == 1


@pytest.mark.parametrize("api", APIS)
def test_retries_are_bounded_and_the_error_says_they_were_spent(model_server, api, spans):
    model_server.script(ms.overloaded(), ms.rate_limited(), ms.server_error(), ms.text("too late"))
    exc = raised(model(model_server, api, retry=RetryPolicy(max_retries=2, base_delay=0.001)))
    assert len(model_server.requests) == 3 and exc.agenteval_retried is True
    (chat,) = [s for s in spans.get_finished_spans() if s.name.startswith("chat")]
    assert chat.status.status_code == StatusCode.ERROR and chat.attributes[A.MODEL_RETRIES] == 2


def test_a_missing_sdk_names_the_extra_that_installs_it(monkeypatch):
    monkeypatch.setitem(sys.modules, "anthropic", None)  # as if it were not installed: importing it fails
    with pytest.raises(MissingSDK, match=r"pip install 'agenteval\[anthropic\]'"):
        Model("anthropic/claude-3-5-haiku-latest")


def test_a_provider_endpoint_without_a_key_names_the_variable_and_a_local_server_needs_none(monkeypatch, model_server):
    monkeypatch.delenv("OPENAI_API_KEY")
    monkeypatch.delenv("OPENAI_BASE_URL")
    with pytest.raises(MissingAPIKey, match="OPENAI_API_KEY"):
        Model("openai/gpt-4o-mini")
    assert complete(Model("openai/llama3", base_url=model_server.openai_url)).text == "ok"


def test_the_base_url_comes_from_the_sdk_variable_when_none_is_given(monkeypatch, model_server):
    monkeypatch.setenv("OPENAI_BASE_URL", model_server.openai_url)
    assert complete(Model("openai/local-model")).text == "ok"
    assert model_server.requests[-1].body["model"] == "local-model"


def test_settings_record_no_key_nor_credentials_in_the_url(model_server):
    url = f"http://user:hunter2@127.0.0.1:{model_server.port}/v1?api-key=sk-secret"
    m = Model("openai/m", base_url=url, api_key="sk-very-secret", temperature=0.2)
    settings = repr((m.settings(), m))
    assert "hunter2" not in settings and "sk-" not in settings and "secret" not in settings
    assert m.settings()["base_url"] == f"http://127.0.0.1:{model_server.port}/v1?api-key=%2A%2A%2A"


@pytest.mark.parametrize("api", APIS)
def test_the_base_url_s_query_is_recorded_and_limits_apart_with_secrets_masked(model_server, api):
    """Two deployments told apart by ``?api-version=``: the recorded base URL and the rate limiter's key left the
    query out, so a run's record did not say which API version was called, and a 429 storm on one deployment
    slowed the other. Both hold the query now, masked as the response cache's key is: another API key for the
    same deployment shares its limiter and its record, and no key is kept."""
    key, another_key = "sk-query-secret-0123456789", "sk-another-secret-98765"

    def at(query: str) -> Model:
        return Model(f"{api}/test-model", base_url=f"{model_server.url(api)}?{query}", retry=FAST)

    older, newer = at(f"api-version=2024-06-01&api-key={key}"), at("api-version=2025-01-01")
    same_deployment = at(f"api-key={another_key}&api-version=2024-06-01")
    assert complete(older).text == "ok" and complete(newer).text == "ok"  # the real SDK sent each query
    sent = [parse_qs(urlsplit(request.path).query)["api-version"] for request in model_server.requests[-2:]]
    assert sent == [["2024-06-01"], ["2025-01-01"]]
    assert older.limiter is not newer.limiter and older.limiter is same_deployment.limiter
    assert older.settings()["base_url"] == f"{model_server.url(api)}?api-key=%2A%2A%2A&api-version=2024-06-01"
    assert newer.settings()["base_url"] == f"{model_server.url(api)}?api-version=2025-01-01"
    assert same_deployment.settings() == older.settings()
    assert "secret" not in repr((older, older.settings(), newer, same_deployment))


@pytest.mark.parametrize("api", APIS)
def test_an_unparseable_model_name_or_provider_is_a_usage_error(api):
    from agenteval.errors import UsageError

    for name in ("gpt-4o-mini", "openai/", "mistral/large"):
        with pytest.raises(UsageError, match="PROVIDER/MODEL|unknown provider"):
            Model(name)


def _in_trial(m: Model, case: str, attempt: int, **options):
    async def go():
        token = trial_context(TrialTag("exp", case, f"{case}-{attempt}", attempt))
        try:
            return await m.complete(USER, **options)
        finally:
            current_trial.reset(token)
            await m.aclose()

    return asyncio.run(go())


@pytest.mark.parametrize("api", APIS)
def test_the_cache_answers_the_same_attempt_again_but_never_another_attempt(model_server, api, tmp_path, spans):
    cache = ResponseCache(tmp_path / "cache")
    model_server.responder = lambda request: ms.text(f"answer {len(model_server.requests)}")
    m = model(model_server, api, cache=cache)
    first = _in_trial(m, "case-1", 1)
    again = _in_trial(m, "case-1", 1)
    other_attempt = _in_trial(m, "case-1", 2)
    other_case = _in_trial(m, "case-2", 1)
    assert again.text == first.text and again.cache_hit and not first.cache_hit
    assert len({first.text, other_attempt.text, other_case.text}) == 3
    assert len(model_server.requests) == 3 and cache.hits == 1
    hit = [s for s in spans.get_finished_spans() if s.attributes.get(A.CACHE_HIT)]
    assert len(hit) == 1 and hit[0].attributes[A.GEN_AI_USAGE_INPUT_TOKENS] == 0
    changed = _in_trial(m, "case-1", 1, temperature=0.9)
    assert not changed.cache_hit  # parameters are part of the key


def _unfinished(api: str, stored: dict) -> dict:
    """A cached answer with no finished reply: no choices (OpenAI), no stop reason (Anthropic)."""
    response = dict(stored["response"])
    if api == ms.OPENAI:
        response["choices"] = []
    else:
        response["stop_reason"] = None
    return {**stored, "response": response}


SPOILT_CACHE_FILES = {
    "cut": lambda api, stored: json.dumps(stored)[:40],
    "not an object": lambda api, stored: "[1, 2]",
    "no response": lambda api, stored: json.dumps({"provider": api}),
    "another shape": lambda api, stored: json.dumps({**stored, "response": {"id": 1}}),
    "unfinished": lambda api, stored: json.dumps(_unfinished(api, stored)),
}


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("spoil", list(SPOILT_CACHE_FILES.values()), ids=list(SPOILT_CACHE_FILES))
def test_a_cache_file_that_holds_no_usable_answer_is_a_miss_answered_anew(model_server, api, tmp_path, spoil):
    """A cached answer with no finished reply (an edited or older file) was given as a hit, an empty reply that no
    model made; and any file that could not be used was counted as a hit though the model was asked again."""
    cache = ResponseCache(tmp_path / "cache")
    model_server.responder = lambda request: ms.text(f"answer {len(model_server.requests)}")
    assert _in_trial(model(model_server, api, cache=cache), "case-1", 1).text == "answer 1"
    (path,) = (tmp_path / "cache").rglob("*.json")
    path.write_text(spoil(api, json.loads(path.read_text())))
    cache.hits = cache.misses = 0
    again = _in_trial(model(model_server, api, cache=cache), "case-1", 1)
    assert (again.text, again.cache_hit, cache.hits, cache.misses) == ("answer 2", False, 0, 1)
    assert _in_trial(model(model_server, api, cache=cache), "case-1", 1).text == "answer 2"  # written anew
    assert cache.hits == 1


@pytest.mark.parametrize("api", APIS)
def test_base_urls_differing_in_their_query_are_asked_and_cached_apart_and_no_key_is_kept(model_server, api, tmp_path):
    """Two deployments behind one address, told apart by ``?api-version=`` (Azure's style): the SDK got the query
    inside its base URL, where the request's path was appended after it (every call a 404), and the cache's key
    left the query out, so the two would share answers. The query goes with every request and into the key, a
    secret parameter's value masked first: no key reaches the cache's files, and a new key reuses the answers."""

    def version(request: ms.Request) -> str:
        return parse_qs(urlsplit(request.path).query)["api-version"][0]

    model_server.responder = lambda request: ms.text(f"deployment {version(request)}")
    cache = ResponseCache(tmp_path / "cache")

    def asked(query: str) -> str:
        m = Model(f"{api}/test-model", base_url=f"{model_server.url(api)}?{query}", cache=cache, retry=FAST)
        answer = _in_trial(m, "case-1", 1)
        return f"{answer.text} (cached)" if answer.cache_hit else answer.text

    assert asked("api-version=2024-06-01") == "deployment 2024-06-01"
    assert asked("api-version=2025-01-01") == "deployment 2025-01-01"
    assert asked("api-version=2024-06-01") == "deployment 2024-06-01 (cached)"
    key, another_key = "sk-query-secret-0123456789", "sk-another-secret-98765"
    assert asked(f"api-version=2024-10-21&api-key={key}") == "deployment 2024-10-21"
    assert urlsplit(model_server.requests[-1].path).query == f"api-version=2024-10-21&api-key={key}"  # sent
    assert asked(f"api-version=2024-10-21&api-key={another_key}") == "deployment 2024-10-21 (cached)"
    assert len(model_server.requests) == 3
    kept = [(path.name, path.read_bytes()) for path in (tmp_path / "cache").rglob("*") if path.is_file()]
    assert len(kept) == 3 and not any(b"secret" in name.encode() + data for name, data in kept)


def test_the_limiter_halves_once_per_burst_and_grows_back_after_a_run_of_successes():
    limiter = AdaptiveLimiter(initial=8, maximum=9)

    async def go():
        grants = [await limiter.acquire() for _ in range(4)]
        for generation, _ in grants:  # four 429s of one burst: one decrease
            limiter.release(generation, "throttled")
        assert limiter.limit == 4
        for _ in range(4 + 5):
            generation, _ = await limiter.acquire()
            limiter.release(generation, "ok")
        return limiter.limits

    assert asyncio.run(go()) == [8, 4, 5, 6]


@pytest.mark.parametrize("api", APIS)
def test_under_a_429_storm_concurrency_falls_then_recovers(model_server, api):
    """Counted by the server: requests in flight as each answered one arrived, before, during and after a storm."""
    storm = {"left": 24}
    served: list[tuple[str, int]] = []

    def respond(request):
        phase = request.body.get("metadata", {}).get("phase")
        with model_server.lock:
            if phase == "storm" and storm["left"] > 0:
                storm["left"] -= 1
                return ms.rate_limited(retry_after_ms=1)
            served.append((phase, model_server.in_flight))
        return ms.slow(0.05, ms.text("fine"))  # each answer takes a moment, so concurrent calls overlap

    model_server.responder = respond
    limiter = AdaptiveLimiter(initial=8, maximum=8)
    m = model(model_server, api, limiter=limiter, retry=RetryPolicy(max_retries=50, base_delay=0.001, max_delay=0.002))

    async def phase(name: str, calls: int) -> None:
        await asyncio.gather(*(m.complete(USER, metadata={"phase": name}) for _ in range(calls)))

    async def go():
        try:
            for name, calls in (("calm", 16), ("storm", 16), ("after", 160)):
                await phase(name, calls)
        finally:
            await m.aclose()

    asyncio.run(go())
    seen = {name: [n for phase, n in served if phase == name] for name in ("calm", "storm", "after")}
    lowest = limiter.limits.index(min(limiter.limits))
    assert limiter.limits[: lowest + 1] == [8, 4, 2, 1]  # halved at each new burst of 429s
    assert limiter.limits[lowest:] == list(range(1, 9))  # then one more place after each run of successes
    assert max(seen["calm"]) >= 6  # the server saw (nearly) eight at once,
    assert max(seen["storm"][:4]) <= 2  # then one or two right after the storm,
    assert max(seen["after"][-40:]) >= 6  # and many again once the limit grew back


def test_calls_waiting_are_counted_for_the_progress_display(model_server):
    from agenteval.models import calls_waiting, watch_waiting
    from agenteval.run._progress import Progress

    progress = Progress()
    seen: list[int] = []

    def watcher(change: int) -> None:
        progress.waiting(change)
        seen.append(progress.rate_limited)

    stop = watch_waiting(watcher)
    try:
        model_server.script(ms.rate_limited(retry_after_ms=20), ms.rate_limited(retry_after_ms=20), ms.text("ok"))
        complete(model(model_server, ms.OPENAI))
    finally:
        stop()
    assert seen == [1, 0, 1, 0] and calls_waiting() == 0
    progress.waiting(+1)
    assert "1 waiting on rate limits" in progress.line()


def _chat_body(content, finish="stop", **extra) -> str:
    message = {"role": "assistant", "content": content, **extra}
    choice = {"index": 0, "message": message, "finish_reason": finish}
    return json.dumps({"id": "c1", "object": "chat.completion", "created": 1, "model": "m", "choices": [choice]})


def test_content_sent_as_a_list_of_parts_reads_as_its_text(model_server):
    """Some OpenAI-compatible servers send the message's content as content parts, not a string."""
    parts = [
        {"type": "text", "text": "The answer "},
        {"type": "image_url", "image_url": {}},
        {"type": "text", "text": "is 4."},
    ]
    model_server.script(ms.Reply(body=_chat_body(parts)))
    response = complete(model(model_server, ms.OPENAI))
    assert response.text == "The answer is 4." and response.finish_reason == "stop"


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize(
    "body", ["<html><body>502 Bad Gateway</body></html>", "", '{"id": "cut'], ids=["page", "empty", "cut"]
)
def test_an_answer_that_is_not_json_is_an_infrastructure_failure_and_is_retried(model_server, api, body):
    model_server.script(ms.Reply(body=body))
    exc = raised(model(model_server, api, retry=RetryPolicy(max_retries=0)))
    failure = classify(exc, raised_in="chat")
    assert (failure.type, failure.infrastructure) == ("llm_error", True), repr(exc)
    assert "not JSON" in str(exc)
    model_server.script(ms.Reply(body=body), ms.text("whole"))
    response = complete(model(model_server, api))
    assert response.text == "whole" and response.retries == 1


@pytest.mark.parametrize("api", APIS)
def test_an_answer_of_the_wrong_shape_is_an_infrastructure_failure_that_says_what_it_lacks(model_server, api):
    model_server.script(ms.Reply(body=json.dumps({"object": "list", "data": []})))
    exc = raised(model(model_server, api, retry=RetryPolicy(max_retries=0)))
    failure = classify(exc, raised_in="chat")
    assert (failure.type, failure.infrastructure) == ("llm_error", True), repr(exc)
    assert "no finished reply" in str(exc)
    # The call did not stream: its record does not say a stream ended early.
    assert failure.message.startswith("UnreadableResponse: ") and "stream" not in failure.message.lower()


@pytest.mark.parametrize("api", APIS)
def test_an_answer_sent_a_few_bytes_at_a_time_is_bounded_by_the_request_timeout(model_server, api):
    """Each wait on the connection is shorter than the timeout; the whole answer (about 2 s) is not: without a
    bound on the whole, a judge (which no trial's timeout bounds) would wait as long as the server drips."""
    model_server.script(ms.text("a slow answer " * 4, drip=0.05))
    started = time.monotonic()
    exc = raised(model(model_server, api, timeout=1.0, retry=RetryPolicy(max_retries=0)))
    assert time.monotonic() - started < 5
    failure = classify(exc, raised_in="chat")
    assert (failure.type, failure.infrastructure) == ("llm_error", True), repr(exc)
    assert provider_error(exc) is not None and "within 1 s" in str(exc)


@pytest.mark.parametrize("api", APIS)
def test_a_stream_sending_only_keep_alives_ends_with_a_timeout_outside_a_trial(model_server, api):
    """The server answers 200 and keeps the stream open with SSE comments, blank lines (and Anthropic's pings),
    never an event. Each read got bytes within the SDK's timeout, so a call no trial bounds (a judge's, a script's)
    waited for as long as the server kept sending them."""
    model_server.script(ms.keeping_alive(every=0.05))
    assert current_trial.get() is None  # no trial's timeout bounds it
    exc = raised(model(model_server, api, stream=True, timeout=0.5, retry=RetryPolicy(max_retries=0)))
    failure = classify(exc, raised_in="chat")
    assert (failure.type, failure.infrastructure) == ("llm_error", True), repr(exc)
    assert provider_error(exc) is not None
    assert str(exc) == (
        f"{api}/test-model: the stream sent no event for 0.5 s (nothing, or only keep-alives); "
        "--request-timeout (Model(timeout=...)) sets how long a streamed answer may be silent"
    )


@pytest.mark.parametrize("api", APIS)
def test_a_stream_longer_than_the_timeout_is_read_whole_while_its_events_keep_coming(model_server, api):
    """The timeout bounds a stream's silences, not its length: events 0.1 s apart for about 1.6 s in all, under a
    timeout of 1 s, are one whole reply."""
    model_server.script(ms.text("a slow answer " * 8, drip=0.1))
    response = complete(model(model_server, api, stream=True, timeout=1.0, retry=RetryPolicy(max_retries=0)))
    assert response.text == "a slow answer " * 8 and response.finish_reason == "stop"


@pytest.mark.parametrize("stream", [False, True], ids=["plain", "streamed"])
def test_anthropic_prompt_tokens_read_from_or_written_to_its_cache_are_counted(model_server, spans, stream):
    """Anthropic's ``input_tokens`` leaves out the prompt's cached tokens, which OpenAI's ``prompt_tokens`` holds."""
    usage = {"input_tokens": 5, "output_tokens": 7, "cache_read_input_tokens": 1000, "cache_creation_input_tokens": 20}
    message = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "test-model",
        "content": [{"type": "text", "text": "4"}],
        "stop_reason": "end_turn",
        "stop_sequence": None,
        "usage": usage,
    }
    if stream:
        started = {**message, "content": [], "stop_reason": None, "usage": {**usage, "output_tokens": 1}}
        block = {"type": "content_block_start", "index": 0, "content_block": {"type": "text", "text": "4"}}
        events = [
            ("message_start", {"type": "message_start", "message": started}),
            ("content_block_start", block),
            ("content_block_stop", {"type": "content_block_stop", "index": 0}),
            (
                "message_delta",
                {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 7}},
            ),
            ("message_stop", {"type": "message_stop"}),
        ]
        body = "".join(f"event: {name}\ndata: {json.dumps(data)}\n\n" for name, data in events)
        model_server.script(ms.Reply(body=body, content_type="text/event-stream"))
    else:
        model_server.script(ms.Reply(body=json.dumps(message)))
    response = complete(model(model_server, ms.ANTHROPIC, stream=stream))
    assert (response.text, response.usage.input_tokens, response.usage.output_tokens) == ("4", 1025, 7)
    (chat,) = [s for s in spans.get_finished_spans() if s.name.startswith("chat")]
    assert chat.attributes[A.GEN_AI_USAGE_INPUT_TOKENS] == 1025


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("counts", [(-12, -7), (2**63, 2**64)], ids=["negative", "past int64"])
def test_usage_counts_that_are_no_token_counts_are_recorded_as_unknown(model_server, spans, api, counts):
    """A server reporting negative usage had it recorded: a trial's tokens (and cost) went below zero and lowered
    the experiment's totals. A count no token count can be is unknown, as a missing one is."""
    model_server.script(ms.text("4", input_tokens=counts[0], output_tokens=counts[1]))
    response = complete(model(model_server, api))
    assert response.text == "4"
    assert (response.usage.input_tokens, response.usage.output_tokens) == (None, None)
    (chat,) = [s for s in spans.get_finished_spans() if s.name.startswith("chat")]
    assert A.GEN_AI_USAGE_INPUT_TOKENS not in chat.attributes
    assert A.GEN_AI_USAGE_OUTPUT_TOKENS not in chat.attributes


WRONG_SHAPES = {
    ms.OPENAI: [
        {"id": "x", "object": "chat.completion", "created": 1, "model": "m", "choices": ["4"]},
        {
            "id": "x",
            "object": "chat.completion",
            "created": 1,
            "model": "m",
            "choices": [{"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "4"}}],
            "usage": "lots",
        },
    ],
    ms.ANTHROPIC: [
        {"id": "x", "type": "message", "role": "assistant", "model": "m", "content": 4, "stop_reason": "end_turn"},
        {
            "id": "x",
            "type": "message",
            "role": "assistant",
            "model": "m",
            "content": [{"type": "text", "text": "4"}],
            "stop_reason": "end_turn",
            "usage": "lots",
        },
    ],
}


@pytest.mark.parametrize("api", APIS)
@pytest.mark.parametrize("shape", [0, 1], ids=["choices or content", "usage"])
def test_an_answer_whose_parts_are_of_the_wrong_shape_is_an_infrastructure_failure_and_is_retried(
    model_server, api, shape
):
    """A finished answer whose choices, content or usage were of another shape (a broken gateway's) raised the
    adapter's AttributeError or TypeError out of complete(): the trial was typed agent_error (the agent's own bug)
    or llm_error not counted as infrastructure, and was never retried."""
    assert_unreadable_and_retried(model_server, api, json.dumps(WRONG_SHAPES[api][shape]))


def assert_unreadable_and_retried(model_server, api: str, body: str) -> None:
    """An answer of ``body`` is the provider's failure (llm_error, infrastructure), and a retry gets past it."""
    model_server.script(ms.Reply(body=body))
    exc = raised(model(model_server, api, retry=RetryPolicy(max_retries=0)))
    failure = classify(exc, raised_in=None)
    assert (failure.type, failure.infrastructure) == ("llm_error", True), repr(exc)
    assert "shape" in str(exc)
    model_server.script(ms.Reply(body=body), ms.text("whole"))
    response = complete(model(model_server, api))
    assert response.text == "whole" and response.retries == 1


NO_REPLY_MESSAGES = {
    "no message": None,
    "a call without its function": {
        "role": "assistant",
        "content": None,
        "tool_calls": [{"id": "c1", "function": None}],
    },
    "calls that are not a list": {"role": "assistant", "content": None, "tool_calls": "calculator"},
    "content of another shape": {"role": "assistant", "content": {"text": "4"}},
}


@pytest.mark.parametrize("message", list(NO_REPLY_MESSAGES.values()), ids=list(NO_REPLY_MESSAGES))
def test_a_message_of_the_wrong_shape_is_an_infrastructure_failure_and_is_retried(model_server, message):
    """A broken gateway's message (null, a call without its function, content of another shape) read as an empty
    reply: the trial was empty_output, the agent's failure, and was never retried."""
    choice = {"index": 0, "finish_reason": "stop", "message": message}
    body = json.dumps({"id": "x", "object": "chat.completion", "created": 1, "model": "m", "choices": [choice]})
    assert_unreadable_and_retried(model_server, ms.OPENAI, body)


@pytest.mark.parametrize("content", [None, ""], ids=["null", "empty"])
def test_the_model_s_own_empty_reply_stays_its_empty_output(model_server, content):
    model_server.script(ms.Reply(body=_chat_body(content)), ms.text("never asked"))
    response = complete(model(model_server, ms.OPENAI))
    assert (response.text, response.tool_calls, response.retries) == ("", (), 0)
    assert classify(None, reply=response.text).type == "empty_output"


NO_CONTENT = object()


@pytest.mark.parametrize(
    "content",
    ["4", ["4"], [{"text": "4"}], None, NO_CONTENT],
    ids=["a string", "strings", "blocks of no type", "null", "none at all"],
)
def test_anthropic_content_of_the_wrong_shape_is_an_infrastructure_failure_and_is_retried(model_server, content):
    """Content that is not a list of typed blocks read as an empty reply (a string's characters were skipped as blocks
    of no type; a message with null or no content, which the API always sends as a list, read as one with none): the
    trial was empty_output, the agent's failure, and was never retried."""
    message = {"id": "x", "type": "message", "role": "assistant", "model": "m", "stop_reason": "end_turn"}
    if content is not NO_CONTENT:
        message["content"] = content
    assert_unreadable_and_retried(model_server, ms.ANTHROPIC, json.dumps(message))
