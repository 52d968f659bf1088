"""What each decorator records: span name, kind and the attributes taken from the call.

A step describes one decorated function. The wrapping machinery in ``_wrap`` asks it for the
attributes to set at the start and at the end of a call; nothing here touches the context.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.trace import Span, SpanKind

from . import _values, capture
from . import attributes as A
from . import messages as M
from ._binding import binder_of
from .responses import ResponseInfo, read_response, reply_text

_tool_call_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("agenteval_tool_call_id", default=None)

TOOL_CALL_ID_PARAMETERS = ("tool_call_id", "call_id")
"""Parameter names whose value a ``@tool`` records as ``gen_ai.tool.call.id``."""

DOCUMENT_ID_KEYS = ("id", "doc_id", "document_id")
"""Keys (or attributes) a ``@retriever`` reads document ids from, in this order."""


def _unwrap_partial(fn: Any) -> Any:
    import functools

    while isinstance(fn, functools.partial):
        fn = fn.func
    return fn


def name_of(fn: Callable[..., Any]) -> str:
    """A decorated callable's name when none is given: a function's or method's ``__name__``, the function a
    ``functools.partial`` calls, or the class of a callable object."""
    fn = _unwrap_partial(fn)
    name = getattr(fn, "__name__", None)
    return name if isinstance(name, str) and name else type(fn).__name__


def description_of(fn: Callable[..., Any]) -> str | None:
    """The first line of ``fn``'s docstring (for a ``functools.partial``, the function's it calls): a
    ``@tool``'s description when none is given."""
    import inspect

    doc = inspect.getdoc(_unwrap_partial(fn))
    return doc.strip().splitlines()[0] if doc and doc.strip() else None


class Step:
    """One decorated function: its span's name and kind, and how to record a call."""

    operation: str = ""
    kind: SpanKind = SpanKind.INTERNAL
    input_attribute: str = A.INPUT
    output_attribute: str = A.OUTPUT
    follows_streams: bool = False
    """Whether a returned SDK stream is followed to its end (see ``_returned``): model calls only."""

    def __init__(self, fn: Callable[..., Any], name: str, capture_content: bool | None) -> None:
        self.name = name
        self.binder = binder_of(fn)
        self.capture_content = capture_content
        self.span_name = f"{self.operation} {name}" if name else self.operation
        self.static_attributes: dict[str, Any] = {A.GEN_AI_OPERATION_NAME: self.operation}

    def capturing(self) -> bool:
        """Whether this call records content (arguments, results, messages)."""
        if self.capture_content is not None:
            return self.capture_content and capture.config.enabled
        return capture.config.enabled

    def needs_arguments(self, capturing: bool) -> bool:
        return capturing

    def name_for(self, bound: dict[str, Any] | None) -> str:
        return self.span_name

    def start_attributes(self, bound: dict[str, Any] | None, capturing: bool) -> dict[str, Any]:
        attributes = dict(self.static_attributes)
        if capturing and bound is not None:
            attributes[self.input_attribute] = capture.to_json(self.input_attribute, bound)
        return attributes

    def end_attributes(self, span: Span, result: Any, capturing: bool) -> dict[str, Any]:
        if not capturing:
            return {}
        return {self.output_attribute: capture.to_json(self.output_attribute, result)}

    def stream_end_attributes(self, span: Span, stream: Any, capturing: bool) -> dict[str, Any]:
        """End attributes for a streamed call: its output is the joined text, or the list of chunks."""
        text = stream.text()
        return self.end_attributes(span, text if text is not None else stream.chunks, capturing)


class ToolStep(Step):
    operation = A.OPERATION_EXECUTE_TOOL
    input_attribute = A.GEN_AI_TOOL_CALL_ARGUMENTS
    output_attribute = A.GEN_AI_TOOL_CALL_RESULT

    def __init__(
        self, fn: Callable[..., Any], name: str, description: str | None, capture_content: bool | None
    ) -> None:
        super().__init__(fn, name, capture_content)
        self.static_attributes[A.GEN_AI_TOOL_NAME] = name
        self.static_attributes[A.GEN_AI_TOOL_TYPE] = "function"
        if description:
            self.static_attributes[A.GEN_AI_TOOL_DESCRIPTION] = description
        self.id_parameters = [p for p in TOOL_CALL_ID_PARAMETERS if p in self.binder.names]

    def needs_arguments(self, capturing: bool) -> bool:
        return capturing or bool(self.id_parameters)

    def start_attributes(self, bound: dict[str, Any] | None, capturing: bool) -> dict[str, Any]:
        attributes = super().start_attributes(bound, capturing)
        call_id = _tool_call_id.get()
        if call_id is None and bound:
            call_id = next((bound[p] for p in self.id_parameters if bound.get(p) is not None), None)
        call_id = _values.as_text(call_id)
        if call_id is not None:
            attributes[A.GEN_AI_TOOL_CALL_ID] = capture.capped(call_id)
        return attributes


