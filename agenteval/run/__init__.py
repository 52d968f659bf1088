"""Running an agent over a dataset: trials, their spans and failures, the experiment's record.

The runner brings in DuckDB, pyarrow and the OpenTelemetry SDK, so its names are imported on first use
and ``import agenteval.run`` stays light for code that only raises the agent-side failures.
"""

from typing import TYPE_CHECKING

from agenteval_instrumentation._lazy import lazy_exports

if TYPE_CHECKING:
    from ._failures import FAILURE_TYPES, Failure, InvalidModelOutput, MaxStepsExceeded, ProviderError
    from ._failures import register as register_matcher
    from ._options import RunOptions
    from ._runner import RunRefused, evaluate, evaluate_async

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "._failures": (
            "FAILURE_TYPES",
            "Failure",
            "InvalidModelOutput",
            "MaxStepsExceeded",
            "ProviderError",
            "register_matcher=register",
        ),
        "._options": ("RunOptions",),
        "._runner": ("RunRefused", "evaluate", "evaluate_async"),
    },
)
