"""The four decorators: span names, kinds, attributes, nesting, methods, exceptions."""

from __future__ import annotations

import asyncio
import functools
import inspect
import json
import time
import traceback
from collections.abc import AsyncIterator, Callable
from types import SimpleNamespace
from typing import Any

import pytest
from opentelemetry import trace
from opentelemetry.trace import SpanKind, StatusCode

from agenteval_instrumentation import (
    agent,
    llm_call,
    retriever,
    set_llm_response,
    set_retrieved_documents,
    tool,
    use_tool_call_id,
)
from agenteval_instrumentation import (
    attributes as A,
)


def by_name(spans, name):
    found = [s for s in spans.get_finished_spans() if s.name == name]
    assert found, f"no span named {name!r} in {[s.name for s in spans.get_finished_spans()]}"
    return found[0]


@tool
def add(a: int, b: int) -> int:
    """Add two integers.

    More text that is not the description.
    """
    return a + b


@tool(name="convert_currency", description="Convert money")
def convert(amount: float, src: str, dst: str) -> float:
    return amount * 2


@llm_call(model="gpt-4o-mini", provider="openai")
def chat_openai(messages: list[dict]) -> dict:
    return {
        "id": "chatcmpl-1",
        "model": "gpt-4o-mini-2024-07-18",
        "usage": {"prompt_tokens": 12, "completion_tokens": 3},
        "choices": [{"finish_reason": "stop", "message": {"role": "assistant", "content": "4"}}],
    }


@agent(name="calc-agent")
def calc_agent(question: str) -> str:
    chat_openai([{"role": "user", "content": question}])
    return f"The answer is {add(2, 2)}"


def test_span_names_kinds_and_operations(spans):
    assert calc_agent("2+2?") == "The answer is 4"
    root = by_name(spans, "invoke_agent calc-agent")
    chat = by_name(spans, "chat gpt-4o-mini")
    tool_span = by_name(spans, "execute_tool add")
    assert (root.kind, chat.kind, tool_span.kind) == (SpanKind.INTERNAL, SpanKind.CLIENT, SpanKind.INTERNAL)
    assert root.attributes[A.GEN_AI_OPERATION_NAME] == "invoke_agent"
    assert root.attributes[A.GEN_AI_AGENT_NAME] == "calc-agent"
    assert chat.attributes[A.GEN_AI_OPERATION_NAME] == "chat"
    assert chat.attributes[A.GEN_AI_PROVIDER_NAME] == "openai"
    assert chat.attributes[A.GEN_AI_REQUEST_MODEL] == "gpt-4o-mini"
    assert tool_span.attributes[A.GEN_AI_OPERATION_NAME] == "execute_tool"
    assert tool_span.attributes[A.GEN_AI_TOOL_NAME] == "add"
    assert tool_span.attributes[A.GEN_AI_TOOL_DESCRIPTION] == "Add two integers."
    assert "gen_ai.system" not in chat.attributes


def test_children_nest_under_the_agent_span(spans):
    calc_agent("2+2?")
    root = by_name(spans, "invoke_agent calc-agent")
    for name in ("chat gpt-4o-mini", "execute_tool add"):
        child = by_name(spans, name)
        assert child.parent.span_id == root.context.span_id
        assert child.context.trace_id == root.context.trace_id
    assert root.parent is None


def test_tool_records_arguments_and_result_as_json(spans):
    assert convert(10.0, "EUR", dst="USD") == 20.0
    span = by_name(spans, "execute_tool convert_currency")
    assert json.loads(span.attributes[A.GEN_AI_TOOL_CALL_ARGUMENTS]) == {"amount": 10.0, "src": "EUR", "dst": "USD"}
    assert json.loads(span.attributes[A.GEN_AI_TOOL_CALL_RESULT]) == 20.0
    assert span.attributes[A.GEN_AI_TOOL_DESCRIPTION] == "Convert money"


