"""Other instrumentations' spans are first-class, and usage is counted once per model request.

Each test runs a real instrumentation package (or the anthropic SDK's own tracing) around the real SDK
client, against the loopback model server, inside a real evaluate() run, and reads the store back.
"""

from __future__ import annotations

import json
import subprocess
import sys

import anthropic
import model_servers as ms
import openai
import pytest

from agenteval import llm_call
from agenteval.analysis import build_report
from agenteval.dataset import Case, Dataset
from agenteval.run import evaluate
from agenteval.scorers import rescore
from agenteval.store import Store


def one_case(**fields) -> Dataset:
    case = Case(id="c1", input="What is 2 + 2?", expected_output="4", **fields)
    return Dataset("t", "t(test)", f"hash-{sorted(fields)}", [case])


def run(tmp_path, agent, **fields):
    store = tmp_path / "s"
    experiment = evaluate(agent, one_case(**fields), attempts=1, store=store, progress="none")
    return Store(store), experiment


def trial(store, experiment):
    (row,) = store.rows("SELECT * FROM trials WHERE experiment_id = ?", [experiment.id])
    return row


def scores(store, experiment):
    rows = store.rows("SELECT scorer, value FROM scores WHERE experiment_id = ? ORDER BY scorer", [experiment.id])
    return {r["scorer"]: r["value"] for r in rows}


def model_calls(store, experiment):
    report = build_report(store, experiment.id)
    return [(t.role, t.model_calls, t.input_tokens, t.output_tokens) for t in report.tokens]


def assert_rescoring_reproduces(store, experiment):
    before = scores(store, experiment)
    rescore(store, experiment.id)
    assert scores(store, experiment) == before


@pytest.fixture
def uninstrument():
    done = []
    yield done.append
    for instrumentor in done:
        instrumentor.uninstrument()


def test_the_anthropic_sdks_own_span_is_not_counted_twice(tmp_path, model_server):
    client = anthropic.Anthropic(base_url=model_server.anthropic_url, api_key="k", max_retries=0)  # its own tracing on
    assert client.open_telemetry["traces"]["enabled"]
    model_server.script(ms.text("4", input_tokens=4689, output_tokens=12))

    @llm_call(provider="anthropic")
    def chat(question):
        return client.messages.create(
            model="claude-test", max_tokens=32, messages=[{"role": "user", "content": question}]
        )

    store, experiment = run(tmp_path, lambda question: chat(question).content[0].text)
    spans = store.rows(
        "SELECT scope_name, input_tokens, wraps_model_call FROM spans WHERE operation = 'chat' ORDER BY scope_name"
    )
    assert spans == [
        {"scope_name": "agenteval_instrumentation", "input_tokens": None, "wraps_model_call": True},
        {"scope_name": "com.anthropic.sdk.python", "input_tokens": 4689, "wraps_model_call": None},
    ]
    row = trial(store, experiment)
    assert (row["outcome"], row["input_tokens"], row["output_tokens"]) == ("passed", 4689, 12)
    assert model_calls(store, experiment) == [("agent", 1, 4689, 12)]
    assert_rescoring_reproduces(store, experiment)


def test_the_official_openai_instrumentation_under_llm_call(tmp_path, model_server, provider, uninstrument):
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    uninstrument(instrumentor)
    client = openai.OpenAI(base_url=model_server.openai_url, api_key="k", max_retries=0)
    model_server.script(ms.text("4", input_tokens=30, output_tokens=2))

    @llm_call(provider="openai")
    def chat(question):
        return client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": question}])

    store, experiment = run(tmp_path, lambda question: chat(question).choices[0].message.content)
    scopes = store.rows("SELECT scope_name, input_tokens FROM spans WHERE operation = 'chat' ORDER BY scope_name")
    assert [s["scope_name"] for s in scopes] == ["agenteval_instrumentation", "opentelemetry.util.genai.handler"]
    row = trial(store, experiment)
    assert (row["input_tokens"], row["output_tokens"]) == (30, 2)
    assert model_calls(store, experiment) == [("agent", 1, 30, 2)]
    assert_rescoring_reproduces(store, experiment)


