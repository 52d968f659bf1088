"""Messages in the GenAI conventions' shape: a role and typed parts (``text``, ``tool_call``,
``tool_call_response``, ``reasoning``, ``uri``, ``blob``), as the conventions' JSON schemas for
``gen_ai.input.messages``, ``gen_ai.output.messages`` and ``gen_ai.system_instructions`` define them.

Converted from OpenAI chat completions and Responses API objects, Anthropic messages and plain
strings, as SDK objects or dicts, by duck typing: nothing here imports a provider's SDK.
A backend that validates these attributes drops the whole list when one item is off the schema,
so every output message has a ``finish_reason`` and every part the fields its type requires.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from . import attributes as A

Message = dict[str, Any]
Part = dict[str, Any]

FINISH_REASONS = {
    "stop": "stop",
    "end_turn": "stop",
    "stop_sequence": "stop",
    "completed": "stop",
    "pause_turn": "stop",
    "length": "length",
    "max_tokens": "length",
    "max_output_tokens": "length",
    "model_context_window_exceeded": "length",
    "tool_calls": "tool_call",
    "tool_use": "tool_call",
    "function_call": "tool_call",
    "content_filter": "content_filter",
    "refusal": "content_filter",
}
"""Providers' stop reasons -> the conventions' finish reasons; others are kept as they are."""


def _get(obj: Any, name: str) -> Any:
    if isinstance(obj, Mapping):
        return obj.get(name)
    return getattr(obj, name, None)


def _is_sequence(value: Any) -> bool:
    return isinstance(value, (list, tuple))


def finish_reason(reason: Any) -> str:
    """The conventions' finish reason for a provider's (``stop`` when none is known)."""
    if not isinstance(reason, str) or not reason:
        return "stop"
    return FINISH_REASONS.get(reason, reason)


def _arguments(value: Any) -> Any:
    """Tool-call arguments as an object: OpenAI sends JSON text, which is parsed when it parses."""
    if isinstance(value, str):
        try:
            return json.loads(value)
        except ValueError:
            return value
    return value


def text_part(text: str) -> Part:
    return {"type": "text", "content": text}


def tool_call_part(call_id: Any, name: Any, arguments: Any) -> Part:
    part: Part = {"type": "tool_call", "id": call_id if isinstance(call_id, str) else None, "name": str(name or "")}
    part["arguments"] = _arguments(arguments)
    return part


def _block_text(value: Any) -> Any:
    """A tool result's content: text as it is, a list of text blocks joined, anything else kept."""
    if isinstance(value, str) or not _is_sequence(value):
        return value
    texts = [_get(b, "text") for b in value]
    if texts and all(isinstance(t, str) for t in texts):
        return "".join(texts)
    return [_plain(b) for b in value]


def _plain(value: Any) -> Any:
    """An SDK object as plain data (its dict), for a part kept whole."""
    dump = getattr(value, "model_dump", None)
    if callable(dump):
        try:
            return dump(mode="json", exclude_none=True)
        except Exception:
            return repr(value)
    return value


def _part(block: Any) -> Part | None:
    """One content block (OpenAI, Responses or Anthropic) as a part."""
    if isinstance(block, str):
        return text_part(block)
    kind = _get(block, "type")
    if kind in ("text", "input_text", "output_text"):
        text = _get(block, "text")
        return text_part(text) if isinstance(text, str) else None
    if kind == "refusal":
        return text_part(str(_get(block, "refusal") or ""))
    if kind in ("tool_use", "server_tool_use"):
        return tool_call_part(_get(block, "id"), _get(block, "name"), _get(block, "input"))
    if kind == "tool_result":
        return {
            "type": "tool_call_response",
            "id": _get(block, "tool_use_id"),
            "response": _block_text(_get(block, "content")),
        }
    if kind == "function_call":
        return tool_call_part(
            _get(block, "call_id") or _get(block, "id"), _get(block, "name"), _get(block, "arguments")
        )
    if kind == "function_call_output":
        return {
            "type": "tool_call_response",
            "id": _get(block, "call_id"),
            "response": _block_text(_get(block, "output")),
        }
    if kind in ("thinking", "reasoning"):
        text = _get(block, "thinking")
        if not isinstance(text, str):
            summary = _get(block, "summary") or ()
            text = "".join(t for s in summary if isinstance(t := _get(s, "text"), str))
        return {"type": "reasoning", "content": text}
    if kind == "image_url":
        url = _get(_get(block, "image_url"), "url")
        return {"type": "uri", "modality": "image", "uri": str(url)} if url else None
    if kind == "image":
        source = _get(block, "source")
        if _get(source, "type") == "base64":
            return {
                "type": "blob",
                "modality": "image",
                "mime_type": _get(source, "media_type"),
                "content": _get(source, "data") or "",
            }
        url = _get(source, "url")
        return {"type": "uri", "modality": "image", "uri": str(url)} if url else None
    if isinstance(kind, str):
        generic = _plain(block)
        return dict(generic) if isinstance(generic, Mapping) else {"type": kind}
    return None


