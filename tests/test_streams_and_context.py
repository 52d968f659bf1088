"""Streams (generators, async generators) and context across async tasks and threads."""

from __future__ import annotations

import asyncio
import gc
import json
import logging
from concurrent.futures import ThreadPoolExecutor
from types import SimpleNamespace

import pytest
from opentelemetry import trace
from opentelemetry.trace import StatusCode

from agenteval_instrumentation import (
    ContextThreadPoolExecutor,
    agent,
    llm_call,
    submit_with_context,
    tool,
    with_current_context,
)
from agenteval_instrumentation import (
    attributes as A,
)

tracer = trace.get_tracer("tests")


def only(spans, name):
    found = [s for s in spans.get_finished_spans() if s.name == name]
    assert len(found) == 1, [s.name for s in spans.get_finished_spans()]
    return found[0]


@pytest.fixture
def detach_errors(caplog):
    """Records of the OTel API's "Failed to detach context" error, to assert there are none."""
    caplog.set_level(logging.ERROR, logger="opentelemetry.context")
    yield lambda: [r for r in caplog.records if "Failed to detach context" in r.getMessage()]


@llm_call(model="stream-model")
def stream_words(words: list[str]):
    yield from words


@tool
def child_tool(x: int) -> int:
    return x


def test_exhausted_stream_joins_text_and_times_first_chunk(spans):
    assert list(stream_words(["Hel", "lo", "!"])) == ["Hel", "lo", "!"]
    span = only(spans, "chat stream-model")
    assert span.attributes[A.STREAM_CHUNKS] == 3
    assert span.attributes[A.STREAM_FIRST_CHUNK_MS] >= 0
    assert A.STREAM_CLOSED_EARLY not in span.attributes
    output = json.loads(span.attributes[A.GEN_AI_OUTPUT_MESSAGES])
    assert output[0]["parts"][0]["content"] == "Hello!"


def test_stream_span_covers_the_whole_stream(spans):
    @llm_call(model="m")
    def slow():
        yield "a"
        child_tool(1)  # runs inside the stream: nests under its span
        yield "b"

    with tracer.start_as_current_span("consumer") as consumer:
        for _ in slow():
            assert trace.get_current_span() is consumer  # never the stream's span between chunks
    stream = only(spans, "chat m")
    child = only(spans, "execute_tool child_tool")
    assert child.parent.span_id == stream.context.span_id
    assert stream.parent.span_id == consumer.get_span_context().span_id
    assert stream.start_time <= child.start_time and child.end_time <= stream.end_time


def test_break_ends_the_span_without_detach_errors(spans, detach_errors):
    with tracer.start_as_current_span("consumer") as consumer:
        for word in stream_words(["a", "b", "c", "d"]):
            if word == "b":
                break
        assert trace.get_current_span() is consumer
    gc.collect()
    span = only(spans, "chat stream-model")
    assert span.attributes[A.STREAM_CHUNKS] == 2
    assert span.attributes[A.STREAM_CLOSED_EARLY] is True
    assert json.loads(span.attributes[A.GEN_AI_OUTPUT_MESSAGES])[0]["parts"][0]["content"] == "ab"
    assert detach_errors() == []


def test_generator_closed_in_another_context_is_fine(spans, detach_errors):
    with tracer.start_as_current_span("consumer"):
        stream = stream_words(["a", "b"])
        next(stream)
    # Finalised outside the block that started it, as a garbage collector would.
    del stream
    gc.collect()
    assert only(spans, "chat stream-model").attributes[A.STREAM_CLOSED_EARLY] is True
    assert detach_errors() == []
    assert not trace.get_current_span().is_recording()


