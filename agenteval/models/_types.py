"""What a model call returns, the same for every provider: text, tool calls, why it stopped, usage, and how it went
(waits on rate limits, retries, a cache hit)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

STOP = "stop"
LENGTH = "length"
TOOL_CALLS = "tool_calls"
CONTENT_FILTER = "content_filter"
OTHER = "other"
FINISH_REASONS = (STOP, LENGTH, TOOL_CALLS, CONTENT_FILTER, OTHER)
"""Finish reasons in one vocabulary: OpenAI's words; Anthropic's ``end_turn``/``stop_sequence`` are ``stop``,
``max_tokens`` is ``length``, ``tool_use`` is ``tool_calls``, ``refusal`` is ``content_filter``."""

RATE_LIMIT = "rate_limit"
LIMITER = "limiter"
SERVER_ERROR = "server_error"
CONNECTION = "connection"
WAIT_REASONS = (RATE_LIMIT, LIMITER, SERVER_ERROR, CONNECTION)
"""Why a call waited: a 429 (``rate_limit``), a place under the shared per-model limiter (``limiter``), or a
retry after a 5xx/529 (``server_error``) or a failed connection (``connection``)."""


@dataclasses.dataclass(frozen=True)
class ToolRequest:
    """A tool call the model asked for: its id, the tool's name and the arguments as the model wrote them."""

    id: str
    name: str
    arguments: str
    """JSON text, possibly malformed: the model wrote it."""

    def parsed(self) -> Any:
        """The arguments decoded; raises ``ValueError`` when they are not JSON."""
        return json.loads(self.arguments or "{}")


def arguments_text(given: Any) -> str:
    """A tool call's arguments as JSON text: a string as the model wrote it; the arguments as decoded JSON (an
    Anthropic ``tool_use`` input, or an object some OpenAI-compatible servers send in place of the string) written
    back as JSON text, so anything but an object is refused by the tool's schema as the model's error."""
    return given if isinstance(given, str) else json.dumps(given)


@dataclasses.dataclass(frozen=True)
class Usage:
    input_tokens: int | None = None
    output_tokens: int | None = None


@dataclasses.dataclass(frozen=True)
class Wait:
    """One wait of a call: how long, why, and whether the provider said how long (``Retry-After``)."""

    seconds: float
    reason: str
    status: int | None = None
    retry_after: bool = False


@dataclasses.dataclass(frozen=True)
class ModelResponse:
    """One model call's answer, the same for every provider; ``raw`` is the SDK's own response object."""

    text: str
    tool_calls: tuple[ToolRequest, ...]
    finish_reason: str
    """One of :data:`FINISH_REASONS`."""
    provider_finish_reason: str | None
    usage: Usage
    model: str | None
    response_id: str | None
    cache_hit: bool = False
    waits: tuple[Wait, ...] = ()
    retries: int = 0
    """Requests sent again after a 429, a 5xx or a failed connection."""
    raw: Any = dataclasses.field(default=None, repr=False, compare=False)

    @property
    def waited_seconds(self) -> float:
        return sum(w.seconds for w in self.waits)
