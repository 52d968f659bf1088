"""Where a run's Arrow buffers come from: the C library's allocator, which DuckDB and Python use too.

pyarrow's default pool (mimalloc) keeps what it freed for itself: a 2,000-case run of the mock agent peaked
about 30 MB higher on it than on the system allocator, where the pages Arrow frees after encoding a micro-batch
serve DuckDB's scoring and Python's objects next.

Two levels: pyarrow's Python calls take the pool :func:`pyarrow.set_memory_pool` names, which a run switches for
its duration (:func:`arrow_on_system_allocator`); Arrow's C++ parts (the Parquet writer's pages and compressors)
take the process's default, read from ``ARROW_DEFAULT_MEMORY_POOL`` when pyarrow is imported, which only a process
of our own can choose (:func:`system_allocator_for_this_process`, for ``agenteval run``).
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator
from typing import Any

from ._while_runs import WhileAnyRun

CHOSEN = "ARROW_DEFAULT_MEMORY_POOL"
"""pyarrow's own variable: when it is set (by the user, or by our command), its pool stays the run's."""

_previous: Any = None


def system_allocator_for_this_process() -> None:
    """Make the system allocator Arrow's default for the whole process, unless pyarrow is loaded already (its
    default is then fixed) or the variable says otherwise. Processes the run starts inherit it."""
    if "pyarrow" not in sys.modules:
        os.environ.setdefault(CHOSEN, "system")


def _to_system_allocator() -> None:
    global _previous
    import pyarrow as pa

    _previous = pa.default_memory_pool()
    pa.set_memory_pool(pa.system_memory_pool())


def _back_to_previous() -> None:
    global _previous
    import pyarrow as pa

    pa.set_memory_pool(_previous)
    _previous = None


_while_runs = WhileAnyRun(_to_system_allocator, _back_to_previous)


@contextlib.contextmanager
def arrow_on_system_allocator() -> Iterator[None]:
    """For the run's duration (runs at once in one process counted), pyarrow's pool is the system allocator;
    the pool before is put back after the last run. Buffers remember their pool, so one made before or
    during the run is freed where it came from."""
    if os.environ.get(CHOSEN):
        yield
        return
    with _while_runs():
        yield