def test_tool_call_id_from_parameter_or_context(spans):
    @tool
    def lookup(country: str, tool_call_id: str | None = None) -> str:
        return "Paris"

    lookup("France", tool_call_id="call_abc")
    with use_tool_call_id("call_xyz"):
        lookup("France")
    lookup("France")
    ids = [s.attributes.get(A.GEN_AI_TOOL_CALL_ID) for s in spans.get_finished_spans()]
    assert ids == ["call_abc", "call_xyz", None]


def test_llm_call_reads_openai_dict_response(spans):
    chat_openai([{"role": "user", "content": "2+2?"}])
    span = by_name(spans, "chat gpt-4o-mini")
    assert span.attributes[A.GEN_AI_RESPONSE_MODEL] == "gpt-4o-mini-2024-07-18"
    assert span.attributes[A.GEN_AI_RESPONSE_ID] == "chatcmpl-1"
    assert span.attributes[A.GEN_AI_USAGE_INPUT_TOKENS] == 12
    assert span.attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 3
    assert span.attributes[A.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)
    assert json.loads(span.attributes[A.GEN_AI_INPUT_MESSAGES]) == [
        {"role": "user", "parts": [{"type": "text", "content": "2+2?"}]}
    ]
    output = json.loads(span.attributes[A.GEN_AI_OUTPUT_MESSAGES])
    assert output == [{"role": "assistant", "parts": [{"type": "text", "content": "4"}], "finish_reason": "stop"}]


def test_llm_call_reads_openai_sdk_shaped_object(spans):
    @llm_call(provider="openai")
    def chat(messages, model="gpt-4.1"):
        message = SimpleNamespace(content="Paris", role="assistant")
        return SimpleNamespace(
            id="r1",
            model="gpt-4.1-2025",
            usage=SimpleNamespace(prompt_tokens=7, completion_tokens=1, total_tokens=8),
            choices=[SimpleNamespace(finish_reason="length", message=message)],
        )

    chat([{"role": "user", "content": "Capital of France?"}], model="gpt-4.1")
    span = by_name(spans, "chat gpt-4.1")
    assert span.attributes[A.GEN_AI_REQUEST_MODEL] == "gpt-4.1"
    assert span.attributes[A.GEN_AI_USAGE_INPUT_TOKENS] == 7
    assert span.attributes[A.GEN_AI_RESPONSE_FINISH_REASONS] == ("length",)


def test_llm_call_reads_anthropic_message(spans):
    @llm_call(provider="anthropic")
    def chat(prompt: str):
        return {
            "id": "msg_1",
            "model": "claude-sonnet-4",
            "stop_reason": "end_turn",
            "usage": {"input_tokens": 20, "output_tokens": 5},
            "content": [{"type": "text", "text": "Hello "}, {"type": "text", "text": "there"}],
        }

    chat("hi")
    # No model was known up front: the span is renamed after the model that answered.
    span = by_name(spans, "chat claude-sonnet-4")
    assert span.attributes[A.GEN_AI_USAGE_INPUT_TOKENS] == 20
    assert span.attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 5
    assert span.attributes[A.GEN_AI_RESPONSE_FINISH_REASONS] == ("end_turn",)
    assert json.loads(span.attributes[A.GEN_AI_OUTPUT_MESSAGES])[0]["parts"][0]["content"] == "Hello there"


def test_set_llm_response_from_inside_the_function(spans):
    @llm_call(model="local-llama")
    def chat(prompt: str) -> str:
        set_llm_response(input_tokens=9, output_tokens=4, finish_reasons="stop", model="llama-3")
        return "fine"

    assert chat("hi") == "fine"
    span = by_name(spans, "chat local-llama")
    assert span.attributes[A.GEN_AI_USAGE_INPUT_TOKENS] == 9
    assert span.attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 4
    assert span.attributes[A.GEN_AI_RESPONSE_MODEL] == "llama-3"
    assert span.attributes[A.GEN_AI_RESPONSE_FINISH_REASONS] == ("stop",)


