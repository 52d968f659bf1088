"""agenteval: OpenTelemetry-native tracing and evaluation for AI agents."""

from agenteval_instrumentation import (
    ContextThreadPoolExecutor,
    agent,
    configure_capture,
    llm_call,
    retriever,
    set_llm_response,
    set_retrieved_documents,
    submit_with_context,
    tool,
    use_tool_call_id,
    with_current_context,
)

from .dataset import Case, Dataset, DatasetError, load_dataset, sample_cases
from .run import InvalidModelOutput, MaxStepsExceeded

__version__ = "0.1.0"


def __getattr__(name: str) -> object:
    # The runner pulls in DuckDB, pyarrow and the OTel SDK: imported on first use, not with the package.
    if name in ("evaluate", "evaluate_async"):
        from . import run

        return getattr(run, name)
    raise AttributeError(f"module 'agenteval' has no attribute {name!r}")


__all__ = [
    "Case",
    "ContextThreadPoolExecutor",
    "Dataset",
    "DatasetError",
    "InvalidModelOutput",
    "MaxStepsExceeded",
    "__version__",
    "agent",
    "configure_capture",
    "evaluate",
    "evaluate_async",
    "llm_call",
    "load_dataset",
    "retriever",
    "sample_cases",
    "set_llm_response",
    "set_retrieved_documents",
    "submit_with_context",
    "tool",
    "use_tool_call_id",
    "with_current_context",
]