def parts(content: Any) -> list[Part]:
    """A message's content (text, or a list of blocks) as parts."""
    if content is None:
        return []
    if isinstance(content, str):
        return [text_part(content)]
    if _is_sequence(content):
        return [p for block in content if (p := _part(block)) is not None]
    part = _part(content)
    return [part] if part is not None else [text_part(str(content))]


def _chat_message(message: Any) -> Message | None:
    """One message of a conversation: OpenAI chat, Anthropic, or a Responses API input item."""
    if isinstance(message, str):
        return {"role": "user", "parts": [text_part(message)]}
    role = _get(message, "role")
    kind = _get(message, "type")
    if role is None and kind in ("function_call", "function_call_output", "reasoning"):
        part = _part(message)
        return {"role": "tool" if kind == "function_call_output" else "assistant", "parts": [part] if part else []}
    if not isinstance(role, str):
        return None
    out: list[Part] = parts(_get(message, "content"))
    if role == "tool":  # OpenAI: the content is the result of the call named
        response = _block_text(_get(message, "content"))
        out = [{"type": "tool_call_response", "id": _get(message, "tool_call_id"), "response": response}]
    for call in _get(message, "tool_calls") or ():
        function = _get(call, "function")
        out.append(tool_call_part(_get(call, "id"), _get(function, "name"), _get(function, "arguments")))
    legacy = _get(message, "function_call")
    if legacy is not None:
        out.append(tool_call_part(None, _get(legacy, "name"), _get(legacy, "arguments")))
    result: Message = {"role": role, "parts": out}
    name = _get(message, "name")
    if isinstance(name, str):
        result["name"] = name
    return result


def input_messages(value: Any) -> list[Message] | None:
    """A request's messages (a list of messages, Responses API input, or a plain string); None when
    ``value`` is not a conversation."""
    if isinstance(value, str):
        return [{"role": "user", "parts": [text_part(value)]}]
    if not _is_sequence(value):
        return None
    messages = [_chat_message(m) for m in value]
    if not value or any(m is None for m in messages):
        return None
    return [m for m in messages if m is not None]


def system_instructions(value: Any) -> list[Part] | None:
    """An Anthropic ``system`` or a Responses API ``instructions`` as parts."""
    if value is None:
        return None
    found = parts(value)
    return found or None


def tool_definitions(tools: Any) -> list[dict[str, Any]] | None:
    """The tools offered (OpenAI chat, Responses API or Anthropic shape) as the conventions' definitions."""
    if not _is_sequence(tools) or not tools:
        return None
    out = []
    for tool in tools:
        function = _get(tool, "function")
        spec = function if function is not None else tool
        name = _get(spec, "name")
        if not isinstance(name, str):
            continue
        definition: dict[str, Any] = {"type": "function", "name": name}
        description = _get(spec, "description")
        if isinstance(description, str):
            definition["description"] = description
        schema = _get(spec, "parameters")
        if schema is None:
            schema = _get(spec, "input_schema")
        if schema is not None:
            definition["parameters"] = _plain(schema)
        out.append(definition)
    return out or None


def output_messages(response: Any) -> list[Message] | None:
    """The messages a response carries: every choice of a chat completion, the content of an Anthropic
    message, the output items of a Responses API response; None for anything else."""
    choices = _get(response, "choices")
    if _is_sequence(choices) and choices:
        out = []
        for choice in choices:
            message = _chat_message(_get(choice, "message")) or {"role": "assistant", "parts": []}
            message["finish_reason"] = finish_reason(_get(choice, "finish_reason"))
            out.append(message)
        return out
    output = _get(response, "output")
    if _is_sequence(output) and _get(response, "object") == "response":
        found: list[Part] = []
        for item in output:
            found.extend(parts(_get(item, "content")) if _get(item, "type") == "message" else parts([item]))
        return [{"role": "assistant", "parts": found, "finish_reason": responses_finish_reason(response)}]
    content = _get(response, "content")
    if _is_sequence(content) and _get(response, "role") == "assistant":
        return [
            {
                "role": "assistant",
                "parts": parts(content),
                "finish_reason": finish_reason(_get(response, "stop_reason")),
            }
        ]
    return None


def responses_finish_reason(response: Any) -> str:
    """Why a Responses API response ended: its incomplete reason, a tool call, or its status."""
    incomplete = _get(_get(response, "incomplete_details"), "reason")
    if isinstance(incomplete, str):
        return finish_reason(incomplete)
    if any(_get(item, "type") == "function_call" for item in _get(response, "output") or ()):
        return "tool_call"
    return finish_reason(_get(response, "status"))


def reply_message(text: str, reason: str | None = None) -> Message:
    """An assistant's text reply as an output message."""
    return {"role": "assistant", "parts": [text_part(text)], "finish_reason": finish_reason(reason)}


