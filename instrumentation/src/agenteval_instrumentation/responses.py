"""Reading model, usage, finish reasons and text out of model responses.

Understands OpenAI (chat completions and responses) and Anthropic (messages) shapes, as SDK
objects or as plain dicts, and their streamed chunks. Anything else yields an empty
:class:`ResponseInfo`; callers then use :func:`agenteval_instrumentation.set_llm_response`.
"""

from __future__ import annotations

import dataclasses
from typing import Any


@dataclasses.dataclass
class ResponseInfo:
    """What could be read from one response (or the chunks of one stream)."""

    model: str | None = None
    response_id: str | None = None
    input_tokens: int | None = None
    output_tokens: int | None = None
    finish_reasons: list[str] = dataclasses.field(default_factory=list)
    text: str | None = None


def _get(obj: Any, name: str) -> Any:
    if isinstance(obj, dict):
        return obj.get(name)
    return getattr(obj, name, None)


MAX_TOKEN_COUNT = 2**63 - 1
"""The largest count a span's integer attribute (and the store's int64 column) holds."""


def token_count(value: Any) -> int | None:
    """``value`` as a token count, or None (unknown) when it cannot be one: not an int, below zero, or past
    int64. A server reporting -12 tokens would otherwise lower a trial's tokens and cost, and the run's totals."""
    if isinstance(value, int) and not isinstance(value, bool) and 0 <= value <= MAX_TOKEN_COUNT:
        return value
    return None


ANTHROPIC_CACHE_TOKENS = ("cache_read_input_tokens", "cache_creation_input_tokens")
"""Anthropic counts the prompt's tokens read from or written to its prompt cache apart from ``input_tokens``
(OpenAI's ``prompt_tokens`` and the Responses API's ``input_tokens`` include their cached tokens)."""


def input_tokens(usage: Any) -> int | None:
    """All the prompt's tokens of a usage object that says ``input_tokens``: Anthropic's cached ones included."""
    found = token_count(_get(usage, "input_tokens"))
    if found is None:
        return None
    return token_count(found + sum(token_count(_get(usage, name)) or 0 for name in ANTHROPIC_CACHE_TOKENS))


def read_response(value: Any) -> ResponseInfo:
    """Everything :class:`ResponseInfo` holds that ``value`` carries; never raises."""
    info = ResponseInfo()
    if value is None or isinstance(value, (str, bytes, int, float, list, tuple)):
        return info
    try:
        _read_into(info, value)
    except Exception:  # an odd object must never break the call
        pass
    return info


def _read_into(info: ResponseInfo, value: Any) -> None:
    model = _get(value, "model")
    info.model = model if isinstance(model, str) else None
    response_id = _get(value, "id")
    info.response_id = response_id if isinstance(response_id, str) else None
    usage = _get(value, "usage")
    if usage is not None:
        info.input_tokens = token_count(_get(usage, "prompt_tokens"))
        if info.input_tokens is None:
            info.input_tokens = input_tokens(usage)
        info.output_tokens = token_count(_get(usage, "completion_tokens"))
        if info.output_tokens is None:
            info.output_tokens = token_count(_get(usage, "output_tokens"))
    choices = _get(value, "choices")
    if isinstance(choices, (list, tuple)) and choices:  # OpenAI chat completions
        info.finish_reasons = [str(r) for c in choices if (r := _get(c, "finish_reason")) is not None]
        message = _get(choices[0], "message")
        content = _get(message, "content") if message is not None else None
        info.text = content if isinstance(content, str) else None
        return
    stop_reason = _get(value, "stop_reason")  # Anthropic messages
    if isinstance(stop_reason, str):
        info.finish_reasons = [stop_reason]
    content = _get(value, "content")
    if isinstance(content, str):
        info.text = content
    elif isinstance(content, (list, tuple)):
        texts = [t for block in content if isinstance(t := _get(block, "text"), str)]
        info.text = "".join(texts) if texts else None
    output_text = _get(value, "output_text")  # OpenAI responses
    if info.text is None and isinstance(output_text, str):
        info.text = output_text


def reply_text(result: Any) -> str | None:
    """The text of an agent's reply: a string, or the ``content`` of a dict or object (:func:`content_text`), or the
    text of an OpenAI response returned whole (:func:`_openai_text`)."""
    if isinstance(result, str):
        return result
    content = result.get("content") if isinstance(result, dict) else getattr(result, "content", None)
    if content is not None:
        return content_text(content)
    return _openai_text(result)


def _openai_text(result: Any) -> str | None:
    """The text of an OpenAI chat completion (its first choice's message) or Responses API response
    (``output_text``), as an SDK object or a dict: ``""`` when it has none (a completion that only calls tools);
    None when ``result`` is neither. An agent that returns the response itself, not its text, means its text: its
    repr holds ids, token counts and tool arguments that a scorer could take for the answer."""
    try:
        choices = _get(result, "choices")
        if isinstance(choices, (list, tuple)) and choices:
            message = _get(choices[0], "message")
            return (content_text(_get(message, "content")) if message is not None else None) or ""
        output_text = _get(result, "output_text")
        return output_text if isinstance(output_text, str) else None
    except Exception:  # an odd object (a property that raises) is no OpenAI response
        return None


def content_text(content: Any) -> str | None:
    """A message's content as text: a string, or the text parts of a list joined (an Anthropic message's blocks,
    OpenAI-compatible content parts); None for anything else."""
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        parts = (part if isinstance(part, str) else _get(part, "text") for part in content)
        return "".join(part for part in parts if isinstance(part, str))
    return None


def chunk_text(chunk: Any) -> str | None:
    """The text a streamed chunk adds: a plain string, an OpenAI delta or an Anthropic text delta."""
    if isinstance(chunk, str):
        return chunk
    try:
        choices = _get(chunk, "choices")
        if isinstance(choices, (list, tuple)) and choices:
            delta = _get(choices[0], "delta")
            text = _get(delta, "content") if delta is not None else None
            return text if isinstance(text, str) else None
        delta = _get(chunk, "delta")
        text = _get(delta, "text") if delta is not None else None
        return text if isinstance(text, str) else None
    except Exception:
        return None


def read_chunk_into(info: ResponseInfo, chunk: Any) -> None:
    """Fold what a streamed chunk says about model, usage and finish reasons into ``info``."""
    if chunk is None or isinstance(chunk, (str, bytes)):
        return
    part = read_response(chunk)
    message = _get(chunk, "message")  # Anthropic message_start carries the model and input usage
    if message is not None and not isinstance(message, str):
        start = read_response(message)
        part.model = part.model or start.model
        part.response_id = part.response_id or start.response_id
        part.input_tokens = part.input_tokens if part.input_tokens is not None else start.input_tokens
    delta = _get(chunk, "delta")  # Anthropic message_delta carries the stop reason
    stop = _get(delta, "stop_reason") if delta is not None and not isinstance(delta, str) else None
    if isinstance(stop, str):
        part.finish_reasons = [stop]
    info.model = part.model or info.model
    info.response_id = part.response_id or info.response_id
    if part.input_tokens is not None:
        info.input_tokens = part.input_tokens
    if part.output_tokens is not None:
        info.output_tokens = part.output_tokens
    if part.finish_reasons:
        info.finish_reasons = part.finish_reasons
