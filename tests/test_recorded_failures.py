"""A failed model call typed from its stored span is typed as the live failure was.

Each error a provider sends (inside a stream, after its 200, and unstreamed) is sent by the loopback model server to
the real SDK under agenteval's Model: once inside a real evaluate() run, whose trial is typed from the live exception,
and once as a production trace (the same agent called outside any run, its spans written by the real exporter), typed
by classify_recorded from what the spans hold. Both must give the same type and infrastructure flag.
"""

from __future__ import annotations

import asyncio

import anthropic
import model_servers as ms
import openai
import pytest
from test_models import STREAMED_ERRORS, _error_replies

from agenteval.analysis._traces import trace_failure
from agenteval.dataset import Case, Dataset
from agenteval.models import Model, RetryPolicy
from agenteval.run import evaluate
from agenteval.run._recorded import classify_recorded
from agenteval.store import Store
from agenteval_exporters import ParquetSpanExporter
from agenteval_instrumentation import agent

ONCE = RetryPolicy(max_retries=1, base_delay=0.001, max_delay=0.01)
"""One quick retry, then the model layer gives up: a rate limit it gave up on is not retried by the runner, so the
trial ends on the provider's error, never on its timeout (a production trace has no runner to retry it)."""
CASES = [(api, error, status, stream) for api, error, status in STREAMED_ERRORS for stream in (True, False)]


def _agent(server: ms.ModelServer, api: str, stream: bool):
    @agent
    def answer(question: str) -> str:
        async def go() -> str:
            m = Model(f"{api}/test-model", base_url=server.url(api), stream=stream, retry=ONCE)
            try:
                return (await m.complete([{"role": "user", "content": question}])).text
            finally:
                await m.aclose()

        return asyncio.run(go())

    return answer


def _live(tmp_path, answer) -> tuple[str, bool]:
    case = Case(id="c1", input="What is 2 + 2?", expected_output="4")
    experiment = evaluate(answer, Dataset("t", "t", "h", [case]), attempts=1, store=tmp_path / "run", progress="none")
    (row,) = Store(tmp_path / "run").rows(
        "SELECT failure_type, infrastructure FROM trials WHERE experiment_id = ?", [experiment.id]
    )
    return row["failure_type"], row["infrastructure"]


def _recorded(tmp_path, answer, spans) -> tuple[str, bool]:
    spans.clear()
    with pytest.raises((anthropic.APIError, openai.APIError)):  # the provider's error, as the SDK raised it
        answer("What is 2 + 2?")
    exporter = ParquetSpanExporter(tmp_path / "production")
    exporter.export(spans.get_finished_spans())
    exporter.shutdown()
    (row,) = Store(tmp_path / "production").rows("SELECT * FROM traces")
    failure = trace_failure(row)
    return failure.failure_type, failure.infrastructure


@pytest.mark.parametrize(
    ("api", "error", "status", "stream"),
    CASES,
    ids=[f"{api}-{error.get('code') or error['type']}-{'streamed' if s else 'plain'}" for api, error, _, s in CASES],
)
def test_a_failed_model_call_is_typed_from_its_span_as_it_was_live(
    tmp_path, model_server, spans, api, error, status, stream
):
    unstreamed, streamed = _error_replies(api, error, status)
    reply = streamed if stream else unstreamed
    answer = _agent(model_server, api, stream)
    model_server.responder = lambda request: reply  # every request, the trial's retries of a rate limit too
    live = _live(tmp_path, answer)
    assert live[0] is not None  # the trial failed, on the provider's error
    assert _recorded(tmp_path, answer, spans) == live


def test_a_streamed_error_recorded_with_its_streams_200_is_typed_by_its_recorded_type():
    """Anthropic's overloaded_error sent inside a stream comes with the stream's 200: typed from its span it was an
    llm_error of the agent's, where the live one is the provider's (infrastructure). Its type, recorded as
    agenteval.provider_error.type, says what the 200 does not."""
    args = ("ERROR", "anthropic.APIStatusError", "Overloaded")
    recorded = classify_recorded(*args, raised_in="chat", http_status=200, error_kind="overloaded_error")
    assert (recorded.type, recorded.infrastructure) == ("llm_error", True)
    code = classify_recorded(*args, raised_in="chat", error_code="context_length_exceeded")
    assert (code.type, code.infrastructure) == ("llm_error", False)
    quota = classify_recorded("ERROR", "openai.APIError", "quota", raised_in="chat", error_kind="insufficient_quota")
    assert (quota.type, quota.infrastructure) == ("quota_exhausted", True)
    unsaid = classify_recorded(*args, raised_in="chat", http_status=200)  # nothing on the span says what it was
    assert (unsaid.type, unsaid.infrastructure) == ("llm_error", False)


def test_an_exception_of_the_agents_own_records_no_provider_error():
    """SystemExit's code (an exit status) and an OSError's are no provider's error code: nothing is recorded."""
    from agenteval_instrumentation.provider_errors import error_attributes

    assert error_attributes(SystemExit(1)) == {}
    assert error_attributes(ValueError("bad")) == {}

    class Coded(Exception):
        code = "E42"

    assert error_attributes(Coded()) == {}


def test_an_older_sdks_message_gives_its_status_and_error_body_read_as_a_literal_never_run():
    """openai 1.x and older anthropic SDKs wrote ``Error code: 429 - {...}``, the repr of the error body: an exhausted
    quota's code is only there. It is read with ast.literal_eval under a size limit; anything else is not a body."""
    quota = "Error code: 429 - {'error': {'message': 'Rate', 'type': 'requests', 'code': 'insufficient_quota'}}"
    found = classify_recorded("ERROR", "openai.RateLimitError", f"RateLimitError: {quota}", raised_in="chat")
    assert (found.type, found.infrastructure) == ("quota_exhausted", True)
    overloaded = "Error code: 529 - {'type': 'error', 'error': {'type': 'overloaded_error', 'message': 'Overloaded'}}"
    found = classify_recorded("ERROR", "anthropic.APIStatusError", overloaded)
    assert (found.type, found.infrastructure) == ("llm_error", True)
    code = "__import__('os').system('false')"
    for body in (f"{{'error': {code}}}", "{'error': " + "[" * 5000 + "]" * 5000 + "}", "{'error': {'code': 'insuff"):
        found = classify_recorded("ERROR", "openai.APIError", f"Error code: 400 - {body}", raised_in="chat")
        assert (found.type, found.infrastructure) == ("llm_error", False)  # its status alone: the agent's request
