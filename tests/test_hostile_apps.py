"""What an application's own code does to its decorated functions: whatever it passes, returns, raises or does
inside them, each call behaves as it does undecorated, and every span it made reaches the Parquet store whole.

Spans are made by the real SDK (the session's provider), written by the real ParquetSpanExporter in one batch (one
bad span must not cost the others) and counted back with DuckDB: spans in == rows out.
"""

from __future__ import annotations

import array
import asyncio
import collections
import contextvars
import dataclasses
import functools
import inspect
import json
import math
import subprocess
import sys
import textwrap
import threading
import tracemalloc
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pydantic
import pytest
from opentelemetry import trace
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

from agenteval_exporters import ParquetSpanExporter
from agenteval_instrumentation import (
    agent,
    configure_capture,
    llm_call,
    retriever,
    set_llm_response,
    set_retrieved_documents,
    tool,
    use_tool_call_id,
)
from agenteval_instrumentation import attributes as A


def stored(tmp_path: Path, spans, refused: int = 0) -> list[dict]:
    """The finished spans (of the test, or of ``spans``, an in-memory exporter), exported in one batch to a Parquet
    store and read back; asserts none was lost but the ``refused`` ones (logged and counted by the exporter)."""
    finished = spans.get_finished_spans()
    exporter = ParquetSpanExporter(tmp_path / "parquet")
    assert exporter.export(finished) is SpanExportResult.SUCCESS
    exporter.shutdown()
    glob = str(tmp_path / "parquet" / "spans" / "**" / "*.parquet")
    rows = (
        duckdb.sql(
            "SELECT name, span_id, operation, tool_name, finish_reason, status_code, error_type, attributes, resource, "
            "service_name, kind, scope_name, "
            "json_valid(attributes) AND (events IS NULL OR json_valid(events)) AS valid "
            f"FROM read_parquet('{glob}', union_by_name=true, hive_partitioning=false)"
        )
        .to_arrow_table()
        .to_pylist()
    )
    assert len(rows) == len(finished) - refused and exporter.spans_refused == refused
    assert all(row["valid"] for row in rows)
    return rows


class RaisingRepr:
    def __repr__(self) -> str:
        raise RuntimeError("no repr")

    __str__ = __repr__


class HugeRepr:
    def __repr__(self) -> str:
        return "r" * 5_000_000


class SelfRepr:
    def __repr__(self) -> str:
        return repr(self)  # RecursionError


class AttrDict(dict):
    """A dict whose items read as attributes; a missing one raises KeyError, not AttributeError (a common idiom)."""

    __getattr__ = dict.__getitem__


@dataclasses.dataclass
class Holder:
    value: object


class Reply(pydantic.BaseModel):
    text: str
    score: float


def hostile_values() -> dict[str, object]:
    cyclic_list: list[object] = []
    cyclic_list.append(cyclic_list)
    cyclic_dict: dict[str, object] = {}
    cyclic_dict["self"] = cyclic_dict
    deep: list[object] = []
    for _ in range(3000):
        deep = [deep]
    return {
        "repr raises": RaisingRepr(),
        "huge repr": HugeRepr(),
        "recursive repr": SelfRepr(),
        "bytes": b"\xff\xfe\x00 not utf-8",
        "lone surrogates": "a\ud800b\udfff",
        "nan": math.nan,
        "infinity": -math.inf,
        "huge int": 10**400,
        "past 64 bits": -(2**70),
        "dataclass holding a bad repr": Holder(RaisingRepr()),
        "pydantic with a surrogate": Reply(text="\udc80", score=math.nan),
        "cyclic list": cyclic_list,
        "cyclic dict": cyclic_dict,
        "3000 levels deep": deep,
        "10 MB string": "s" * 10_000_000,
        "non-str keys": {1: "a", (1, 2): "b", None: "c", RaisingRepr(): "d", b"\xff": "e", math.nan: "f"},
        "set of mixed types": {1, "a", None},
        "AttrDict": AttrDict(model="m", content="hi"),
        "numpy array": np.arange(10),
        "numpy nan": np.float64("nan"),
        "numpy object array": np.array([RaisingRepr(), "\ud800"], dtype=object),
        "pandas frame": pd.DataFrame({"a": [1, 2], "b": ["x", None]}),
        "pandas NA": pd.NA,
        "complex": 1 + 2j,
        "generator": (i for i in range(3)),
    }


