"""The Anthropic Messages API through the official ``anthropic`` SDK."""

from __future__ import annotations

import functools
import inspect
import json
from collections.abc import Callable
from typing import Any

from agenteval_instrumentation.responses import input_tokens, token_count

from ._request import Message, ModelRequest
from ._types import CONTENT_FILTER, LENGTH, OTHER, STOP, TOOL_CALLS, ToolRequest, Usage, arguments_text

NAME = "anthropic"
DEFAULT_MAX_TOKENS = 1024
"""The Messages API requires ``max_tokens``; this is used when none is given."""
FINISH = {
    "end_turn": STOP,
    "stop_sequence": STOP,
    "max_tokens": LENGTH,
    "model_context_window_exceeded": LENGTH,
    "tool_use": TOOL_CALLS,
    "refusal": CONTENT_FILTER,
}


def client(sdk: Any, base_url: str | None, query: dict[str, str], api_key: str, timeout: float) -> Any:
    # Retries are agenteval's own; and the SDK's own spans (in SDKs that make them) are off: the call is already
    # one @llm_call span, and usage must be counted once per request.
    options: dict[str, Any] = {"open_telemetry": False} if _makes_spans(sdk) else {}
    if query:
        options["default_query"] = query
    return sdk.AsyncAnthropic(api_key=api_key, base_url=base_url, max_retries=0, timeout=timeout, **options)


def _makes_spans(sdk: Any) -> bool:
    return "open_telemetry" in inspect.signature(sdk.AsyncAnthropic.__init__).parameters


def _input(arguments: str) -> Any:
    try:
        return json.loads(arguments or "{}")
    except json.JSONDecodeError:
        return {}


def _content(message: Message) -> list[dict[str, Any]]:
    """A message of the OpenAI chat shape as Anthropic content blocks."""
    blocks: list[dict[str, Any]] = []
    content = message.get("content")
    if message.get("role") == "tool":
        text = content if isinstance(content, str) else json.dumps(content)
        return [{"type": "tool_result", "tool_use_id": message.get("tool_call_id", ""), "content": text}]
    if isinstance(content, str) and content:
        blocks.append({"type": "text", "text": content})
    elif isinstance(content, list):
        blocks.extend(content)
    for call in message.get("tool_calls") or []:
        function = call.get("function", {})
        blocks.append(
            {
                "type": "tool_use",
                "id": call.get("id", ""),
                "name": function.get("name", ""),
                "input": _input(function.get("arguments", "")),
            }
        )
    return blocks


def conversation(messages: list[Message]) -> tuple[str | None, list[dict[str, Any]]]:
    """The system text apart, and the turns with tool results as user turns and same-role turns merged."""
    system = [m["content"] for m in messages if m.get("role") in ("system", "developer") and m.get("content")]
    turns: list[dict[str, Any]] = []
    for message in messages:
        role = message.get("role")
        if role in ("system", "developer"):
            continue
        role = "assistant" if role == "assistant" else "user"
        blocks = _content(message)
        if not blocks:
            continue
        if turns and turns[-1]["role"] == role:
            turns[-1]["content"].extend(blocks)
        else:
            turns.append({"role": role, "content": blocks})
    return ("\n\n".join(system) if system else None), turns


def _tool_choice(choice: str | None) -> dict[str, Any] | None:
    if choice in (None, "none"):
        return None
    if choice == "auto":
        return {"type": "auto"}
    if choice == "required":
        return {"type": "any"}
    return {"type": "tool", "name": choice}


def arguments(request: ModelRequest) -> dict[str, Any]:
    system, turns = conversation(request.messages)
    kwargs: dict[str, Any] = {
        "model": request.model,
        "messages": turns,
        "max_tokens": request.max_tokens or DEFAULT_MAX_TOKENS,
        **request.params,
    }
    if system:
        kwargs["system"] = system
    if request.tools and request.tool_choice != "none":
        kwargs["tools"] = [
            {
                "name": t["name"],
                "description": t.get("description", ""),
                "input_schema": t.get("parameters", {"type": "object"}),
            }
            for t in request.tools
        ]
        choice = _tool_choice(request.tool_choice)
        if choice is not None:
            kwargs["tool_choice"] = choice
    if request.temperature is not None:
        kwargs["temperature"] = request.temperature
    return kwargs


@functools.cache
def _accepted(create: Any) -> frozenset[str]:
    return frozenset(inspect.signature(create).parameters)


def _fitted(api: Any, kwargs: dict[str, Any]) -> dict[str, Any]:
    """``kwargs`` as this SDK's ``messages.create`` takes them: newer SDKs dropped sampling parameters (the
    models they serve take none), so a ``temperature`` they do not know is left out; any other parameter they
    do not name goes in the request body as it is."""
    accepted = _accepted(type(api.messages).create)
    fitted = {k: v for k, v in kwargs.items() if k in accepted}
    extra = {k: v for k, v in kwargs.items() if k not in accepted and k not in SAMPLING}
    if extra:
        fitted["extra_body"] = {**fitted.get("extra_body", {}), **extra}
    return fitted


SAMPLING = frozenset({"temperature", "top_p", "top_k"})


async def send(api: Any, request: ModelRequest, heard: Callable[[], None]) -> Any:
    """The SDK's ``Message`` (streamed: the SDK's own final message, folded from the events, or None when the stream
    held no event; ``heard`` is called on each event, which its ``ping`` keep-alives are not)."""
    kwargs = _fitted(api, arguments(request))
    if not request.stream:
        return await api.messages.create(**kwargs)
    async with api.messages.stream(**kwargs) as stream:
        events = 0
        async for _ in stream:
            heard()
            events += 1
        # A body that ended inside its first event (or held none) leaves the SDK no message to fold, and it asserts
        # on it: no answer, which the caller reads as a stream that ended early.
        return await stream.get_final_message() if events else None


def finished(raw: Any) -> bool:
    return getattr(raw, "stop_reason", None) is not None


def read(raw: Any) -> dict[str, Any]:
    texts, calls = [], []
    # A string would read as blocks of no type, and null (or no content) as the model's empty reply: the API always
    # sends a list, empty when the model said nothing.
    if not isinstance(raw.content, list):
        raise TypeError(f"the message's content is {type(raw.content).__name__}, not a list of blocks")
    for block in raw.content:
        kind = getattr(block, "type", None)
        if not isinstance(kind, str):
            raise TypeError("a content block has no type")
        if kind == "text":
            texts.append(block.text)
        elif kind == "tool_use":
            calls.append(ToolRequest(block.id, block.name, arguments_text(block.input)))
    usage = raw.usage
    return {
        "text": "".join(texts),
        "tool_calls": tuple(calls),
        "finish_reason": FINISH.get(raw.stop_reason or "", OTHER),
        "provider_finish_reason": raw.stop_reason,
        "usage": Usage(input_tokens(usage), token_count(usage.output_tokens)) if usage is not None else Usage(),
        "model": raw.model,
        "response_id": raw.id,
    }


def revive(sdk: Any, data: dict[str, Any]) -> Any:
    return sdk.types.Message.model_validate(data)
