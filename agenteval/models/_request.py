"""A model request in one shape for every provider: messages in the OpenAI chat shape, tools as JSON schemas,
and the sampling parameters; each provider's adapter turns it into its SDK's call."""

from __future__ import annotations

import dataclasses
from typing import Any

Message = dict[str, Any]
"""``{"role": "system"|"user"|"assistant"|"tool", "content": ...}``; an assistant message may carry ``tool_calls``
(``[{"id", "type": "function", "function": {"name", "arguments"}}]``), a tool message its ``tool_call_id``."""


@dataclasses.dataclass(frozen=True)
class ModelRequest:
    model: str
    messages: list[Message]
    tools: list[dict[str, Any]] | None = None
    """``[{"name", "description", "parameters"}]``, as :func:`agenteval.tools.tool_schema` gives them."""
    tool_choice: str | None = None
    """None or ``auto``: the model chooses; ``required``: some tool; any other text: that tool."""
    temperature: float | None = None
    max_tokens: int | None = None
    stream: bool = False
    params: dict[str, Any] = dataclasses.field(default_factory=dict)
    """Further parameters passed to the SDK as they are (``top_p``, ``seed``, ...)."""

    def cache_fields(self) -> dict[str, Any]:
        """Everything that decides the answer (streaming does not)."""
        return {
            "model": self.model,
            "messages": self.messages,
            "tools": self.tools,
            "tool_choice": self.tool_choice,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "params": self.params,
        }
