"""An @llm_call that returns the SDK's stream object (not yields it): the span covers the stream's
consumption and records what a yielded stream records; it ends also when the consumer stops early, closes
the stream, or never consumes it. Real openai and anthropic clients against the loopback model server."""

from __future__ import annotations

import asyncio
import gc
import json

import anthropic
import model_servers as ms
import openai
import pytest

from agenteval import llm_call
from agenteval.dataset import Case, Dataset
from agenteval.run import evaluate
from agenteval.store import Store
from agenteval_instrumentation import attributes as A


@pytest.fixture
def oai(model_server):
    return openai.OpenAI(base_url=model_server.openai_url, api_key="test-key", max_retries=0)


def chats(spans):
    return [s for s in spans.get_finished_spans() if s.instrumentation_scope.name == "agenteval_instrumentation"]


def output_text(span):
    (message,) = json.loads(span.attributes[A.GEN_AI_OUTPUT_MESSAGES])
    return "".join(p.get("content", "") for p in message["parts"] if p["type"] == "text"), message


def test_a_returned_openai_stream_is_followed_to_its_end(spans, oai, model_server):
    model_server.script(ms.text("Four.", finish="length", input_tokens=9, output_tokens=2, model="test-model-2026"))

    @llm_call(provider="openai")
    def chat(messages):
        return oai.chat.completions.create(
            model="gpt-4o-mini", messages=messages, stream=True, stream_options={"include_usage": True}
        )

    stream = chat([{"role": "user", "content": "2+2?"}])
    assert chats(spans) == []  # still open: the stream is not read yet
    pieces = [c.choices[0].delta.content for c in stream if c.choices and c.choices[0].delta.content]
    assert "".join(pieces) == "Four."
    (span,) = chats(spans)
    assert span.name == "chat test-model-2026"
    assert span.attributes[A.GEN_AI_RESPONSE_MODEL] == "test-model-2026"
    assert (span.attributes[A.GEN_AI_USAGE_INPUT_TOKENS], span.attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS]) == (9, 2)
    assert span.attributes[A.GEN_AI_RESPONSE_FINISH_REASONS] == ("length",)
    text, message = output_text(span)
    assert (text, message["finish_reason"]) == ("Four.", "length")
    assert span.attributes[A.STREAM_CHUNKS] >= 4
    assert A.STREAM_CLOSED_EARLY not in span.attributes


def test_a_returned_async_openai_stream(spans, model_server):
    client = openai.AsyncOpenAI(base_url=model_server.openai_url, api_key="test-key", max_retries=0)
    model_server.script(ms.text("4"))

    @llm_call(provider="openai", model="gpt-4o")
    async def chat(messages):
        return await client.chat.completions.create(model="gpt-4o", messages=messages, stream=True)

    async def consume():
        stream = await chat([{"role": "user", "content": "hi"}])
        return [c async for c in stream]

    assert asyncio.run(consume())
    (span,) = chats(spans)
    assert output_text(span)[0] == "4"
    assert span.attributes[A.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_a_returned_anthropic_stream_with_a_tool_call(spans, model_server, mode):
    model_server.script(
        ms.tool_call("add", {"a": 1, "b": 2}, call_id="toolu_1", text="On it.", input_tokens=11, output_tokens=3)
    )
    kwargs = {"base_url": model_server.anthropic_url, "api_key": "k", "max_retries": 0, "open_telemetry": False}
    request = {
        "model": "claude-test",
        "max_tokens": 32,
        "stream": True,
        "messages": [{"role": "user", "content": "1+2"}],
    }
    if mode == "sync":
        client = anthropic.Anthropic(**kwargs)

        @llm_call(provider="anthropic")
        def chat():
            return client.messages.create(**request)

        events = list(chat())
    else:
        aclient = anthropic.AsyncAnthropic(**kwargs)

        @llm_call(provider="anthropic")
        async def achat():
            return await aclient.messages.create(**request)

        async def consume():
            return [e async for e in await achat()]

        events = asyncio.run(consume())
    assert events[0].type == "message_start"
    (span,) = chats(spans)
    text, message = output_text(span)
    assert text == "On it."
    assert message["parts"][1] == {"type": "tool_call", "id": "toolu_1", "name": "add", "arguments": {"a": 1, "b": 2}}
    assert (span.attributes[A.GEN_AI_USAGE_INPUT_TOKENS], span.attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS]) == (11, 3)


