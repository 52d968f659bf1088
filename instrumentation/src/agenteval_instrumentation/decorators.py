"""``@llm_call``, ``@tool``, ``@agent`` and ``@retriever``, and the calls that add to their spans.

Each decorator works bare (``@tool``) or with options (``@tool(name="convert_currency")``), on
functions, methods, coroutine functions, generators and async generators.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator, Sequence
from typing import TYPE_CHECKING, Any, TypeVar, overload

from ._wrap import Decorator, instrument

if TYPE_CHECKING:
    from ._steps import Step

F = TypeVar("F", bound=Callable[..., Any])


def _decorate(fn: Any, make_step: Callable[[Callable[..., Any]], Step], decorator: Decorator) -> Any:
    """Wrap ``fn`` (unwrapping ``staticmethod``/``classmethod`` and wrapping them back); ``decorator`` is the
    decorator doing it, with its options, which a wrapper that pickles applies again."""
    if isinstance(fn, (staticmethod, classmethod)):
        return type(fn)(_decorate(fn.__func__, make_step, decorator))
    if not callable(fn):
        raise TypeError(f"agenteval decorators wrap functions, not {type(fn).__name__}")
    return instrument(fn, lambda: make_step(fn), decorator)


@overload
def tool(fn: F) -> F: ...
@overload
def tool(
    *, name: str | None = None, description: str | None = None, capture: bool | None = None
) -> Callable[[F], F]: ...
def tool(
    fn: Any = None, *, name: str | None = None, description: str | None = None, capture: bool | None = None
) -> Any:
    """Record each call as an ``execute_tool {name}`` span with its arguments and result.

    ``name`` defaults to the function's name, ``description`` to the first line of its docstring.
    The tool call id is taken from :func:`use_tool_call_id` or from a ``tool_call_id``/``call_id``
    parameter. ``capture=False`` records no arguments or result for this tool.
    """

    def step(f: Callable[..., Any]) -> Step:
        from ._steps import ToolStep, description_of, name_of

        return ToolStep(f, name or name_of(f), description or description_of(f), capture)

    made: Decorator = (tool, {"name": name, "description": description, "capture": capture})
    return _decorate(fn, step, made) if fn is not None else lambda f: _decorate(f, step, made)


@overload
def llm_call(fn: F) -> F: ...
@overload
def llm_call(
    *, model: str | None = None, provider: str | None = None, capture: bool | None = None
) -> Callable[[F], F]: ...
def llm_call(
    fn: Any = None, *, model: str | None = None, provider: str | None = None, capture: bool | None = None
) -> Any:
    """Record each call as a ``chat {model}`` CLIENT span.

    Model, usage, finish reasons and the reply text are read from a returned OpenAI or Anthropic
    response (object or dict); otherwise call :func:`set_llm_response` inside the function. When
    ``model`` is not given, a ``model`` argument of the call names it. A ``messages`` argument is
    recorded as the input messages, otherwise all arguments are.
    """

    def step(f: Callable[..., Any]) -> Step:
        from ._steps import LLMStep

        return LLMStep(f, model, provider, capture)

    made: Decorator = (llm_call, {"model": model, "provider": provider, "capture": capture})
    return _decorate(fn, step, made) if fn is not None else lambda f: _decorate(f, step, made)


@overload
def agent(fn: F) -> F: ...
@overload
def agent(*, name: str | None = None, capture: bool | None = None) -> Callable[[F], F]: ...
def agent(fn: Any = None, *, name: str | None = None, capture: bool | None = None) -> Any:
    """Record each call as an ``invoke_agent {name}`` span with its input and reply."""

    def step(f: Callable[..., Any]) -> Step:
        from ._steps import AgentStep, name_of

        return AgentStep(f, name or name_of(f), capture)

    made: Decorator = (agent, {"name": name, "capture": capture})
    return _decorate(fn, step, made) if fn is not None else lambda f: _decorate(f, step, made)


@overload
def retriever(fn: F) -> F: ...
@overload
def retriever(
    *, name: str | None = None, id_key: str | None = None, capture: bool | None = None
) -> Callable[[F], F]: ...
def retriever(
    fn: Any = None, *, name: str | None = None, id_key: str | None = None, capture: bool | None = None
) -> Any:
    """Record each call as a ``retrieval {name}`` span with the ids of the documents it returned.

    Ids come from the return value: strings are ids themselves; dicts and objects give their
    ``id``, ``doc_id`` or ``document_id`` (or ``id_key``). Or call :func:`set_retrieved_documents`.
    Document ids are recorded even when content capture is off: they are not content.
    """

    def step(f: Callable[..., Any]) -> Step:
        from ._steps import RetrieverStep, name_of

        return RetrieverStep(f, name or name_of(f), id_key, capture)

    made: Decorator = (retriever, {"name": name, "id_key": id_key, "capture": capture})
    return _decorate(fn, step, made) if fn is not None else lambda f: _decorate(f, step, made)


def set_llm_response(
    *,
    model: str | None = None,
    input_tokens: int | None = None,
    output_tokens: int | None = None,
    finish_reasons: Sequence[str] | str | None = None,
    response_id: str | None = None,
) -> None:
    """Set model, usage and finish reasons on the current span (inside an ``@llm_call``).

    Use it when the function returns something other than an OpenAI or Anthropic response.
    Values set here win over what is read from the return value. It never raises: a value of the wrong kind is
    taken as text (model, response id, each finish reason) or left out (a token count that is not an int).
    """
    from opentelemetry import trace

    from ._steps import llm_response_attributes

    span = trace.get_current_span()
    if span.is_recording():
        span.set_attributes(llm_response_attributes(model, input_tokens, output_tokens, finish_reasons, response_id))


def set_retrieved_documents(document_ids: Sequence[str], scores: Sequence[float | None] | None = None) -> None:
    """Set the ids (and scores, in the same order) of the retrieved documents on the current span (inside a
    ``@retriever``): ``agenteval.retrieval.document_ids`` and ``gen_ai.retrieval.documents``. It never raises: an
    id with no text is left out, a score that is not a finite number is recorded as none."""
    from opentelemetry import trace

    from ._steps import document_attributes, retrieval_pairs

    span = trace.get_current_span()
    if span.is_recording():
        span.set_attributes(document_attributes(retrieval_pairs(document_ids, scores)))


@contextlib.contextmanager
def use_tool_call_id(call_id: str) -> Iterator[None]:
    """Within the block, the next ``@tool`` calls record ``gen_ai.tool.call.id = call_id``."""
    from ._steps import _tool_call_id

    token = _tool_call_id.set(call_id)
    try:
        yield
    finally:
        _tool_call_id.reset(token)