def test_explicit_usage_wins_over_the_return_value(spans):
    @llm_call(model="m")
    def chat(prompt: str) -> dict:
        set_llm_response(input_tokens=100)
        return {"usage": {"input_tokens": 1, "output_tokens": 2}}

    chat("x")
    span = by_name(spans, "chat m")
    assert span.attributes[A.GEN_AI_USAGE_INPUT_TOKENS] == 100
    assert span.attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS] == 2


@pytest.mark.parametrize(
    ("returned", "expected"),
    [
        (["d1", "d2"], ["d1", "d2"]),
        ([{"id": "a", "text": "..."}, {"id": 7}], ["a", "7"]),
        ([SimpleNamespace(doc_id="x"), SimpleNamespace(metadata={"id": "y"})], ["x", "y"]),
        ({"documents": [{"document_id": "z"}]}, ["z"]),
        ([("p1", 0.9), ("p2", 0.5)], ["p1", "p2"]),
    ],
)
def test_retriever_records_document_ids(spans, returned, expected):
    @retriever(name="search_docs")
    def search(query: str):
        return returned

    search("refund window")
    span = by_name(spans, "retrieval search_docs")
    assert span.attributes[A.GEN_AI_OPERATION_NAME] == "retrieval"
    assert list(span.attributes[A.RETRIEVAL_DOCUMENT_IDS]) == expected


def test_retriever_ids_explicit_and_custom_key(spans):
    @retriever(id_key="slug")
    def by_slug(query: str):
        return [{"slug": "hr-leave"}]

    @retriever
    def manual(query: str):
        set_retrieved_documents(["policy-7"])
        return ["this is a passage, not an id"]

    by_slug("q")
    manual("q")
    assert list(by_name(spans, "retrieval by_slug").attributes[A.RETRIEVAL_DOCUMENT_IDS]) == ["hr-leave"]
    assert list(by_name(spans, "retrieval manual").attributes[A.RETRIEVAL_DOCUMENT_IDS]) == ["policy-7"]


class Calculator:
    factor = 3

    @tool
    def scale(self, x: int) -> int:
        return x * self.factor

    @tool
    @classmethod
    def describe(cls, verbose: bool = False) -> str:
        return cls.__name__

    @tool
    @staticmethod
    def negate(x: int) -> int:
        return -x


def test_methods_never_capture_self_or_cls(spans):
    calc = Calculator()
    assert calc.scale(2) == 6
    assert Calculator.describe(verbose=True) == "Calculator"
    assert calc.negate(5) == -5
    args = {s.name: json.loads(s.attributes[A.GEN_AI_TOOL_CALL_ARGUMENTS]) for s in spans.get_finished_spans()}
    assert args == {
        "execute_tool scale": {"x": 2},
        "execute_tool describe": {"verbose": True},
        "execute_tool negate": {"x": 5},
    }


def test_wrapped_functions_keep_name_signature_docstring_and_kind():
    @tool
    async def fetch(url: str, timeout: float = 1.0) -> str:
        """Fetch a page."""
        return url

    assert inspect.iscoroutinefunction(fetch)
    assert fetch.__name__ == "fetch"
    assert fetch.__doc__ == "Fetch a page."
    assert list(inspect.signature(fetch).parameters) == ["url", "timeout"]
    assert inspect.signature(fetch).parameters["timeout"].default == 1.0

    @llm_call
    def gen():
        yield "x"

    @llm_call
    async def agen():
        yield "x"

    assert inspect.isgeneratorfunction(gen)
    assert inspect.isasyncgenfunction(agen)