def test_generator_cleanup_runs_and_return_value_passes_through(spans):
    cleaned = []

    @tool
    def numbers():
        try:
            yield 1
            yield 2
            return "done"
        finally:
            cleaned.append(True)

    gen = numbers()
    assert next(gen) == 1
    assert next(gen) == 2
    with pytest.raises(StopIteration) as stop:
        next(gen)
    assert stop.value.value == "done"
    assert cleaned == [True]
    span = only(spans, "execute_tool numbers")
    assert json.loads(span.attributes[A.GEN_AI_TOOL_CALL_RESULT]) == [1, 2]


def test_send_and_throw_reach_the_inner_generator(spans):
    @tool
    def echo():
        received = []
        while True:
            try:
                value = yield len(received)
            except KeyError:
                received.append("key-error")
                continue
            if value is None:
                return received
            received.append(value)

    gen = echo()
    assert next(gen) == 0
    assert gen.send("x") == 1
    assert gen.throw(KeyError("k")) == 2
    with pytest.raises(StopIteration):
        gen.send(None)
    assert only(spans, "execute_tool echo").status.status_code is StatusCode.UNSET


def test_error_inside_a_stream_is_recorded(spans):
    @llm_call(model="m")
    def failing():
        yield "partial"
        raise ConnectionError("reset")

    with pytest.raises(ConnectionError):
        list(failing())
    span = only(spans, "chat m")
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes[A.ERROR_TYPE] == "ConnectionError"
    assert span.attributes[A.STREAM_CHUNKS] == 1