@pytest.mark.parametrize("decorator", [tool, llm_call, agent, retriever], ids=lambda d: d.__name__)
def test_whatever_an_app_passes_or_returns_comes_back_as_it_was_and_every_span_is_stored(spans, tmp_path, decorator):
    @decorator
    def echo(value):
        return value

    @decorator
    async def echo_async(value):
        return value

    values = hostile_values()
    for value in values.values():
        assert echo(value) is value
        assert asyncio.run(echo_async(value)) is value
    assert len(stored(tmp_path, spans)) == 2 * len(values)


class MessageRaises(Exception):
    def __str__(self) -> str:
        raise RuntimeError("no message")


class HugeMessage(Exception):
    def __str__(self) -> str:
        return "m" * 10_000_000


def test_the_exception_an_app_raises_is_the_very_one_its_caller_gets_and_its_span_is_stored(spans, tmp_path):
    raised = [MessageRaises(), HugeMessage(), ValueError("\ud800"), KeyError(10**400), ValueError(RaisingRepr())]

    @tool
    def fails(exc):
        raise exc

    for exc in raised:
        with pytest.raises(type(exc)) as caught:
            fails(exc)
        assert caught.value is exc
        assert caught.traceback[-1].name == "fails"  # the frame that raised is still the last one
    rows = stored(tmp_path, spans)
    assert [row["status_code"] for row in rows] == ["ERROR"] * len(raised)


def cleanup_fails():
    try:
        yield 1
        yield 2
    finally:
        raise ValueError("cleanup failed")


async def async_cleanup_fails():
    try:
        yield 1
        yield 2
    finally:
        raise ValueError("cleanup failed")


@pytest.mark.parametrize("decorator", [tool, llm_call], ids=lambda d: d.__name__)
def test_closing_a_stream_whose_cleanup_raises_raises_as_it_does_undecorated(spans, tmp_path, decorator):
    # Undecorated, close() raises what the generator's finally raised; the decorator used to swallow it.
    for generator_function in (cleanup_fails, decorator(cleanup_fails)):
        stream = generator_function()
        assert next(stream) == 1
        with pytest.raises(ValueError, match="cleanup failed"):
            stream.close()

    async def consume(generator_function):
        stream = generator_function()
        assert await stream.__anext__() == 1
        with pytest.raises(ValueError, match="cleanup failed"):
            await stream.aclose()

    asyncio.run(consume(async_cleanup_fails))
    asyncio.run(consume(decorator(async_cleanup_fails)))
    rows = stored(tmp_path, spans)
    assert [(row["status_code"], row["error_type"]) for row in rows] == [("ERROR", "ValueError")] * 2
    assert all(json.loads(row["attributes"])[A.STREAM_CLOSED_EARLY] for row in rows)


def ignores_exit():
    try:
        yield 1
    except GeneratorExit:
        pass
    yield 2  # after close(): Python raises RuntimeError in the caller of close()


def test_a_stream_that_goes_on_yielding_when_closed_raises_as_it_does_undecorated(spans, tmp_path):
    for generator_function in (ignores_exit, tool(ignores_exit)):
        stream = generator_function()
        next(stream)
        with pytest.raises(RuntimeError, match="ignored GeneratorExit"):
            stream.close()
    (row,) = stored(tmp_path, spans)
    assert row["error_type"] == "RuntimeError"