def test_callables_that_are_not_plain_functions_are_wrapped_as_the_kind_they_call(spans):
    # Decorating reads a plain function's kind off its code flags; anything else is asked of inspect.
    import asyncio
    import functools

    async def answer(prefix: str, question: str) -> str:
        return prefix + question

    class Asker:
        async def __call__(self, question: str) -> str:
            return "asked " + question

        async def ask(self, question: str) -> str:
            return "method " + question

    partial = tool(name="partial")(functools.partial(answer, "partial "))
    bound = tool(name="bound")(Asker().ask)
    obj = tool(name="object")(Asker())
    assert inspect.iscoroutinefunction(partial) and inspect.iscoroutinefunction(bound)
    assert inspect.iscoroutinefunction(obj)  # as inspect says of its __call__, not of the object itself

    async def calls():
        return [await partial("q"), await bound("q"), await obj("q")]

    assert asyncio.run(calls()) == ["partial q", "method q", "asked q"]
    assert {s.name for s in spans.get_finished_spans()} == {
        "execute_tool partial",
        "execute_tool bound",
        "execute_tool object",
    }


class QuotaError(Exception):
    pass


class Work:
    """Awaited work that notes, after each await, the span current in it and the time: the span of a call that
    covers its work is current there and ends after it."""

    def __init__(self) -> None:
        self.noted: list[tuple[int, int]] = []

    async def step(self, question: str) -> None:
        await asyncio.sleep(0)
        self.noted.append((trace.get_current_span().get_span_context().span_id, time.time_ns()))
        if question == "fail":
            raise QuotaError("insufficient_quota")


class AsyncCallable(Work):
    async def __call__(self, question: str) -> str:
        await self.step(question)
        return "answer to " + question


class AsyncStreamingCallable(Work):
    async def __call__(self, question: str) -> AsyncIterator[str]:
        for chunk in ("answer ", "to ", question):
            await self.step(question)
            yield chunk


async def answer_with(work: Work, question: str) -> str:
    await work.step(question)
    return "answer to " + question


def _itself(made: type[Work]) -> Callable[[], tuple[Callable[..., Any], Work]]:
    def make() -> tuple[Callable[..., Any], Work]:
        work = made()
        return work, work

    return make


def _partial_of(made: type[Work]) -> Callable[[], tuple[Callable[..., Any], Work]]:
    def make() -> tuple[Callable[..., Any], Work]:
        work = made()
        return functools.partial(work), work

    return make


def _partial_of_a_function() -> tuple[Callable[..., Any], Work]:
    work = Work()
    return functools.partial(answer_with, work), work


ASYNC_CALLABLES = {
    "object with async __call__": _itself(AsyncCallable),
    "object with async generator __call__": _itself(AsyncStreamingCallable),
    "partial of an async function": _partial_of_a_function,
    "partial of an object with async __call__": _partial_of(AsyncCallable),
    "partial of an object with async generator __call__": _partial_of(AsyncStreamingCallable),
}
"""Each makes a callable whose call runs async code, and the Work it notes in."""
OUTPUT_OF = {tool: A.GEN_AI_TOOL_CALL_RESULT, llm_call: A.GEN_AI_OUTPUT_MESSAGES, agent: A.GEN_AI_OUTPUT_MESSAGES}


async def _call(wrapped: Callable[..., Any], question: str) -> str:
    if inspect.isasyncgenfunction(wrapped):
        return "".join([chunk async for chunk in wrapped(question)])
    return await wrapped(question)