REQUEST_PARAMETERS = {
    "temperature": A.GEN_AI_REQUEST_TEMPERATURE,
    "top_p": A.GEN_AI_REQUEST_TOP_P,
    "top_k": A.GEN_AI_REQUEST_TOP_K,
    "max_tokens": A.GEN_AI_REQUEST_MAX_TOKENS,
    "max_completion_tokens": A.GEN_AI_REQUEST_MAX_TOKENS,
    "max_output_tokens": A.GEN_AI_REQUEST_MAX_TOKENS,
    "frequency_penalty": A.GEN_AI_REQUEST_FREQUENCY_PENALTY,
    "presence_penalty": A.GEN_AI_REQUEST_PRESENCE_PENALTY,
    "seed": A.GEN_AI_REQUEST_SEED,
    "choice_count": A.GEN_AI_REQUEST_CHOICE_COUNT,  # not OpenAI's "n": too common a name for anything else
    "stop": A.GEN_AI_REQUEST_STOP_SEQUENCES,
    "stop_sequences": A.GEN_AI_REQUEST_STOP_SEQUENCES,
    "stream": A.GEN_AI_REQUEST_STREAM,
}
"""A call's parameter names -> the conventions' request attributes."""

_INTEGER_PARAMETERS = frozenset((A.GEN_AI_REQUEST_MAX_TOKENS, A.GEN_AI_REQUEST_SEED, A.GEN_AI_REQUEST_CHOICE_COUNT))
"""Request attributes the conventions type as integers; the other numbers are doubles (``top_k`` too)."""


def request_attributes(bound: Mapping[str, Any]) -> dict[str, Any]:
    """The request parameters among a call's arguments, as attributes (values of the wrong type left out)."""
    out: dict[str, Any] = {}
    for name, attribute in REQUEST_PARAMETERS.items():
        value = bound.get(name)
        if value is None or attribute in out:
            continue
        if attribute == A.GEN_AI_REQUEST_STOP_SEQUENCES:
            value = [value] if isinstance(value, str) else value
            if _is_sequence(value) and all(isinstance(v, str) for v in value):
                out[attribute] = list(value)
        elif attribute == A.GEN_AI_REQUEST_STREAM:
            if isinstance(value, bool):
                out[attribute] = value
        elif isinstance(value, bool):
            continue
        elif attribute in _INTEGER_PARAMETERS:
            if isinstance(value, int):
                out[attribute] = value
        elif isinstance(value, int | float):
            out[attribute] = float(value)  # temperature=0 is the double 0.0 the conventions type it as
    return out


class StreamedMessage:
    """Folds a stream's chunks (OpenAI chat chunks, Anthropic events, Responses API events) into the
    assembled output: text, each tool call whole (its streamed argument pieces joined), reasoning."""

    __slots__ = ("_calls", "_reasoning", "final")

    def __init__(self) -> None:
        self._reasoning: list[str] = []
        self._calls: dict[Any, list[Any]] = {}  # index -> [id, name, argument pieces]
        self.final: Any = None  # a Responses API stream's completed response, which says it all

    def add(self, chunk: Any, keep_text: bool) -> None:
        choices = _get(chunk, "choices")
        if _is_sequence(choices):
            for choice in choices:
                self._add_openai_delta(_get(choice, "delta"), keep_text)
            return
        kind = _get(chunk, "type")
        if not isinstance(kind, str):
            return
        if kind == "content_block_start":
            block = _get(chunk, "content_block")
            if _get(block, "type") in ("tool_use", "server_tool_use"):
                self._calls[_get(chunk, "index")] = [_get(block, "id"), _get(block, "name"), []]
        elif kind == "content_block_delta":
            delta = _get(chunk, "delta")
            delta_kind = _get(delta, "type")
            if delta_kind == "input_json_delta":
                call = self._calls.get(_get(chunk, "index"))
                if call is not None:
                    call[2].append(_get(delta, "partial_json") or "")
            elif delta_kind == "thinking_delta" and keep_text:
                self._reasoning.append(str(_get(delta, "thinking") or ""))
        elif kind in ("response.completed", "response.incomplete", "response.failed"):
            self.final = _get(chunk, "response")

    def _add_openai_delta(self, delta: Any, keep_text: bool) -> None:
        if delta is None:
            return
        for call in _get(delta, "tool_calls") or ():
            index = _get(call, "index")
            entry = self._calls.setdefault(index, [None, None, []])
            function = _get(call, "function")
            entry[0] = entry[0] or _get(call, "id")
            entry[1] = entry[1] or _get(function, "name")
            pieces = _get(function, "arguments")
            if isinstance(pieces, str):
                entry[2].append(pieces)

    @property
    def has_structure(self) -> bool:
        """Whether the stream held more than text: tool calls, reasoning or a final response."""
        return bool(self._calls or self._reasoning or self.final is not None)

    def messages(self, text: str | None, reason: str | None) -> list[Message]:
        """The assembled output message, ``text`` being the stream's joined text."""
        if self.final is not None:
            found = output_messages(self.final)
            if found:
                return found
        out: list[Part] = []
        if self._reasoning:
            out.append({"type": "reasoning", "content": "".join(self._reasoning)})
        if text:
            out.append(text_part(text))
        for call_id, name, pieces in self._calls.values():
            out.append(tool_call_part(call_id, name, "".join(pieces)))
        return [{"role": "assistant", "parts": out, "finish_reason": finish_reason(reason)}]
