"""agenteval: OpenTelemetry-native tracing and evaluation for AI agents."""

from typing import TYPE_CHECKING

from agenteval_instrumentation._lazy import lazy_exports

if TYPE_CHECKING:
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
    from .run import InvalidModelOutput, MaxStepsExceeded, evaluate, evaluate_async

__version__ = "0.1.0"

# Imported on first use: the decorators bring in the OpenTelemetry API and the runner DuckDB, pyarrow and the
# SDK, none of which `agenteval --help` needs.
__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "agenteval_instrumentation": (
            "ContextThreadPoolExecutor",
            "agent",
            "configure_capture",
            "llm_call",
            "retriever",
            "set_llm_response",
            "set_retrieved_documents",
            "submit_with_context",
            "tool",
            "use_tool_call_id",
            "with_current_context",
        ),
        ".dataset": ("Case", "Dataset", "DatasetError", "load_dataset", "sample_cases"),
        ".run": ("InvalidModelOutput", "MaxStepsExceeded", "evaluate", "evaluate_async"),
    },
)
__all__ += ["__version__"]