def test_the_official_openai_instrumentation_alone_fills_the_typed_columns(
    tmp_path, model_server, provider, uninstrument, monkeypatch
):
    # No agenteval decorator at all: the model calls come from opentelemetry-instrumentation-openai-v2 only.
    from opentelemetry.instrumentation.openai_v2 import OpenAIInstrumentor

    monkeypatch.setenv("OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT", "SPAN_ONLY")
    monkeypatch.setenv("OTEL_SEMCONV_STABILITY_OPT_IN", "gen_ai_latest_experimental")
    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    uninstrument(instrumentor)
    client = openai.OpenAI(base_url=model_server.openai_url, api_key="k", max_retries=0)
    model_server.script(
        ms.tool_call("add", {"a": 2, "b": 2}, input_tokens=20, output_tokens=3, model="test-model-2026"),
        ms.text("4", input_tokens=25, output_tokens=1, model="test-model-2026"),
    )

    def agent(question: str) -> str:
        messages = [{"role": "user", "content": question}]
        first = client.chat.completions.create(model="gpt-4o", messages=messages)
        call = first.choices[0].message.tool_calls[0]
        reply = client.chat.completions.create(
            model="gpt-4o",
            messages=messages
            + [first.choices[0].message.model_dump(), {"role": "tool", "tool_call_id": call.id, "content": "4"}],
        )
        return reply.choices[0].message.content

    store, experiment = run(tmp_path, agent)
    chats = store.rows(
        "SELECT scope_name, provider, request_model, response_model, input_tokens, output_tokens, finish_reason,"
        " attributes->>'$.\"gen_ai.input.messages\"' AS input, attributes->>'$.\"gen_ai.output.messages\"' AS output"
        " FROM spans WHERE operation = 'chat' ORDER BY start_time"
    )
    assert [c["scope_name"] for c in chats] == ["opentelemetry.util.genai.handler"] * 2
    assert [(c["provider"], c["request_model"], c["response_model"]) for c in chats] == [
        ("openai", "gpt-4o", "test-model-2026")
    ] * 2
    assert [(c["input_tokens"], c["output_tokens"], c["finish_reason"]) for c in chats] == [
        (20, 3, "tool_calls"),
        (25, 1, "stop"),
    ]
    asked, answered = json.loads(chats[1]["input"]), json.loads(chats[1]["output"])
    assert asked[0] == {"role": "user", "parts": [{"type": "text", "content": "What is 2 + 2?"}]}
    assert answered[0]["parts"][0] == {"type": "text", "content": "4"}
    row = trial(store, experiment)
    assert (row["outcome"], row["input_tokens"], row["output_tokens"]) == ("passed", 45, 4)
    assert model_calls(store, experiment) == [("agent", 2, 45, 4)]
    assert_rescoring_reproduces(store, experiment)


def test_openinference_spans_fill_the_typed_columns_without_any_agenteval_decorator(
    tmp_path, model_server, provider, uninstrument
):
    from openinference.instrumentation import OITracer, TraceConfig
    from openinference.instrumentation.openai import OpenAIInstrumentor

    instrumentor = OpenAIInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    uninstrument(instrumentor)
    tracer = OITracer(provider.get_tracer("my-agent"), TraceConfig())
    client = openai.OpenAI(base_url=model_server.openai_url, api_key="k", max_retries=0)
    model_server.script(
        ms.tool_call("add", {"a": 2, "b": 2}, input_tokens=20, output_tokens=3, model="test-model-2026"),
        ms.text("4", input_tokens=25, output_tokens=1, model="test-model-2026"),
    )

    @tracer.tool(name="add")
    def add(a: int, b: int) -> int:
        return a + b

    @tracer.retriever
    def search(query: str) -> list[dict]:
        span = __import__("opentelemetry").trace.get_current_span()
        span.set_attribute("retrieval.documents.0.document.id", "doc-arith")
        span.set_attribute("retrieval.documents.0.document.score", 0.9)
        return [{"id": "doc-arith"}]

    def agent(question: str) -> str:
        search(question)
        messages = [{"role": "user", "content": question}]
        first = client.chat.completions.create(model="gpt-4o", messages=messages)
        call = first.choices[0].message.tool_calls[0]
        add(2, 2)
        return (
            client.chat.completions.create(
                model="gpt-4o", messages=messages + [{"role": "tool", "tool_call_id": call.id, "content": "4"}]
            )
            .choices[0]
            .message.content
        )

    store, experiment = run(tmp_path, agent, expected_tools=("add",), relevant_docs=("doc-arith",))
    chats = store.rows(
        "SELECT provider, response_model, input_tokens, output_tokens, finish_reason FROM spans"
        " WHERE operation = 'chat' ORDER BY start_time"
    )
    assert chats == [
        {
            "provider": "openai",
            "response_model": "test-model-2026",
            "input_tokens": 20,
            "output_tokens": 3,
            "finish_reason": "tool_calls",
        },
        {
            "provider": "openai",
            "response_model": "test-model-2026",
            "input_tokens": 25,
            "output_tokens": 1,
            "finish_reason": "stop",
        },
    ]
    (tool_row,) = store.rows(
        "SELECT tool_name, attributes->>'$.\"gen_ai.tool.call.arguments\"' AS arguments,"
        " attributes->>'$.\"gen_ai.tool.call.result\"' AS result FROM spans WHERE operation = 'execute_tool'"
    )
    assert tool_row["tool_name"] == "add" and '"a": 2' in tool_row["arguments"] and tool_row["result"] == "4"
    row = trial(store, experiment)
    assert (row["outcome"], row["input_tokens"], row["output_tokens"]) == ("passed", 45, 4)
    found = scores(store, experiment)
    assert found["tool_use"] == 1.0 and found["retrieval_recall"] == 1.0
    assert model_calls(store, experiment) == [("agent", 2, 45, 4)]
    assert_rescoring_reproduces(store, experiment)