@pytest.mark.parametrize("decorator", OUTPUT_OF, ids=lambda d: d.__name__)
@pytest.mark.parametrize("made", ASYNC_CALLABLES)
def test_a_span_of_an_async_callable_object_or_partial_covers_its_awaited_work(spans, decorator, made):
    """A callable object whose __call__ is async was wrapped as a sync function: the wrapper handed back the
    coroutine (or async generator) and ended the span at once, before any of the work, without its result or
    its error."""
    target, work = ASYNC_CALLABLES[made]()
    wrapped = decorator(target)
    assert inspect.iscoroutinefunction(wrapped) or inspect.isasyncgenfunction(wrapped)

    assert asyncio.run(_call(wrapped, "q")) == "answer to q"
    (span,) = spans.get_finished_spans()
    assert work.noted and all(current == span.context.span_id for current, _ in work.noted)
    assert all(span.start_time <= at <= span.end_time for _, at in work.noted)
    assert "answer to q" in span.attributes[OUTPUT_OF[decorator]]
    assert span.status.status_code is not StatusCode.ERROR

    spans.clear()
    with pytest.raises(QuotaError):
        asyncio.run(_call(wrapped, "fail"))
    (failed,) = spans.get_finished_spans()
    assert failed.status.status_code is StatusCode.ERROR
    assert failed.attributes[A.ERROR_TYPE].endswith("QuotaError")
    assert [event.name for event in failed.events] == ["exception"]
    current, at = work.noted[-1]
    assert current == failed.context.span_id and at <= failed.end_time


def test_exception_is_recorded_and_reraised_unchanged(spans):
    raised = QuotaError("insufficient_quota")

    @llm_call(model="m")
    def chat(prompt: str):
        raise raised

    with pytest.raises(QuotaError) as info:
        chat("hi")
    assert info.value is raised
    frames = traceback.extract_tb(info.value.__traceback__)
    assert frames[-1].name == "chat" and frames[-1].line == "raise raised"
    span = by_name(spans, "chat m")
    assert span.status.status_code is StatusCode.ERROR
    assert span.attributes[A.ERROR_TYPE] == f"{__name__}.QuotaError"
    (event,) = span.events
    assert event.name == "exception"
    assert event.attributes["exception.message"] == "insufficient_quota"


def test_builtin_exception_error_type_and_parent_sees_its_own_error(spans):
    @tool
    def broken() -> None:
        raise ValueError("bad input")

    @agent
    def runner() -> str:
        try:
            broken()
        except ValueError:
            return "recovered"

    assert runner() == "recovered"
    assert by_name(spans, "execute_tool broken").attributes[A.ERROR_TYPE] == "ValueError"
    root = by_name(spans, "invoke_agent runner")
    assert root.status.status_code is StatusCode.UNSET
    assert A.ERROR_TYPE not in root.attributes


def test_current_span_is_restored_after_each_call(spans):
    tracer = trace.get_tracer("test")
    with tracer.start_as_current_span("outer") as outer:
        add(1, 1)
        assert trace.get_current_span() is outer
    assert not trace.get_current_span().is_recording()


def test_agent_reply_object_with_content(spans):
    @agent
    def assistant(question: str) -> dict:
        return {"content": "42", "tool_calls": []}

    assistant("meaning?")
    output = json.loads(by_name(spans, "invoke_agent assistant").attributes[A.GEN_AI_OUTPUT_MESSAGES])
    assert output == [{"role": "assistant", "parts": [{"type": "text", "content": "42"}], "finish_reason": "stop"}]


def test_bare_decorators_name_partials_and_callable_objects_after_what_they_call(spans):
    # A partial and a callable object have no __name__: the bare decorators raised AttributeError on every call.
    import functools

    def lookup(table: str, key: str) -> str:
        """Look a key up in a table.

        More text."""
        return f"{table}:{key}"

    class Searcher:
        """Search the index."""

        def __call__(self, query: str) -> list[str]:
            return [f"doc-{query}"]

    assert tool(functools.partial(lookup, "users"))(key="ada") == "users:ada"
    assert retriever(Searcher())(query="q") == ["doc-q"]
    assert agent(functools.partial(functools.partial(lookup, "a"), key="b"))() == "a:b"
    assert tool(name="named")(functools.partial(lookup, "t"))(key="k") == "t:k"
    assert {s.name for s in spans.get_finished_spans()} == {
        "execute_tool lookup",
        "retrieval Searcher",
        "invoke_agent lookup",
        "execute_tool named",
    }
    for name in ("execute_tool lookup", "execute_tool named"):
        # the function's own docstring, not functools.partial's ("partial(func, *args, **keywords) - ...")
        assert by_name(spans, name).attributes[A.GEN_AI_TOOL_DESCRIPTION] == "Look a key up in a table."
    assert json.loads(by_name(spans, "execute_tool lookup").attributes[A.GEN_AI_TOOL_CALL_ARGUMENTS]) == {
        "table": "users",
        "key": "ada",
    }


