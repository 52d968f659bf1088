"""The OpenAI chat-completions API through the official ``openai`` SDK (also any OpenAI-compatible server)."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from agenteval_instrumentation.responses import content_text, token_count

from ._request import ModelRequest
from ._types import CONTENT_FILTER, LENGTH, OTHER, STOP, TOOL_CALLS, ToolRequest, Usage, arguments_text

NAME = "openai"
FINISH = {"stop": STOP, "length": LENGTH, "tool_calls": TOOL_CALLS, "function_call": TOOL_CALLS}
FINISH_CONTENT_FILTER = "content_filter"


def client(sdk: Any, base_url: str | None, query: dict[str, str], api_key: str, timeout: float) -> Any:
    # Retries are agenteval's own (recorded on the span), never the SDK's as well.
    return sdk.AsyncOpenAI(
        api_key=api_key, base_url=base_url, default_query=query or None, max_retries=0, timeout=timeout
    )


def _tool(schema: dict[str, Any]) -> dict[str, Any]:
    return {
        "type": "function",
        "function": {
            "name": schema["name"],
            "description": schema.get("description", ""),
            "parameters": schema.get("parameters", {"type": "object", "properties": {}}),
        },
    }


def _tool_choice(choice: str | None) -> Any:
    if choice in (None, "auto", "none", "required"):
        return choice
    return {"type": "function", "function": {"name": choice}}


def arguments(request: ModelRequest) -> dict[str, Any]:
    kwargs: dict[str, Any] = {"model": request.model, "messages": request.messages, **request.params}
    if request.tools:
        kwargs["tools"] = [_tool(t) for t in request.tools]
        if request.tool_choice is not None:
            kwargs["tool_choice"] = _tool_choice(request.tool_choice)
    if request.temperature is not None:
        kwargs["temperature"] = request.temperature
    if request.max_tokens is not None:
        kwargs["max_tokens"] = request.max_tokens
    return kwargs


async def send(api: Any, request: ModelRequest, heard: Callable[[], None]) -> Any:
    """The SDK's ``ChatCompletion`` (streamed: the SDK's own final completion, folded from the chunks, or None when
    the stream held no chunk; ``heard`` is called on each of the stream's events)."""
    kwargs = arguments(request)
    if not request.stream:
        return await api.chat.completions.create(**kwargs)
    async with api.chat.completions.stream(**kwargs, stream_options={"include_usage": True}) as stream:
        events = 0
        async for _ in stream:
            heard()
            events += 1
        # A body that ended inside its first event (or held none) leaves the SDK no message to fold, and it asserts
        # on it: no answer, which the caller reads as a stream that ended early.
        return await stream.get_final_completion() if events else None


def finished(raw: Any) -> bool:
    """Whether a (streamed) response said why it stopped: a stream cut short never does."""
    choices = getattr(raw, "choices", None) or []
    return bool(choices) and choices[0].finish_reason is not None


def _message(choice: Any) -> Any:
    """The choice's message; raises ``TypeError`` when it is missing or its content is neither text nor content
    parts (a broken gateway's ``"message": null``): that answer holds no reply, which is not the model's empty one."""
    message = choice.message
    if message is None:
        raise TypeError("the choice holds no message")
    content = message.content
    if content is not None and not isinstance(content, (str, list)):
        raise TypeError(f"the message's content is {type(content).__name__}, neither text nor content parts")
    return message


def _tool_calls(message: Any) -> tuple[ToolRequest, ...]:
    """The message's function calls; raises ``TypeError`` when they are not a list of calls, or a function call
    holds no function (``"function": null``): dropped, they would leave the model's calls unanswered."""
    given = message.tool_calls
    if given is None:
        return ()
    if not isinstance(given, list):
        raise TypeError(f"the message's tool_calls are {type(given).__name__}, not a list of calls")
    calls = []
    for call in given:
        function = getattr(call, "function", None)
        if function is None:
            if getattr(call, "type", None) in (None, "function"):
                raise TypeError("a tool call holds no function")
            continue  # a call of another kind (a custom tool's), which the agent offers none of
        arguments = function.arguments  # a string in OpenAI's API; an object from some compatible servers
        calls.append(ToolRequest(call.id or "", function.name or "", arguments_text(arguments) if arguments else ""))
    return tuple(calls)


def read(raw: Any) -> dict[str, Any]:
    choice = raw.choices[0] if raw.choices else None
    message = _message(choice) if choice is not None else None
    reason = choice.finish_reason if choice is not None else None
    usage = raw.usage
    return {
        # OpenAI sends a string; some compatible servers a list of content parts, whose text is joined.
        "text": (content_text(message.content) if message is not None else None) or "",
        "tool_calls": _tool_calls(message) if message is not None else (),
        "finish_reason": CONTENT_FILTER if reason == FINISH_CONTENT_FILTER else FINISH.get(reason or "", OTHER),
        "provider_finish_reason": reason,
        "usage": Usage(token_count(usage.prompt_tokens), token_count(usage.completion_tokens))
        if usage is not None
        else Usage(),
        "model": raw.model,
        "response_id": raw.id,
    }


def revive(sdk: Any, data: dict[str, Any]) -> Any:
    """A cached response as the SDK's object again."""
    return sdk.types.chat.ChatCompletion.model_validate(data)