def test_a_model_call_returning_an_object_whose_missing_attributes_raise_key_error_returns_it(spans, tmp_path):
    # The check for an SDK stream looked up attributes such a dict lacks; its KeyError replaced the reply.
    reply = AttrDict(model="m", choices=[AttrDict(message=AttrDict(content="hi"), finish_reason="stop")])

    @llm_call
    def call_model():
        return reply

    @llm_call
    async def call_model_async():
        return reply

    assert call_model() is reply
    assert asyncio.run(call_model_async()) is reply
    assert [row["finish_reason"] for row in stored(tmp_path, spans)] == ["stop", "stop"]


def test_a_finish_reason_the_app_sets_as_a_number_costs_no_span_of_its_batch(spans, tmp_path):
    # A scalar number where a list of reasons was expected failed the whole batch: every span of it was lost.
    @llm_call
    def call_model(reasons):
        trace.get_current_span().set_attribute(A.GEN_AI_RESPONSE_FINISH_REASONS, reasons)
        return "ok"

    for reasons in (3, 2.5, True, ["stop"], ("length",), "stop", ()):
        call_model(reasons)
    assert sorted(str(row["finish_reason"]) for row in stored(tmp_path, spans)) == sorted(
        ["3", "2.5", "True", "stop", "length", "stop", "None"]
    )


class BrokenSignature:
    """A callable whose ``__signature__`` raises other than TypeError or ValueError."""

    @property
    def __signature__(self):
        raise RuntimeError("signature unavailable")

    def __call__(self, x):
        return x


def test_a_callable_whose_signature_raises_is_still_called(spans, tmp_path):
    for decorator in (tool, llm_call, agent, retriever):
        assert decorator(BrokenSignature())(5) == 5
    assert len(stored(tmp_path, spans)) == 4


class UnprintableId:
    def __str__(self) -> str:
        raise RuntimeError("no text")


def test_a_tool_span_whose_call_id_cannot_be_read_still_says_it_is_that_tool(spans, tmp_path):
    @tool
    def lookup(call_id, key):
        return key

    assert lookup(UnprintableId(), "k") == "k"
    (row,) = stored(tmp_path, spans)
    assert (row["operation"], row["tool_name"]) == ("execute_tool", "lookup")


def peak_memory(call) -> int:
    """The most memory Python allocated at once during ``call()``, in bytes."""
    tracemalloc.start()
    try:
        call()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_a_large_numpy_array_is_cut_before_it_is_converted(spans, tmp_path):
    # tolist() of the whole array made a 2000x2000 matrix cost a second a call (an image batch twenty) and its
    # Python lists ~120 MB; a view of one number broadcast to that shape holds no memory of its own.
    matrix = np.broadcast_to(np.float64(0.5), (2000, 2000))

    @retriever
    def nearest(embeddings):
        return ["doc-1"]

    assert peak_memory(lambda: nearest(matrix)) < 20 * 2**20
    (row,) = stored(tmp_path, spans)
    recorded = json.loads(json.loads(row["attributes"])[A.INPUT])["embeddings"]
    assert recorded[-1] == "…1975 more items" and recorded[0][-1] == "…1975 more items"
    assert recorded[0][0] == 0.5


class Counter:
    def __init__(self) -> None:
        self.calls = 0

    def __call__(self, x):
        self.calls += 1
        return x


class Service:
    @tool
    def method(self, x: int) -> int:
        return x

    @tool
    @classmethod
    def of_class(cls, x: int) -> tuple[type, int]:
        return cls, x

    @staticmethod
    @tool
    def static(x: int) -> int:
        return x


@tool
def depth(n: int) -> int:
    return 0 if n == 0 else 1 + depth(n - 1)


@tool
@tool
def wrapped_twice(x: int) -> int:
    """Twice."""
    return x


REQUEST = contextvars.ContextVar("request", default="none")


@tool
def sets_a_context_variable(value: str) -> None:
    REQUEST.set(value)


@tool
async def waits_forever() -> None:
    await asyncio.Event().wait()