def test_keywords_named_like_a_positional_only_parameter_or_args_do_not_overwrite_it(spans):
    # def f(a, /, **kw) may be called f(1, a=2): a is 1 and kw is {"a": 2}. The bound arguments had "a": 2 only.
    @tool
    def search(query, /, *args, limit=10, **options):
        return query

    assert search("cats", "dogs", query="birds", args="extra", limit=3) == "cats"

    @tool
    def plain(query, limit=10):
        return query

    plain("cats", limit=3)
    recorded = json.loads(by_name(spans, "execute_tool search").attributes[A.GEN_AI_TOOL_CALL_ARGUMENTS])
    assert recorded == {"query": "cats", "args": ["dogs"], "limit": 3, "options": {"query": "birds", "args": "extra"}}
    assert json.loads(by_name(spans, "execute_tool plain").attributes[A.GEN_AI_TOOL_CALL_ARGUMENTS]) == {
        "query": "cats",
        "limit": 3,
    }


def rate(amount: float, currency: str) -> str:
    """Convert an amount to a currency."""
    return f"{amount} {currency}"


class Lookup:
    """Look keys up."""

    def __init__(self, table: str) -> None:
        self.table = table

    def __call__(self, key: str) -> str:
        return f"{self.table}:{key}"


class AsyncLookup(Lookup):
    async def __call__(self, key: str) -> str:  # type: ignore[override]
        return f"async {self.table}:{key}"


def test_module_level_decorated_functions_pickle_by_reference():
    import pickle

    for decorated in (add, convert, chat_openai, calc_agent):
        assert pickle.loads(pickle.dumps(decorated)) is decorated


def test_a_decorated_partial_or_callable_object_is_named_and_pickles_as_decorated_again(spans):
    # They were named "wrapper" (qualname "_sync_wrapper.<locals>.wrapper") and pickling one, as multiprocessing
    # does to send it to a worker, failed with "Can't pickle local object" where the undecorated one pickles.
    import pickle

    to_eur = tool(functools.partial(rate, 10))
    named = tool(name="convert_currency", capture=False)(functools.partial(rate, 20))
    lookup = retriever(name="users")(Lookup("users"))
    asked = agent(AsyncLookup("faq"))
    assert (to_eur.__name__, to_eur.__qualname__, to_eur.__module__) == ("rate", "rate", __name__)
    assert (lookup.__name__, lookup.__qualname__, lookup.__module__) == ("Lookup", "Lookup", __name__)
    assert to_eur.__doc__ == rate.__doc__ and lookup.__doc__ == Lookup.__doc__
    assert lookup.table == "users"  # the object's own attributes, as a decorated function's
    assert inspect.signature(to_eur) == inspect.signature(functools.partial(rate, 10))

    again = [pickle.loads(pickle.dumps(decorated)) for decorated in (to_eur, named, lookup, asked)]
    assert [d.__name__ for d in again] == ["rate", "rate", "Lookup", "AsyncLookup"]
    assert inspect.iscoroutinefunction(asked) and inspect.iscoroutinefunction(again[3])
    assert not inspect.iscoroutinefunction(again[0])
    assert again[0]("EUR") == "10 EUR" and again[1]("USD") == "20 USD" and again[2]("ada") == "users:ada"
    assert asyncio.run(again[3]("refund")) == "async faq:refund"
    # the same decorator with the same options: span names, kinds, and capture=False kept
    assert [s.name for s in spans.get_finished_spans()] == [
        "execute_tool rate",
        "execute_tool convert_currency",
        "retrieval users",
        "invoke_agent AsyncLookup",
    ]
    assert A.GEN_AI_TOOL_CALL_RESULT in by_name(spans, "execute_tool rate").attributes
    assert A.GEN_AI_TOOL_CALL_RESULT not in by_name(spans, "execute_tool convert_currency").attributes


