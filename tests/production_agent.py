"""A production agent for the tests: decorated code called outside any experiment, its spans written by the
in-process exporter with a resource naming its service, exactly what ``agenteval collect`` writes too.

    python production_agent.py STORE SERVICE agent N        N traces through the decorated agent, one scenario each
                                                            (STORE may be an OTLP/HTTP endpoint: http://.../v1/traces)
    python production_agent.py STORE SERVICE gateway N      the same, each called with a W3C traceparent, as an
                                                            agent behind a gateway whose spans go elsewhere
    python production_agent.py STORE SERVICE past N DAYS [FILES]    N traces of 3 spans each, started DAYS days
                                                                    ago (published as FILES files, default one)
    python production_agent.py STORE SERVICE stream N       N traces written as they go (flush every 10 ms)
    python production_agent.py STORE SERVICE past-stream N DAYS     the same, started DAYS days ago

It prints ``ready`` once it has set up, then the traces it wrote, as a last line ``wrote <traces> <spans>``.
"""

from __future__ import annotations

import secrets
import sys
import time

from opentelemetry import context
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.trace import set_tracer_provider
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

from agenteval_exporters import ParquetSpanExporter
from agenteval_instrumentation import agent, llm_call, set_llm_response, tool
from agenteval_instrumentation import attributes as A


class MaxStepsExceeded(Exception):
    """Named as agenteval's own: the classifier reads a recorded error by its type's name."""


class APIConnectionError(Exception):
    """Named as the OpenAI and Anthropic SDKs' own connection error."""


SCENARIOS = ("ok", "handled", "tool_error", "max_steps", "unreachable", "empty", "ok_again")
"""One per trace, in turn; the expected failure type of each is in the tests."""


@tool
def lookup(city: str) -> str:
    if city == "Atlantis":
        raise KeyError(city)
    return "sunny"


@llm_call(model="gpt-4o-mini", provider="openai")
def chat(messages: list[dict[str, str]]) -> str:
    if scenario == "unreachable":
        raise APIConnectionError("connection refused")
    set_llm_response(input_tokens=100, output_tokens=20, finish_reasons="stop")
    return "ok"


scenario = "ok"
"""The scenario of the trace being made (a global: the agent's one argument is the user's question)."""


@agent
def assistant(question: str) -> str:
    chat([{"role": "user", "content": question}])
    if scenario == "max_steps":
        raise MaxStepsExceeded("gave up after 5 steps")
    if scenario == "empty":
        return ""
    city = "Atlantis" if scenario in ("handled", "tool_error") else "Paris"
    try:
        weather = lookup(city)
    except KeyError:
        if scenario == "tool_error":
            raise
        return "Sorry, the weather service is unavailable right now."
    return f"It is {weather} in {city}."


def main() -> None:
    store, service, mode, count = sys.argv[1], sys.argv[2], sys.argv[3], int(sys.argv[4])
    provider = TracerProvider(resource=Resource.create({"service.name": service}))
    if store.startswith("http://"):  # an OTLP/HTTP endpoint (agenteval collect) in place of a store
        from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
        from opentelemetry.sdk.trace.export import BatchSpanProcessor

        provider.add_span_processor(BatchSpanProcessor(OTLPSpanExporter(endpoint=store)))
    else:
        exporter = ParquetSpanExporter(store, flush_interval=0.01 if mode in ("stream", "past-stream") else 3600)
        provider.add_span_processor(SimpleSpanProcessor(exporter))
    set_tracer_provider(provider)
    print("ready", flush=True)
    spans = 0
    for i in range(count):
        if mode == "past-stream":
            spans += past_trace(provider, i, float(sys.argv[5]))
            continue
        if mode == "past":
            spans += past_trace(provider, i, float(sys.argv[5]))
            files = int(sys.argv[6]) if len(sys.argv) > 6 else 1
            if files > 1 and (i + 1) % max(1, count // files) == 0:
                exporter.force_flush()
            continue
        global scenario
        scenario = SCENARIOS[i % len(SCENARIOS)]
        token = context.attach(from_gateway()) if mode == "gateway" else None
        try:
            assistant(f"weather question {i}")
        except Exception:
            pass
        finally:
            if token is not None:
                context.detach(token)
        spans += 3 if scenario in ("ok", "ok_again", "handled", "tool_error") else 2
    provider.shutdown()
    print(f"wrote {count} {spans}", flush=True)


def from_gateway() -> context.Context:
    """The context a request from a gateway carries: its span (the agent's parent) is remote, never sent here."""
    parent = {"traceparent": f"00-{secrets.token_hex(16)}-{secrets.token_hex(8)}-01"}
    return TraceContextTextMapPropagator().extract(parent)


def past_trace(provider: TracerProvider, i: int, days: float) -> int:
    """A trace of a root, a model call and a tool call that started ``days`` days ago."""
    tracer = provider.get_tracer("production.past")
    start = time.time_ns() - int(days * 86400e9) + i * 1_000_000
    root = tracer.start_span(f"invoke_agent past {i}", start_time=start)
    from opentelemetry.trace import set_span_in_context

    context = set_span_in_context(root)
    model = tracer.start_span(
        "chat m",
        context=context,
        start_time=start + 10,
        attributes={A.GEN_AI_OPERATION_NAME: "chat", A.GEN_AI_USAGE_INPUT_TOKENS: 10},
    )
    model.end(end_time=start + 20)
    call = tracer.start_span(
        "execute_tool t",
        context=context,
        start_time=start + 30,
        attributes={A.GEN_AI_OPERATION_NAME: "execute_tool", A.GEN_AI_TOOL_NAME: "t"},
    )
    call.end(end_time=start + 40)
    root.end(end_time=start + 50)
    return 3


if __name__ == "__main__":
    main()
