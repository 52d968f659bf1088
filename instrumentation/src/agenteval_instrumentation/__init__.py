"""Decorators that record an agent's model calls, tool calls and retrievals as OpenTelemetry spans.

Depends on ``opentelemetry-api`` only: nothing is recorded until the application installs a
TracerProvider (agenteval's ``setup_tracing`` or any other).
"""

from . import attributes
from ._steps import error_type
from ._wrap import record_error
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
from .version import __version__

__all__ = [
    "CaptureConfig",
    "ContextThreadPoolExecutor",
    "__version__",
    "agent",
    "attributes",
    "configure_capture",
    "error_type",
    "llm_call",
    "record_error",
    "retriever",
    "set_llm_response",
    "set_retrieved_documents",
    "submit_with_context",
    "tool",
    "use_tool_call_id",
    "with_current_context",
]