def test_a_decorated_partial_or_callable_object_set_on_a_class_is_not_bound_as_a_method(spans):
    # Undecorated, neither binds to the instance it is read from (they are no descriptors); the function that wrapped
    # them did, so the instance came in as their first argument.
    class Service:
        to_eur = tool(functools.partial(rate, 10))
        lookup = tool(Lookup("users"))

    service = Service()
    assert service.to_eur("EUR") == "10 EUR" and service.lookup("ada") == "users:ada"


def test_a_decorated_partial_records_the_arguments_it_binds_with_the_call(spans):
    # Only the call's own arguments were recorded: tool(partial(rate, 10))("EUR") recorded {"currency": "EUR"}, not
    # the amount converted, and llm_call(partial(chat, model=...)) did not know its model.
    def chat(messages: list[dict], model: str, temperature: float = 0.0) -> dict:
        return {"content": "hi"}

    class Ledger:
        def book(self, account: str, amount: float, memo: str = "") -> str:
            return account

    tool(functools.partial(rate, 10))("EUR")
    tool(name="nested")(functools.partial(functools.partial(rate, currency="USD"), amount=5))(currency="GBP")
    tool(name="receiver")(functools.partial(Ledger.book, Ledger(), "cash"))(3.5, memo="tip")
    llm_call(functools.partial(chat, model="gpt-4o-mini", temperature=0.2))([{"role": "user", "content": "hello"}])

    def recorded(name):
        return json.loads(by_name(spans, name).attributes[A.GEN_AI_TOOL_CALL_ARGUMENTS])

    assert recorded("execute_tool rate") == {"amount": 10, "currency": "EUR"}
    assert recorded("execute_tool nested") == {"amount": 5, "currency": "GBP"}  # the call's keyword wins, as it does
    assert recorded("execute_tool receiver") == {"account": "cash", "amount": 3.5, "memo": "tip"}  # never self
    chat_span = by_name(spans, "chat gpt-4o-mini")  # the model the partial binds names the span
    assert json.loads(chat_span.attributes[A.GEN_AI_INPUT_MESSAGES])[0]["parts"][0]["content"] == "hello"


class Desk:
    """A class whose methods are decorated where they are used, as bound methods: ``tool(desk.answer)``."""

    def __init__(self, name: str) -> None:
        self.name = name

    def answer(self, question: str) -> str:
        return f"{self.name}: {question}"

    async def answer_later(self, question: str) -> str:
        return f"{self.name} later: {question}"

    @classmethod
    def kind(cls, question: str) -> str:
        return f"{cls.__name__}: {question}"

    @staticmethod
    def echo(question: str) -> str:
        return question

    @staticmethod
    async def echo_later(question: str) -> str:
        return f"later: {question}"

    @tool
    def looked_up(self, question: str) -> str:
        return f"{self.name} looked up {question}"

    @tool
    @classmethod
    async def counted(cls, question: str) -> str:
        return f"{cls.__name__} counted {question}"

    @staticmethod
    @tool
    def stamped(question: str) -> str:
        return f"stamped {question}"


class Stamp:
    @staticmethod
    def now(question: str) -> str:
        return f"now {question}"


Stamp.now = tool(Stamp.now)  # type: ignore[method-assign]  # decorated after its class, as a library's is


def _result(returned: Any) -> Any:
    return asyncio.run(returned) if inspect.iscoroutine(returned) else returned