class LLMStep(Step):
    operation = A.OPERATION_CHAT
    kind = SpanKind.CLIENT
    follows_streams = True
    input_attribute = A.GEN_AI_INPUT_MESSAGES
    output_attribute = A.GEN_AI_OUTPUT_MESSAGES

    def __init__(
        self, fn: Callable[..., Any], model: str | None, provider: str | None, capture_content: bool | None
    ) -> None:
        super().__init__(fn, model or "", capture_content)
        self.model = model
        if model:
            self.static_attributes[A.GEN_AI_REQUEST_MODEL] = model
        if provider:
            self.static_attributes[A.GEN_AI_PROVIDER_NAME] = provider
        self.model_from_call = model is None and "model" in self.binder.names

    def needs_arguments(self, capturing: bool) -> bool:
        return capturing or self.model_from_call

    def _call_model(self, bound: dict[str, Any] | None) -> str | None:
        if self.model_from_call and bound:
            model = bound.get("model")
            return capture.capped(model) if isinstance(model, str) else None
        return None

    def name_for(self, bound: dict[str, Any] | None) -> str:
        model = self._call_model(bound)
        return f"{self.operation} {model}" if model else self.span_name

    def start_attributes(self, bound: dict[str, Any] | None, capturing: bool) -> dict[str, Any]:
        attributes = dict(self.static_attributes)
        model = self._call_model(bound)
        if model:
            attributes[A.GEN_AI_REQUEST_MODEL] = model
        if bound is None:
            return attributes
        attributes.update(M.request_attributes(bound))
        if capturing:
            attributes.update(request_content(bound))
        return attributes

    def end_attributes(self, span: Span, result: Any, capturing: bool) -> dict[str, Any]:
        info = read_response(result)
        text = result if isinstance(result, str) else info.text
        return self.response_attributes(span, info, text, result, capturing)

    def response_attributes(
        self, span: Span, info: ResponseInfo, text: str | None, raw: Any, capturing: bool
    ) -> dict[str, Any]:
        attributes = _usage_attributes(info)
        if info.model and getattr(span, "name", None) == self.operation:  # named by no model yet
            span.update_name(f"{self.operation} {attributes[A.GEN_AI_RESPONSE_MODEL]}")
        already = getattr(span, "attributes", None) or {}
        if already.get(A.WRAPS_MODEL_CALL):  # the request's own span beneath records its usage
            attributes.pop(A.GEN_AI_USAGE_INPUT_TOKENS, None)
            attributes.pop(A.GEN_AI_USAGE_OUTPUT_TOKENS, None)
        attributes = {k: v for k, v in attributes.items() if k not in already}
        if capturing:
            reason = info.finish_reasons[0] if info.finish_reasons else None
            messages = M.output_messages(raw) if text is None or not isinstance(raw, str) else None
            if messages is None:
                messages = [M.reply_message(text if text is not None else _as_text(raw), reason)]
            attributes[self.output_attribute] = capture.to_json(self.output_attribute, messages)
        return attributes

    def stream_end_attributes(self, span: Span, stream: Any, capturing: bool) -> dict[str, Any]:
        info = stream.info
        attributes = self.response_attributes(span, info, stream.text(), None, False)
        if capturing:
            reason = info.finish_reasons[0] if info.finish_reasons else None
            text = stream.text()
            if stream.message.has_structure or text is not None:
                messages = stream.message.messages(text, reason)
            else:
                messages = [M.reply_message(_as_text(stream.chunks), reason)]
            attributes[self.output_attribute] = capture.to_json(self.output_attribute, messages)
        return attributes


