"""What each decorator records: span name, kind and the attributes taken from the call.

A step describes one decorated function. The wrapping machinery in ``_wrap`` asks it for the
attributes to set at the start and at the end of a call; nothing here touches the context.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable, Sequence
from typing import Any

from opentelemetry.trace import Span, SpanKind

from . import attributes as A
from . import capture
from ._binding import Binder
from .responses import ResponseInfo, read_response, reply_text

_tool_call_id: contextvars.ContextVar[str | None] = contextvars.ContextVar("agenteval_tool_call_id", default=None)

TOOL_CALL_ID_PARAMETERS = ("tool_call_id", "call_id")
"""Parameter names whose value a ``@tool`` records as ``gen_ai.tool.call.id``."""

DOCUMENT_ID_KEYS = ("id", "doc_id", "document_id")
"""Keys (or attributes) a ``@retriever`` reads document ids from, in this order."""


class Step:
    """One decorated function: its span's name and kind, and how to record a call."""

    operation: str = ""
    kind: SpanKind = SpanKind.INTERNAL
    input_attribute: str = A.INPUT
    output_attribute: str = A.OUTPUT

    def __init__(self, fn: Callable[..., Any], name: str, capture_content: bool | None) -> None:
        self.name = name
        self.binder = Binder(fn)
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
        if call_id is not None:
            attributes[A.GEN_AI_TOOL_CALL_ID] = str(call_id)
        return attributes


class LLMStep(Step):
    operation = A.OPERATION_CHAT
    kind = SpanKind.CLIENT
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
            return model if isinstance(model, str) else None
        return None

    def name_for(self, bound: dict[str, Any] | None) -> str:
        model = self._call_model(bound)
        return f"{self.operation} {model}" if model else self.span_name

    def start_attributes(self, bound: dict[str, Any] | None, capturing: bool) -> dict[str, Any]:
        attributes = dict(self.static_attributes)
        model = self._call_model(bound)
        if model:
            attributes[A.GEN_AI_REQUEST_MODEL] = model
        if capturing and bound is not None:
            messages = bound["messages"] if "messages" in bound else bound
            attributes[self.input_attribute] = capture.to_json(self.input_attribute, messages)
        return attributes

    def end_attributes(self, span: Span, result: Any, capturing: bool) -> dict[str, Any]:
        info = read_response(result)
        text = result if isinstance(result, str) else info.text
        return self.response_attributes(span, info, text, result, capturing)

    def stream_end_attributes(self, span: Span, stream: Any, capturing: bool) -> dict[str, Any]:
        return self.response_attributes(span, stream.info, stream.text(), stream.chunks, capturing)

    def response_attributes(
        self, span: Span, info: ResponseInfo, text: str | None, raw: Any, capturing: bool
    ) -> dict[str, Any]:
        attributes = _usage_attributes(info)
        if info.model and not self.model and not self.model_from_call:
            span.update_name(f"{self.operation} {info.model}")
        already = getattr(span, "attributes", None) or {}
        attributes = {k: v for k, v in attributes.items() if k not in already}
        if capturing:
            if text is not None:
                message = assistant_message(text, info.finish_reasons[0] if info.finish_reasons else None)
                attributes[self.output_attribute] = capture.to_json(self.output_attribute, [message])
            else:
                attributes[self.output_attribute] = capture.to_json(self.output_attribute, raw)
        return attributes


class AgentStep(Step):
    operation = A.OPERATION_INVOKE_AGENT
    input_attribute = A.GEN_AI_INPUT_MESSAGES
    output_attribute = A.GEN_AI_OUTPUT_MESSAGES

    def __init__(self, fn: Callable[..., Any], name: str, capture_content: bool | None) -> None:
        super().__init__(fn, name, capture_content)
        self.static_attributes[A.GEN_AI_AGENT_NAME] = name

    def end_attributes(self, span: Span, result: Any, capturing: bool) -> dict[str, Any]:
        if not capturing:
            return {}
        text = reply_text(result)
        value = [assistant_message(text)] if text is not None else result
        return {self.output_attribute: capture.to_json(self.output_attribute, value)}