def _decorated_bound_methods() -> list[Callable[..., Any]]:
    desk = Desk("ada")
    return [
        tool(desk.answer),
        tool(name="later")(desk.answer_later),
        tool(Desk.kind),
        tool(desk.kind),
        tool(Desk.echo),
        tool(desk.echo_later),
    ]


def test_a_decorated_bound_method_pickles_and_records_spans_when_unpickled(spans):
    # tool(desk.answer) failed with "Can't pickle <function Desk.answer ...>: it's not the same object as
    # test_decorators.Desk.answer" where desk.answer pickles: its function wrapper copied the method's name, which
    # finds the undecorated function. The same for a classmethod and a staticmethod's function read off the class.
    import pickle

    again = [pickle.loads(pickle.dumps(decorated)) for decorated in _decorated_bound_methods()]
    assert [_result(decorated("q")) for decorated in again] == [
        "ada: q",
        "ada later: q",
        "Desk: q",
        "Desk: q",
        "q",
        "later: q",
    ]
    assert [s.name for s in spans.get_finished_spans()] == [
        "execute_tool answer",
        "execute_tool later",
        "execute_tool kind",
        "execute_tool kind",
        "execute_tool echo",
        "execute_tool echo_later",
    ]
    assert inspect.iscoroutinefunction(again[1]) and not inspect.iscoroutinefunction(again[0])
    assert str(inspect.signature(again[0])) == "(question: 'str') -> 'str'"  # no self, as the bound method's
    # one set back on its class in its place is found there, so it pickles by reference (what it wraps is not)
    assert pickle.loads(pickle.dumps(Stamp.now)) is Stamp.now and Stamp().now("q") == "now q"


def test_a_decorated_bound_method_set_on_a_class_is_not_bound_again(spans):
    # Its function wrapper bound to the instance it was read from, so that instance came in as the question.
    class Front:
        answer = tool(Desk("ada").answer)
        echo = tool(Desk.echo)

    assert Front().answer("q") == "ada: q" and Front().echo("q") == "q"


def test_methods_decorated_in_their_class_pickle_as_read_off_an_instance(spans):
    import pickle

    desk = Desk("ada")
    again = [pickle.loads(pickle.dumps(method)) for method in (desk.looked_up, desk.counted, desk.stamped)]
    assert [_result(method("q")) for method in again] == ["ada looked up q", "Desk counted q", "stamped q"]
    assert [s.name for s in spans.get_finished_spans()] == [
        "execute_tool looked_up",
        "execute_tool counted",
        "execute_tool stamped",
    ]


_exporter_of_this_process: list[Any] = []


def _call_recording_spans_here(decorated: Callable[..., Any], question: str) -> tuple[Any, list[str]]:
    """Run in a process of a pool: call what was sent there, with this process's own SDK (installed on its first
    call, as a provider is set once), and say what the call recorded."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    if not _exporter_of_this_process:
        _exporter_of_this_process.append(InMemorySpanExporter())
        provider = TracerProvider()
        provider.add_span_processor(SimpleSpanProcessor(_exporter_of_this_process[0]))
        trace.set_tracer_provider(provider)
    exporter = _exporter_of_this_process[0]
    exporter.clear()
    return _result(decorated(question)), [s.name for s in exporter.get_finished_spans()]


def test_decorated_bound_methods_sent_to_a_process_pool_record_spans_there():
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    desk = Desk("ada")
    sent = [tool(desk.answer), agent(desk.answer_later), tool(Desk.kind), tool(desk.echo_later), desk.looked_up]
    with ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn")) as pool:
        done = [pool.submit(_call_recording_spans_here, decorated, "q").result() for decorated in sent]
    assert done == [
        ("ada: q", ["execute_tool answer"]),
        ("ada later: q", ["invoke_agent answer_later"]),
        ("Desk: q", ["execute_tool kind"]),
        ("later: q", ["execute_tool echo_later"]),
        ("ada looked up q", ["execute_tool looked_up"]),
    ]