def request_content(bound: dict[str, Any]) -> dict[str, Any]:
    """A model call's content attributes from its arguments: the input messages (``messages``, a Responses
    API ``input`` or a ``prompt``; otherwise the arguments as one user message), the system instructions and
    the tools offered."""
    attributes: dict[str, Any] = {}
    conversation = next((bound[k] for k in ("messages", "input", "prompt") if k in bound), None)
    messages = M.input_messages(conversation) if conversation is not None else None
    if messages is None:
        messages = [user_message(bound)]
    attributes[A.GEN_AI_INPUT_MESSAGES] = capture.to_json(A.GEN_AI_INPUT_MESSAGES, messages)
    system = M.system_instructions(bound.get("system", bound.get("instructions")))
    if system is not None:
        attributes[A.GEN_AI_SYSTEM_INSTRUCTIONS] = capture.to_json(A.GEN_AI_SYSTEM_INSTRUCTIONS, system)
    tools = M.tool_definitions(bound.get("tools"))
    if tools is not None:
        attributes[A.GEN_AI_TOOL_DEFINITIONS] = capture.to_json(A.GEN_AI_TOOL_DEFINITIONS, tools)
    return attributes


def user_message(bound: dict[str, Any]) -> dict[str, Any]:
    """A call's arguments as one user message: a lone string as its text, anything else as JSON text."""
    values = list(bound.values())
    if len(values) == 1 and isinstance(values[0], str):
        return {"role": "user", "parts": [M.text_part(values[0])]}
    return {"role": "user", "parts": [M.text_part(_as_text(bound))]}


def _as_text(value: Any) -> str:
    """A value that is not a message, as bounded JSON text (the text of a message part)."""
    return value if isinstance(value, str) else capture.to_json(A.OUTPUT, value)


class AgentStep(Step):
    operation = A.OPERATION_INVOKE_AGENT
    input_attribute = A.GEN_AI_INPUT_MESSAGES
    output_attribute = A.GEN_AI_OUTPUT_MESSAGES

    def __init__(self, fn: Callable[..., Any], name: str, capture_content: bool | None) -> None:
        super().__init__(fn, name, capture_content)
        self.static_attributes[A.GEN_AI_AGENT_NAME] = name

    def start_attributes(self, bound: dict[str, Any] | None, capturing: bool) -> dict[str, Any]:
        attributes = dict(self.static_attributes)
        if capturing and bound is not None:
            conversation = bound.get("messages")
            messages = M.input_messages(conversation) if conversation is not None else None
            if messages is None:
                messages = [user_message({k: v for k, v in bound.items() if k != "messages"} or bound)]
            attributes[self.input_attribute] = capture.to_json(self.input_attribute, messages)
        return attributes

    def end_attributes(self, span: Span, result: Any, capturing: bool) -> dict[str, Any]:
        if not capturing:
            return {}
        text = reply_text(result)
        messages = [M.reply_message(text if text is not None else _as_text(result))]
        return {self.output_attribute: capture.to_json(self.output_attribute, messages)}


QUERY_PARAMETERS = ("query", "q", "question", "text", "search")
"""Parameter names whose value a ``@retriever`` records as ``gen_ai.retrieval.query.text``."""

SCORE_KEYS = ("score", "relevance_score", "similarity", "distance")
"""Keys (or attributes) a ``@retriever`` reads a document's score from, in this order."""


class RetrieverStep(Step):
    operation = A.OPERATION_RETRIEVAL

    def __init__(self, fn: Callable[..., Any], name: str, id_key: str | None, capture_content: bool | None) -> None:
        super().__init__(fn, name, capture_content)
        self.id_keys = (id_key,) if id_key else DOCUMENT_ID_KEYS

    def start_attributes(self, bound: dict[str, Any] | None, capturing: bool) -> dict[str, Any]:
        attributes = super().start_attributes(bound, capturing)
        if capturing and bound:
            query = next((bound[p] for p in QUERY_PARAMETERS if isinstance(bound.get(p), str)), None)
            if query is None:
                strings = [v for v in bound.values() if isinstance(v, str)]
                query = strings[0] if len(strings) == 1 else None
            if query is not None:
                attributes[A.GEN_AI_RETRIEVAL_QUERY_TEXT] = capture.to_text(A.GEN_AI_RETRIEVAL_QUERY_TEXT, query)
        return attributes

    def end_attributes(self, span: Span, result: Any, capturing: bool) -> dict[str, Any]:
        attributes = super().end_attributes(span, result, capturing)
        already = getattr(span, "attributes", None) or {}
        if A.RETRIEVAL_DOCUMENT_IDS not in already:
            documents = retrieved_documents(result, self.id_keys)
            if documents is not None:
                attributes.update(document_attributes(documents))
        return attributes