class RetrieverStep(Step):
    operation = A.OPERATION_RETRIEVAL

    def __init__(self, fn: Callable[..., Any], name: str, id_key: str | None, capture_content: bool | None) -> None:
        super().__init__(fn, name, capture_content)
        self.id_keys = (id_key,) if id_key else DOCUMENT_ID_KEYS

    def end_attributes(self, span: Span, result: Any, capturing: bool) -> dict[str, Any]:
        attributes = super().end_attributes(span, result, capturing)
        already = getattr(span, "attributes", None) or {}
        if A.RETRIEVAL_DOCUMENT_IDS not in already:
            ids = document_ids(result, self.id_keys)
            if ids is not None:
                attributes[A.RETRIEVAL_DOCUMENT_IDS] = ids
        return attributes


def assistant_message(text: str, finish_reason: str | None = None) -> dict[str, Any]:
    """An output message in the GenAI conventions' shape."""
    message: dict[str, Any] = {"role": "assistant", "parts": [{"type": "text", "content": text}]}
    if finish_reason:
        message["finish_reason"] = finish_reason
    return message


def _usage_attributes(info: ResponseInfo) -> dict[str, Any]:
    attributes: dict[str, Any] = {}
    if info.model:
        attributes[A.GEN_AI_RESPONSE_MODEL] = info.model
    if info.response_id:
        attributes[A.GEN_AI_RESPONSE_ID] = info.response_id
    if info.input_tokens is not None:
        attributes[A.GEN_AI_USAGE_INPUT_TOKENS] = info.input_tokens
    if info.output_tokens is not None:
        attributes[A.GEN_AI_USAGE_OUTPUT_TOKENS] = info.output_tokens
    if info.finish_reasons:
        attributes[A.GEN_AI_RESPONSE_FINISH_REASONS] = info.finish_reasons
    return attributes


def document_ids(result: Any, keys: Sequence[str]) -> list[str] | None:
    """Ids of the documents a retriever returned: strings as they are, else each item's id key."""
    if isinstance(result, dict):
        for key in ("documents", "results", "hits"):
            if isinstance(result.get(key), (list, tuple)):
                result = result[key]
                break
    if not isinstance(result, (list, tuple)):
        return None
    ids = []
    for item in result:
        doc_id = _item_id(item, keys)
        if doc_id is not None:
            ids.append(doc_id)
    return ids


def _item_id(item: Any, keys: Sequence[str]) -> str | None:
    if isinstance(item, str):
        return item
    if isinstance(item, (tuple, list)) and item and isinstance(item[0], (str, int)):
        return str(item[0])
    for key in keys:
        value = item.get(key) if isinstance(item, dict) else getattr(item, key, None)
        if value is None and not isinstance(item, dict):
            metadata = getattr(item, "metadata", None)
            value = metadata.get(key) if isinstance(metadata, dict) else None
        if value is not None:
            return str(value)
    return None


def llm_response_attributes(
    model: str | None,
    input_tokens: int | None,
    output_tokens: int | None,
    finish_reasons: Sequence[str] | str | None,
    response_id: str | None,
) -> dict[str, Any]:
    """The attributes :func:`set_llm_response` sets, from its arguments."""
    if isinstance(finish_reasons, str):
        finish_reasons = [finish_reasons]
    info = ResponseInfo(
        model=model,
        response_id=response_id,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        finish_reasons=list(finish_reasons or []),
    )
    return _usage_attributes(info)


def error_type(exc: BaseException) -> str:
    """The exception's qualified class name, as ``error.type`` wants it."""
    cls = type(exc)
    module = cls.__module__
    return cls.__qualname__ if module == "builtins" else f"{module}.{cls.__qualname__}"
