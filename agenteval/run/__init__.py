"""Running an agent over a dataset: trials, their spans and failures, the experiment's record.

The runner brings in DuckDB, pyarrow and the OpenTelemetry SDK, so its names are imported on first use
and ``import agenteval.run`` stays light for code that only raises the agent-side failures.
"""

from typing import TYPE_CHECKING, Any

from ._failures import FAILURE_TYPES, Failure, InvalidModelOutput, MaxStepsExceeded, ProviderError
from ._failures import register as register_matcher
from ._options import RunOptions

if TYPE_CHECKING:
    from ._runner import RunRefused, evaluate, evaluate_async

_LAZY = {"RunRefused", "evaluate", "evaluate_async"}


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        from . import _runner

        return getattr(_runner, name)
    raise AttributeError(f"module 'agenteval.run' has no attribute {name!r}")


__all__ = [
    "FAILURE_TYPES",
    "Failure",
    "InvalidModelOutput",
    "MaxStepsExceeded",
    "ProviderError",
    "RunOptions",
    "RunRefused",
    "evaluate",
    "evaluate_async",
    "register_matcher",
]
