"""Failed model calls traced by another instrumentation only, each typed live and from its stored trace.

    python foreign_failures.py INSTRUMENTATION STORE

INSTRUMENTATION is one of :data:`INSTRUMENTATIONS`. Each error of ``STREAMED_ERRORS`` (tests/test_models.py), sent
unstreamed with its status and inside a stream, and a refused connection, fails a call of the real SDK client
against the loopback model server, with the instrumentation really installed (in a process of its own: OpenLLMetry's
uninstrument() leaves its proxies in place). The exception is typed as a trial's is (``classify``, raised where the
runner's ``_raised_in`` finds it); its spans are written by the real exporter to a store of their own, as a production
trace with no agenteval span, and typed from the ``traces`` view by ``trace_failure``. One JSON line per call:
``{"case", "live", "recorded"}``.
"""

from __future__ import annotations

import json
import sys

import anthropic
import model_servers as ms
import openai
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import set_tracer_provider
from test_models import STREAMED_ERRORS, _error_replies

from agenteval.analysis._traces import trace_failure
from agenteval.run._failures import classify
from agenteval.run._trial import _raised_in
from agenteval.store import Store
from agenteval_exporters import ParquetSpanExporter

REFUSED = "http://127.0.0.1:9"
"""A loopback port nothing listens on: the connection is refused."""


def _openinference_openai(provider: TracerProvider) -> None:
    from openinference.instrumentation.openai import OpenAIInstrumentor

    OpenAIInstrumentor().instrument(tracer_provider=provider)


def _openinference_anthropic(provider: TracerProvider) -> None:
    from openinference.instrumentation.anthropic import AnthropicInstrumentor

    AnthropicInstrumentor().instrument(tracer_provider=provider)


def _openai_v2(provider: TracerProvider) -> None:
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    OpenAIInstrumentor().instrument(tracer_provider=provider)


def _openllmetry(provider: TracerProvider) -> None:
    from opentelemetry.instrumentation.openai import OpenAIInstrumentor

    OpenAIInstrumentor().instrument(tracer_provider=provider)


INSTRUMENTATIONS = {
    "openinference-openai": (ms.OPENAI, _openinference_openai),
    "openinference-anthropic": (ms.ANTHROPIC, _openinference_anthropic),
    "opentelemetry-openai-v2": (ms.OPENAI, _openai_v2),
    "openllmetry-openai": (ms.OPENAI, _openllmetry),
    "anthropic-sdk": (ms.ANTHROPIC, lambda provider: None),  # the SDK traces itself
}


def _call(api: str, url: str, stream: bool) -> None:
    messages = [{"role": "user", "content": "What is 2 + 2?"}]
    if api == ms.OPENAI:
        client = openai.OpenAI(base_url=f"{url}/v1", api_key="k", max_retries=0)
        reply = client.chat.completions.create(model="gpt-4o", messages=messages, stream=stream)
    else:
        client = anthropic.Anthropic(base_url=url, api_key="k", max_retries=0)
        reply = client.messages.create(model="claude-test", max_tokens=9, messages=messages, stream=stream)
    if stream:
        for _ in reply:
            pass


def main(which: str, store: str) -> None:
    api, instrument = INSTRUMENTATIONS[which]
    spans = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(spans))
    set_tracer_provider(provider)
    instrument(provider)
    errors = [(error, status) for on, error, status in STREAMED_ERRORS if on == api] + [(None, None)]
    with ms.ModelServer() as server:
        for number, ((error, status), stream) in enumerate((e, s) for e in errors for s in (False, True)):
            spans.clear()
            if error is not None:
                unstreamed, streamed = _error_replies(api, error, status)
                server.script(streamed if stream else unstreamed)
            try:
                _call(api, REFUSED if error is None else server.url(api).removesuffix("/v1"), stream)
            except (openai.APIError, anthropic.APIError) as exc:
                finished = list(spans.get_finished_spans())
                live = classify(exc, raised_in=_raised_in(finished, exc))
                exporter = ParquetSpanExporter(f"{store}/{number}")
                exporter.export(finished)
                exporter.shutdown()
                (row,) = Store(f"{store}/{number}").rows("SELECT * FROM traces")
                recorded = trace_failure(row)
                name = "connection" if error is None else str(error.get("code") or error["type"])
                print(
                    json.dumps(
                        {
                            "case": f"{name}-{'streamed' if stream else 'plain'}",
                            "live": [live.type, live.infrastructure],
                            "recorded": recorded and [recorded.failure_type, recorded.infrastructure],
                        }
                    )
                )


if __name__ == "__main__":
    main(*sys.argv[1:])