def test_openinference_around_the_self_tracing_anthropic_sdk_counts_once(
    tmp_path, model_server, provider, uninstrument
):
    from openinference.instrumentation.anthropic import AnthropicInstrumentor

    instrumentor = AnthropicInstrumentor()
    instrumentor.instrument(tracer_provider=provider)
    uninstrument(instrumentor)
    client = anthropic.Anthropic(base_url=model_server.anthropic_url, api_key="k", max_retries=0)
    model_server.script(ms.text("4", input_tokens=50, output_tokens=5))

    def agent(question: str) -> str:
        reply = client.messages.create(
            model="claude-test", max_tokens=9, messages=[{"role": "user", "content": question}]
        )
        return reply.content[0].text

    store, experiment = run(tmp_path, agent)
    spans = store.rows(
        "SELECT scope_name, wraps_model_call FROM spans WHERE operation = 'chat' ORDER BY start_time, scope_name"
    )
    assert spans == [
        {"scope_name": "openinference.instrumentation.anthropic", "wraps_model_call": True},
        {"scope_name": "com.anthropic.sdk.python", "wraps_model_call": None},
    ]
    row = trial(store, experiment)
    assert (row["input_tokens"], row["output_tokens"]) == (50, 5)
    assert model_calls(store, experiment) == [("agent", 1, 50, 5)]


OPENLLMETRY_AGENT = """
import json, sys
import openai
from opentelemetry.instrumentation.openai import OpenAIInstrumentor
from agenteval import tool
from agenteval.dataset import Case, Dataset
from agenteval.run import evaluate
from agenteval.store import Store

OpenAIInstrumentor().instrument()
client = openai.OpenAI(base_url=sys.argv[1], api_key="k", max_retries=0)

@tool
def lookup(question: str) -> str:
    return question

def agent(question: str) -> str:
    lookup(question)
    reply = client.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": question}])
    return reply.choices[0].message.content

case = Case(id="c1", input="What is 2 + 2?", expected_output="4", expected_tools=("lookup",))
experiment = evaluate(agent, Dataset("t", "t(test)", "h", [case]), attempts=1, store=sys.argv[2], progress="none")
store = Store(sys.argv[2])
print(json.dumps({
    "chats": store.rows(
        "SELECT scope_name, provider, request_model, response_model, input_tokens, output_tokens, finish_reason,"
        " attributes FROM spans WHERE operation = 'chat'"
    ),
    "trial": store.rows("SELECT input_tokens, output_tokens FROM trials"),
    "scores": store.rows("SELECT scorer, value FROM scores WHERE scorer = 'tool_use'"),
}))
"""


def test_openllmetry_spans_are_read(tmp_path, model_server):
    # In a process of its own: OpenLLMetry's uninstrument() leaves its stream proxies in place.
    model_server.script(ms.text("4", input_tokens=8, output_tokens=1, model="test-model-2026"))
    done = subprocess.run(
        [sys.executable, "-c", OPENLLMETRY_AGENT, model_server.openai_url, str(tmp_path / "s")],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    found = json.loads(done.stdout.strip().splitlines()[-1])
    (chat,) = found["chats"]
    attributes = json.loads(chat.pop("attributes"))
    assert chat == {
        "scope_name": "opentelemetry.instrumentation.openai.v1",
        "provider": "openai",
        "request_model": "gpt-4o",
        "response_model": "test-model-2026",
        "input_tokens": 8,
        "output_tokens": 1,
        "finish_reason": "stop",
    }
    asked = json.loads(attributes["gen_ai.input.messages"])
    assert asked == [{"role": "user", "parts": [{"type": "text", "content": "What is 2 + 2?"}]}]
    assert json.loads(attributes["gen_ai.output.messages"])[0]["parts"] == [{"type": "text", "content": "4"}]
    assert found["trial"] == [{"input_tokens": 8, "output_tokens": 1}]
    assert found["scores"] == [{"scorer": "tool_use", "value": 1.0}]