def document_attributes(documents: Sequence[tuple[str, float | None]]) -> dict[str, Any]:
    """The ids (agenteval's column) and the conventions' ``gen_ai.retrieval.documents`` of a retrieval."""
    listed = [{"id": i} if s is None else {"id": i, "score": s} for i, s in documents]
    return {
        A.RETRIEVAL_DOCUMENT_IDS: [i for i, _ in documents],
        A.GEN_AI_RETRIEVAL_DOCUMENTS: capture.to_json(A.GEN_AI_RETRIEVAL_DOCUMENTS, listed),
    }


def retrieval_pairs(document_ids: Any, scores: Any) -> list[tuple[str, float | None]]:
    """The (id, score) pairs :func:`set_retrieved_documents` records, from whatever the application passed: scores
    pair with ids in order, and an id with no text is left out with its score."""
    ids = _values.listed(document_ids)
    listed = _values.listed(scores)
    pairs = []
    for i, doc_id in enumerate(ids):
        text = _values.as_text(doc_id)
        if text is not None:
            pairs.append((text, _values.score(listed[i]) if i < len(listed) else None))
    return pairs


def _usage_attributes(info: ResponseInfo) -> dict[str, Any]:
    """Model, response id, usage and finish reasons as attributes; the ids capped as :func:`capture.capped` caps."""
    attributes: dict[str, Any] = {}
    if info.model:
        attributes[A.GEN_AI_RESPONSE_MODEL] = capture.capped(info.model)
    if info.response_id:
        attributes[A.GEN_AI_RESPONSE_ID] = capture.capped(info.response_id)
    if info.input_tokens is not None:
        attributes[A.GEN_AI_USAGE_INPUT_TOKENS] = info.input_tokens
    if info.output_tokens is not None:
        attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS] = info.output_tokens
    if info.finish_reasons:
        attributes[A.GEN_AI_RESPONSE_FINISH_REASONS] = [capture.capped(r) for r in info.finish_reasons]
    return attributes


def retrieved_documents(result: Any, keys: Sequence[str]) -> list[tuple[str, float | None]] | None:
    """Ids and scores of the documents a retriever returned: strings are ids themselves, ``(id, score)``
    pairs give both, dicts and objects their id key and score key."""
    if isinstance(result, dict):
        for key in ("documents", "results", "hits"):
            if isinstance(result.get(key), (list, tuple)):
                result = result[key]
                break
    if not isinstance(result, (list, tuple)):
        return None
    found = []
    for item in result:
        doc_id = _item_id(item, keys)
        if doc_id is not None:
            found.append((doc_id, _item_score(item)))
    return found


def document_ids(result: Any, keys: Sequence[str]) -> list[str] | None:
    """Ids of the documents a retriever returned (see :func:`retrieved_documents`)."""
    found = retrieved_documents(result, keys)
    return None if found is None else [doc_id for doc_id, _ in found]


def _item_score(item: Any) -> float | None:
    if isinstance(item, (tuple, list)):
        score = item[1] if len(item) > 1 else None
    else:
        score = next(
            (
                v
                for k in SCORE_KEYS
                if (v := item.get(k) if isinstance(item, dict) else getattr(item, k, None)) is not None
            ),
            None,
        )
    return _values.score(score)


def _item_id(item: Any, keys: Sequence[str]) -> str | None:
    if isinstance(item, str):
        return item
    if isinstance(item, (tuple, list)) and item and isinstance(item[0], (str, int)):
        return _values.as_text(item[0])
    for key in keys:
        value = item.get(key) if isinstance(item, dict) else getattr(item, key, None)
        if value is None and not isinstance(item, dict):
            metadata = getattr(item, "metadata", None)
            value = metadata.get(key) if isinstance(metadata, dict) else None
        if value is not None:
            return _values.as_text(value)
    return None


def llm_response_attributes(
    model: Any, input_tokens: Any, output_tokens: Any, finish_reasons: Any, response_id: Any
) -> dict[str, Any]:
    """The attributes :func:`set_llm_response` sets, from whatever the application passed (see ``_values``)."""
    info = ResponseInfo(
        model=_values.as_text(model),
        response_id=_values.as_text(response_id),
        input_tokens=_values.count(input_tokens),
        output_tokens=_values.count(output_tokens),
        finish_reasons=_values.finish_reasons(finish_reasons),
    )
    return _usage_attributes(info)


def error_type(exc: BaseException) -> str:
    """The exception's qualified class name, as ``error.type`` wants it."""
    cls = type(exc)
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"