def test_a_returned_stream_manager_records_the_accumulated_message(spans, model_server):
    client = anthropic.Anthropic(base_url=model_server.anthropic_url, api_key="k", max_retries=0, open_telemetry=False)
    model_server.script(ms.text("Hello there", input_tokens=7, output_tokens=4))

    @llm_call(provider="anthropic")
    def chat(messages):
        return client.messages.stream(model="claude-test", max_tokens=32, messages=messages)

    with chat([{"role": "user", "content": "hi"}]) as stream:
        assert "".join(stream.text_stream) == "Hello there"  # read by the SDK's helper, not through the proxy
        assert chats(spans) == []
    (span,) = chats(spans)
    assert output_text(span)[0] == "Hello there"
    assert (span.attributes[A.GEN_AI_USAGE_INPUT_TOKENS], span.attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS]) == (7, 4)
    assert span.attributes[A.GEN_AI_RESPONSE_FINISH_REASONS] == ("end_turn",)


def test_the_span_ends_when_the_consumer_stops_early_or_never_reads(spans, oai, model_server):
    @llm_call(provider="openai", model="gpt-4o")
    def chat():
        return oai.chat.completions.create(model="gpt-4o", messages=[{"role": "user", "content": "x"}], stream=True)

    model_server.script(ms.text("a long answer"))
    with chat() as stream:
        next(iter(stream))
    (closed,) = chats(spans)
    assert closed.attributes[A.STREAM_CLOSED_EARLY] is True
    assert closed.attributes[A.STREAM_CHUNKS] == 1

    spans.clear()
    unread = chat()
    del unread
    gc.collect()
    (never,) = chats(spans)
    assert never.attributes[A.STREAM_CLOSED_EARLY] is True
    assert never.attributes[A.STREAM_CHUNKS] == 0


def test_a_returned_stream_cut_by_the_length_limit_fails_the_trial_as_truncated(tmp_path, model_server):
    client = openai.OpenAI(base_url=model_server.openai_url, api_key="k", max_retries=0)
    model_server.script(ms.truncated("The answer is a very"))

    @llm_call(provider="openai", model="gpt-4o")
    def chat(question):
        return client.chat.completions.create(
            model="gpt-4o", messages=[{"role": "user", "content": question}], stream=True
        )

    def answer(question: str) -> str:
        return "".join(c.choices[0].delta.content or "" for c in chat(question) if c.choices)

    cases = Dataset("t", "t(test)", "hash-t", [Case(id="c", input="2+2?", expected_output="The answer is a very")])
    experiment = evaluate(answer, cases, attempts=1, store=tmp_path / "s", progress="none")
    (row,) = Store(tmp_path / "s").rows(
        "SELECT outcome, failure_type FROM trials WHERE experiment_id = ?", [experiment.id]
    )
    assert row == {"outcome": "failed", "failure_type": "output_truncated"}


def test_a_returned_stream_is_still_an_instance_of_the_sdks_class(spans, oai, model_server):
    """Code that tells a streamed reply from a whole one by its class (``isinstance(reply, openai.Stream)``) takes
    the same branch with the decorator as without it: the proxy answers ``isinstance`` for the SDK's object."""
    aclient = openai.AsyncOpenAI(base_url=model_server.openai_url, api_key="k", max_retries=0)
    request = {"model": "gpt-4o", "messages": [{"role": "user", "content": "x"}]}

    @llm_call(provider="openai")
    def chat():
        return oai.chat.completions.create(**request, stream=True)

    @llm_call(provider="openai")
    async def achat():
        return await aclient.chat.completions.create(**request, stream=True)

    @llm_call(provider="openai")
    def managed():
        return oai.chat.completions.stream(**request)

    model_server.script(ms.text("one"), ms.text("two"), ms.text("three"))
    stream = chat()
    assert isinstance(stream, openai.Stream)
    assert stream.__class__ is openai.Stream
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == "one"

    async def consume():
        astream = await achat()
        assert isinstance(astream, openai.AsyncStream)
        return [c async for c in astream]

    assert asyncio.run(consume())
    manager = managed()
    assert isinstance(manager, openai.lib.streaming.chat.ChatCompletionStreamManager)
    with manager as events:
        assert isinstance(events, openai.lib.streaming.chat.ChatCompletionStream)
        assert events.get_final_completion().choices[0].message.content == "three"
    assert [output_text(span)[0] for span in chats(spans)] == ["one", "two", "three"]