def test_openai_stream_chunks_give_text_and_usage(spans):
    def chunk(text=None, finish=None, usage=None):
        choices = [SimpleNamespace(delta=SimpleNamespace(content=text), finish_reason=finish)] if text or finish else []
        return SimpleNamespace(model="gpt-4o-2024", id="c1", choices=choices, usage=usage)

    @llm_call(model="gpt-4o", provider="openai")
    def stream():
        yield chunk("The answer")
        yield chunk(" is 4")
        yield chunk(finish="stop")
        yield chunk(usage=SimpleNamespace(prompt_tokens=11, completion_tokens=4))

    assert len(list(stream())) == 4
    span = only(spans, "chat gpt-4o")
    assert span.attributes[A.GEN_AI_USAGE_INPUT_TOKENS] == 11
    assert span.attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 4
    assert span.attributes[A.GEN_AI_RESPONSE_MODEL] == "gpt-4o-2024"
    assert span.attributes[A.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
    assert json.loads(span.attributes[A.GEN_AI_OUTPUT_MESSAGES])[0]["parts"][0]["content"] == "The answer is 4"


def test_anthropic_stream_events_give_text_and_usage(spans):
    events = [
        {"type": "message_start", "message": {"model": "claude-x", "id": "m1", "usage": {"input_tokens": 30}}},
        {"type": "content_block_delta", "delta": {"type": "text_delta", "text": "Hi"}},
        {"type": "content_block_delta", "delta": {"type": "text_delta", "text": " there"}},
        {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {"output_tokens": 2}},
    ]

    @llm_call(provider="anthropic", model="claude-x")
    def stream():
        yield from events

    list(stream())
    span = only(spans, "chat claude-x")
    assert span.attributes[A.GEN_AI_USAGE_INPUT_TOKENS] == 30
    assert span.attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 2
    assert span.attributes[A.GEN_AI_RESPONSE_FINISH_REASONS] == ("end_turn",)
    assert json.loads(span.attributes[A.GEN_AI_OUTPUT_MESSAGES])[0]["parts"][0]["content"] == "Hi there"


def test_non_text_stream_records_the_list_of_chunks(spans):
    @tool
    def rows():
        yield {"row": 1}
        yield {"row": 2}

    list(rows())
    assert json.loads(only(spans, "execute_tool rows").attributes[A.GEN_AI_TOOL_CALL_RESULT]) == [
        {"row": 1},
        {"row": 2},
    ]


# --- async ---------------------------------------------------------------------------------


@llm_call(model="async-model")
async def async_stream(n: int):
    for i in range(n):
        await asyncio.sleep(0)
        yield f"t{i} "


def test_async_generator_exhausted(spans):
    async def consume():
        return [c async for c in async_stream(3)]

    assert asyncio.run(consume()) == ["t0 ", "t1 ", "t2 "]
    span = only(spans, "chat async-model")
    assert span.attributes[A.STREAM_CHUNKS] == 3
    assert json.loads(span.attributes[A.GEN_AI_OUTPUT_MESSAGES])[0]["parts"][0]["content"] == "t0 t1 t2 "


def test_async_generator_break_and_aclose(spans, detach_errors):
    async def consume():
        with tracer.start_as_current_span("consumer") as consumer:
            stream = async_stream(10)
            async for chunk in stream:
                if chunk == "t1 ":
                    break
            await stream.aclose()
            assert trace.get_current_span() is consumer

    asyncio.run(consume())
    span = only(spans, "chat async-model")
    assert span.attributes[A.STREAM_CLOSED_EARLY] is True
    assert span.attributes[A.STREAM_CHUNKS] == 2
    assert detach_errors() == []


def test_async_generator_abandoned_is_finalised_by_the_loop(spans, detach_errors):
    async def consume():
        async for chunk in async_stream(10):
            if chunk == "t0 ":
                break
        # No aclose(): the event loop's async-generator finaliser closes it, and asyncio.run
        # cancels that finaliser task at shutdown, which throws CancelledError into the stream.

    asyncio.run(consume())
    gc.collect()
    span = only(spans, "chat async-model")
    assert span.end_time is not None
    assert span.attributes[A.STREAM_CLOSED_EARLY] is True
    assert span.attributes[A.STREAM_CHUNKS] == 1
    assert detach_errors() == []


def test_nested_async_tasks_inherit_the_current_span(spans):
    @tool
    async def lookup(country: str) -> str:
        await asyncio.sleep(0.001)
        return country.upper()

    @agent
    async def planner() -> list[str]:
        return list(await asyncio.gather(*(asyncio.create_task(lookup(c)) for c in ("fr", "de", "it"))))

    assert asyncio.run(planner()) == ["FR", "DE", "IT"]
    root = only(spans, "invoke_agent planner")
    children = [s for s in spans.get_finished_spans() if s.name == "execute_tool lookup"]
    assert len(children) == 3
    assert {c.parent.span_id for c in children} == {root.context.span_id}


# --- threads -------------------------------------------------------------------------------


def _thread_pool_children(spans, run_in_pool):
    @agent
    def fan_out() -> list[int]:
        return run_in_pool(child_tool, [1, 2, 3])

    assert fan_out() == [1, 2, 3]
    root = only(spans, "invoke_agent fan_out")
    children = [s for s in spans.get_finished_spans() if s.name == "execute_tool child_tool"]
    return root, children


def test_context_thread_pool_keeps_the_parent(spans):
    def run(fn, items):
        with ContextThreadPoolExecutor(max_workers=3) as pool:
            return [f.result() for f in [pool.submit(fn, i) for i in items]]

    root, children = _thread_pool_children(spans, run)
    assert len(children) == 3
    assert {c.parent.span_id for c in children} == {root.context.span_id}


def test_submit_with_context_and_with_current_context_keep_the_parent(spans):
    def run(fn, items):
        with ThreadPoolExecutor(max_workers=2) as pool:
            first = submit_with_context(pool, fn, items[0]).result()
            rest = list(pool.map(with_current_context(fn), items[1:]))
        return [first, *rest]

    root, children = _thread_pool_children(spans, run)
    assert len(children) == 3
    assert {c.parent.span_id for c in children} == {root.context.span_id}


def test_plain_thread_pool_loses_the_parent_which_is_why_the_helpers_exist(spans):
    def run(fn, items):
        with ThreadPoolExecutor(max_workers=2) as pool:
            return list(pool.map(fn, items))

    root, children = _thread_pool_children(spans, run)
    assert all(c.parent is None for c in children)