def test_kinds_of_callables_recursion_threads_cancellation_and_context_behave_as_undecorated(spans, tmp_path):
    service = Service()
    counter = Counter()
    assert service.method(1) == 1 and Service.of_class(2) == (Service, 2) and service.static(3) == 3
    assert tool(functools.partial(lambda a, b: a + b, 1))(2) == 3
    assert tool(counter)(4) == 4 and counter.calls == 1
    assert depth(30) == 30  # 31 spans, each under the one before
    assert wrapped_twice(5) == 5 and wrapped_twice.__doc__ == "Twice."
    assert inspect.signature(wrapped_twice) == inspect.signature(wrapped_twice.__wrapped__.__wrapped__)
    sets_a_context_variable("r-1")
    assert REQUEST.get() == "r-1"  # as undecorated: a sync call's context changes stay the caller's

    threads = [threading.Thread(target=lambda: [Service.static(i) for i in range(50)]) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()

    async def cancel_them() -> list[object]:
        tasks = [asyncio.ensure_future(waits_forever()) for _ in range(5)]
        await asyncio.sleep(0)
        for task in tasks:
            task.cancel()
        return await asyncio.gather(*tasks, return_exceptions=True)

    assert all(isinstance(r, asyncio.CancelledError) for r in asyncio.run(cancel_them()))
    rows = stored(tmp_path, spans)
    assert len(rows) == 3 + 1 + 1 + 31 + 2 + 1 + 200 + 5
    cancelled = [row for row in rows if row["name"] == "execute_tool waits_forever"]
    assert {row["error_type"] for row in cancelled} == {"asyncio.exceptions.CancelledError"}


FORKS_IN_A_SPAN = """
import os, sys
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from agenteval_exporters import ParquetSpanExporter
from agenteval_instrumentation import agent, tool

provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(ParquetSpanExporter(sys.argv[1])))
trace.set_tracer_provider(provider)

@tool
def step(n):
    return n

@agent
def forks():
    step(1)
    pid = os.fork()
    if pid == 0:
        step(2)
        return "child"
    os.waitpid(pid, 0)
    step(3)
    return "parent"

who = forks()
provider.shutdown()  # as at exit: the child's last spans too
if who == "child":
    os._exit(0)
"""


def test_a_fork_in_the_middle_of_a_span_loses_no_span_of_either_process(tmp_path):
    store = tmp_path / "forked"
    script = textwrap.dedent(FORKS_IN_A_SPAN)
    done = subprocess.run([sys.executable, "-c", script, str(store)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    glob = str(store / "spans" / "**" / "*.parquet")
    rows = duckdb.sql(
        f"SELECT name, count(*) AS n FROM read_parquet('{glob}', union_by_name=true) GROUP BY name ORDER BY name"
    ).fetchall()
    # Steps 1 and 3 (parent), 2 (child); the agent's span ends in both processes, as the child holds a copy of it.
    assert rows == [("execute_tool step", 3), ("invoke_agent forks", 2)]


@pytest.mark.parametrize(
    "made",
    [
        lambda: {f"item {i}" for i in range(1_000_000)},
        lambda: collections.deque(range(1_000_000)),
        lambda: array.array("d", range(1_000_000)),
        lambda: dict.fromkeys(range(1_000_000)).keys(),
        lambda: {i: i for i in range(1_000_000)}.values(),
        lambda: {i: str(i) for i in range(1_000_000)}.items(),
        lambda: collections.UserList(range(1_000_000)),
    ],
    ids=["set", "deque", "array", "dict.keys", "dict.values", "dict.items", "UserList"],
)
def test_a_long_set_deque_array_or_dict_view_is_cut_before_it_is_converted(spans, tmp_path, made):
    # A set was sorted whole (a list of a million items) to keep a hundred; a deque, an array, a dict's keys, values
    # or items (``tool(docs.values())``) or a UserList was recorded by its repr, made of the whole: 0.4 to 2.3 s a
    # call for millions of items, memory of their size, and text where a list was meant.
    items = made()

    @tool
    def count(values):
        return len(values)

    assert peak_memory(lambda: count(items)) < 2 * 2**20
    (row,) = stored(tmp_path, spans)
    recorded = json.loads(json.loads(row["attributes"])[A.GEN_AI_TOOL_CALL_ARGUMENTS])["values"]
    assert len(recorded) == 101 and recorded[-1] == "…999900 more items"


@pytest.mark.parametrize("service", [42, 1.5, True, ("a", "b")], ids=repr)
def test_a_service_name_that_is_not_text_costs_no_span(tmp_path, service):
    # Every span of such a provider failed its batch: the service_name column took the value as it was.
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource({"service.name": service}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("app")
    with tracer.start_as_current_span("request"):
        tracer.start_span("step").end()
    rows = stored(tmp_path, memory)
    assert len(rows) == 2 and {row["service_name"] for row in rows} == {None}
    kept = list(service) if isinstance(service, tuple) else service  # the resource's JSON keeps the value
    assert [json.loads(row["resource"])["service.name"] for row in rows] == [kept, kept]


def test_names_kinds_and_times_of_types_the_api_does_not_check_cost_no_other_span_of_their_batch(tmp_path):
    # The OpenTelemetry API takes them without a word; each failed the whole batch of spans it was exported in.
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("app")
    tracer.start_span(123).end()  # type: ignore[arg-type]
    tracer.start_span(b"bytes \xff").end()  # type: ignore[arg-type]
    renamed = tracer.start_span("renamed")
    renamed.update_name(4.5)  # type: ignore[arg-type]
    renamed.end()
    provider.get_tracer(7).start_span("of a tracer named 7").end()  # type: ignore[arg-type]
    tracer.start_span("no kind", kind=None).end()  # type: ignore[arg-type]
    tracer.start_span("starts after 2262", start_time=2**70).end(end_time=2**70 + 1)
    tracer.start_span("plain").end()
    # The span whose start no timestamp can hold is left out alone, logged and counted (spans_refused).
    rows = stored(tmp_path, memory, refused=1)
    assert sorted(row["name"] for row in rows) == sorted(
        ["123", "b'bytes \\xff'", "4.5", "of a tracer named 7", "no kind", "plain"]
    )
    assert {row["kind"] for row in rows if row["name"] == "no kind"} == {"INTERNAL"}
    assert {row["scope_name"] for row in rows if row["name"] == "of a tracer named 7"} == {"7"}


def helper_values() -> dict[str, object]:
    """What an application may hand ``set_llm_response``, ``set_retrieved_documents`` or ``use_tool_call_id`` where
    text, a count or a list was wanted: everything :func:`hostile_values` holds and more."""
    return {
        **hostile_values(),
        "a number": 5,
        "None": None,
        "empty bytes": b"",
        "a generator of text": (r for r in ("stop", "length")),
        "a dict": {"reason": "stop"},
        "a list of numbers and None": [1, None, 2.5],
        "a list holding a bad repr": ["stop", RaisingRepr()],
        "a bool": False,
        "a float nan": math.nan,
    }


def test_the_helpers_never_raise_into_the_app_and_a_bad_value_costs_that_value_only(spans, tmp_path):
    # set_llm_response(finish_reasons=5) raised TypeError ('int' object is not iterable) into the application, a
    # value whose str raises raised its error, and set_retrieved_documents(5) raised too (no len()).
    helpers = {
        "model": lambda v: set_llm_response(model=v),
        "response_id": lambda v: set_llm_response(response_id=v),
        "input_tokens": lambda v: set_llm_response(input_tokens=v),
        "output_tokens": lambda v: set_llm_response(output_tokens=v),
        "finish_reasons": lambda v: set_llm_response(finish_reasons=v),
        "document_ids": lambda v: set_retrieved_documents(v),
        "scores": lambda v: set_retrieved_documents(["a", "b"], v),
    }

    @llm_call
    def call_model(helper, value):
        helpers[helper](value)
        return "reply"

    @retriever
    def search(helper, value):
        helpers[helper](value)
        return []

    @tool
    def lookup():
        return "found"

    values = helper_values()
    for value in values.values():
        for helper in helpers:
            decorated = search if helper in ("document_ids", "scores") else call_model
            assert decorated(helper, value) in ("reply", [])
        with use_tool_call_id(value):
            assert lookup() == "found"
    rows = stored(tmp_path, spans)
    assert len(rows) == len(values) * (len(helpers) + 1)


def recorded(helper, value, spans, tmp_path) -> dict:
    """The attributes one call of ``helper(value)`` inside an ``@llm_call`` left on its stored span."""

    @llm_call
    def call_model():
        helper(value)
        return "reply"

    call_model()
    (row,) = stored(tmp_path, spans)
    return json.loads(row["attributes"])


@pytest.mark.parametrize(
    ("given", "kept"),
    [
        (5, ["5"]),
        (b"stop", ["stop"]),
        ((r for r in ("stop", "length")), ["stop", "length"]),
        ([1, None, 2.5], ["1", "2.5"]),
        (["stop", RaisingRepr()], ["stop"]),
        ({"reason": "stop"}, ["{'reason': 'stop'}"]),
    ],
    ids=["number", "bytes", "generator", "numbers and None", "a bad repr", "dict"],
)
def test_finish_reasons_of_the_wrong_kind_are_taken_as_text(spans, tmp_path, given, kept):
    attributes = recorded(lambda v: set_llm_response(finish_reasons=v), given, spans, tmp_path)
    assert attributes[A.GEN_AI_RESPONSE_FINISH_REASONS] == kept


def test_counts_that_are_not_whole_numbers_are_left_out_and_the_rest_kept(spans, tmp_path):
    attributes = recorded(
        lambda v: set_llm_response(model=v, input_tokens="12", output_tokens=7, response_id=RaisingRepr()),
        42,
        spans,
        tmp_path,
    )
    assert attributes[A.GEN_AI_RESPONSE_MODEL] == "42"
    assert attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 7
    assert A.GEN_AI_USAGE_INPUT_TOKENS not in attributes and A.GEN_AI_RESPONSE_ID not in attributes


def test_retrieved_ids_and_scores_of_the_wrong_kind_cost_themselves_only(spans, tmp_path):
    @retriever
    def search():
        set_retrieved_documents(["a", RaisingRepr(), 7, b"d"], [0.5, 1.0, "high", math.inf])
        return []

    search()
    (row,) = stored(tmp_path, spans)
    attributes = json.loads(row["attributes"])
    assert attributes[A.RETRIEVAL_DOCUMENT_IDS] == ["a", "7", "d"]
    assert json.loads(attributes[A.GEN_AI_RETRIEVAL_DOCUMENTS]) == [{"id": "a", "score": 0.5}, {"id": "7"}, {"id": "d"}]


def test_ids_and_model_names_are_cut_as_captured_text_is(spans, tmp_path):
    # A 10 MB tool call id, response id or model name was stored whole, in the span's attributes and its name.
    huge = "i" * 10_000_000
    limit = configure_capture().max_string
    marker = f"…[{len(huge) - limit} more chars]"

    @tool
    def lookup(call_id):
        return "found"

    @llm_call
    def call_model():
        set_llm_response(model=huge, response_id=huge, finish_reasons=[huge])
        return "reply"

    @llm_call
    def call_named_model(model):
        return "reply"

    lookup(huge)
    with use_tool_call_id(huge):
        lookup("c1")
    call_model()
    call_named_model(huge)
    rows = stored(tmp_path, spans)
    cut = "i" * limit + marker
    attributes = [json.loads(row["attributes"]) for row in rows]
    assert [a.get(A.GEN_AI_TOOL_CALL_ID) for a in attributes[:2]] == [cut, cut]
    assert attributes[2][A.GEN_AI_RESPONSE_MODEL] == cut and attributes[2][A.GEN_AI_RESPONSE_ID] == cut
    assert attributes[2][A.GEN_AI_RESPONSE_FINISH_REASONS] == [cut]
    assert attributes[3][A.GEN_AI_REQUEST_MODEL] == cut
    assert rows[3]["name"] == f"chat {cut}"
