"""Decorators that record an agent's model calls, tool calls and retrievals as OpenTelemetry spans.

Depends on ``opentelemetry-api`` only: nothing is recorded until the application installs a
TracerProvider (agenteval's ``setup_tracing`` or any other).
"""

from typing import TYPE_CHECKING

from . import attributes
from ._lazy import lazy_exports
from .version import __version__

if TYPE_CHECKING:
    from ._recording import record_error
    from ._steps import error_type
    from .capture import CaptureConfig, configure_capture
    from .context import ContextThreadPoolExecutor, submit_with_context, with_current_context
    from .decorators import (
        agent,
        llm_call,
        retriever,
        set_llm_response,
        set_retrieved_documents,
        tool,
        use_tool_call_id,
    )

# Imported on first use: agenteval's own modules take text helpers and attribute names from here without
# loading the OpenTelemetry API; an application pays for it when it first touches a decorator.
__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "._steps": ("error_type",),
        "._recording": ("record_error",),
        ".capture": ("CaptureConfig", "configure_capture"),
        ".context": ("ContextThreadPoolExecutor", "submit_with_context", "with_current_context"),
        ".decorators": (
            "agent",
            "llm_call",
            "retriever",
            "set_llm_response",
            "set_retrieved_documents",
            "tool",
            "use_tool_call_id",
        ),
    },
)
__all__ += ["__version__", "attributes"]
