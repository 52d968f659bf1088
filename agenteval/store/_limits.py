"""How much memory a statement of people's own may take (``agenteval sql``, the dashboard's SQL page and downloads).

DuckDB's ``memory_limit`` bounds what it counts: sorts, joins, aggregates (``string_agg``, ``list``), results it
holds. It does not count a value an expression builds (``repeat('x', 2000000000)`` made 2 GB past a limit of
100 MB), nor what Python makes of a result. A command that runs one statement and exits (``agenteval sql``) caps
its own process too, with the operating system's limit on its data (``RLIMIT_DATA``), so such a statement fails
with :class:`StatementOutOfMemory` rather than being killed by the OOM killer. A long-lived server cannot cap
itself that way: DuckDB's allocator keeps the address space of what it freed, so the process's data grows past
what it holds (2.2 GB after one statement whose memory, 65 MB resident, was freed). The dashboard runs each
statement in a worker process it caps this way instead (:mod:`agenteval.dashboard._sql_pool`).
"""

from __future__ import annotations

import contextlib
import re
from collections.abc import Iterator

from ..errors import AgentevalError

DEFAULT_MEMORY_LIMIT = 4 * 10**9
"""Bytes a statement of people's own may use by default: DuckDB's memory for it, and (``agenteval sql``) what its
process may grow by."""

SERVER_MEMORY_LIMIT = 10**9
"""The default for a statement of the dashboard's SQL page or downloads (``--sql-memory-limit``): a server several
people use runs several at once."""

SERVER_STATEMENTS = 2
"""How many statements of the dashboard's SQL page or downloads may run at once by default (``--sql-workers``):
each in a worker process of its own, so together they may take this many times ``--sql-memory-limit``."""

UNITS = {
    "": 1,
    "b": 1,
    **{f"{p}b": 1000**n for n, p in enumerate("kmgt", 1)},
    **{f"{p}ib": 1024**n for n, p in enumerate("kmgt", 1)},
}
"""The units of a size, as DuckDB's ``memory_limit`` takes them (KB is 1000 bytes, KiB 1024)."""

SIZE = re.compile(r"\s*(\d+(?:\.\d+)?)\s*([a-z]*)\s*", re.IGNORECASE | re.ASCII)  # ASCII: \d is 0-9, not also ٣


class StatementOutOfMemory(AgentevalError, MemoryError):
    """A statement needed more memory than its limit allows; it was stopped, and nothing else was."""


def parse_size(text: str) -> int:
    """Bytes of a size such as ``4GB``, ``500MB`` or ``1.5GiB``; ``ValueError`` naming the units otherwise."""
    found = SIZE.fullmatch(text)
    unit = found.group(2).lower() if found else None
    if found is None or unit not in UNITS or float(found.group(1)) * UNITS[unit] < 1:
        raise ValueError(f"{text!r} is not a size: write a number and a unit, such as 500MB or 4GB")
    return int(float(found.group(1)) * UNITS[unit])


def shown_size(size: int) -> str:
    """``size`` bytes as a user would write it (``4GB``, ``100MB``, ``1.5GB``)."""
    for unit in ("TB", "GB", "MB", "KB"):
        scale = UNITS[unit.lower()]
        if size >= scale:
            return f"{size / scale:.3g}{unit}"
    return f"{size}B"


def out_of_memory(limit: int, option: str) -> StatementOutOfMemory:
    """The error of a statement that needed more than ``limit`` bytes, naming the ``option`` that raises it."""
    return StatementOutOfMemory(
        f"the statement needed more memory than the {shown_size(limit)} a statement may use ({option}), and was "
        f"stopped: narrow it (a WHERE, a LIMIT, fewer or shorter values), or raise {option}"
    )


def is_out_of_memory(error: BaseException) -> bool:
    """``error`` says memory ran out: DuckDB's own error, Python's, or DuckDB's as Arrow's reader passes it on."""
    import duckdb

    if isinstance(error, (duckdb.OutOfMemoryException, MemoryError)):
        return True
    # Under the process's cap DuckDB can run out while it formats its own error: an internal error then, which
    # names the C++ allocation failure beneath it (seen with a cross join's string_agg at a cap of 100 MB).
    if isinstance(error, duckdb.Error) and "std::bad_alloc" in str(error):
        return True
    # Under the cap a thread's stack is data too: Python cannot start the thread of a statement's time limit.
    if isinstance(error, RuntimeError) and "can't start new thread" in str(error):
        return True
    return isinstance(error, OSError) and str(error).startswith("Out of Memory Error")


@contextlib.contextmanager
def memory_errors_named(limit: int, option: str) -> Iterator[None]:
    """Memory running out inside, whether DuckDB or Python found it, becomes :class:`StatementOutOfMemory`, naming
    the ``limit`` and the ``option`` that raises it."""
    try:
        yield
    except Exception as exc:  # MemoryError, duckdb.Error, OSError: imported only once needed (the CLI imports this)
        if is_out_of_memory(exc):
            raise out_of_memory(limit, option) from None
        raise


@contextlib.contextmanager
def process_memory_capped(limit: int, option: str) -> Iterator[None]:
    """While inside, this process may grow by at most ``limit`` bytes of data (its heap and private mappings, as
    the OS counts them), and memory running out is :class:`StatementOutOfMemory` (:func:`memory_errors_named`).
    Only for a process that runs one statement: the cap is the whole process's, its threads' too. The previous
    limit is restored on leaving."""
    import resource  # here: the command line imports this module for its defaults

    before = resource.getrlimit(resource.RLIMIT_DATA)
    used = data_bytes()
    if used is not None:  # elsewhere than Linux: DuckDB's limit alone
        cap = used + limit if before[1] == resource.RLIM_INFINITY else min(used + limit, before[1])
        resource.setrlimit(resource.RLIMIT_DATA, (cap, before[1]))
    try:
        with memory_errors_named(limit, option):
            yield
    finally:
        resource.setrlimit(resource.RLIMIT_DATA, before)


def data_bytes() -> int | None:
    """This process's data as Linux counts it against ``RLIMIT_DATA`` (``VmData``); None elsewhere."""
    try:
        with open("/proc/self/status") as status_file:
            status = status_file.read()
    except OSError:
        return None
    found = re.search(r"^VmData:\s*(\d+) kB", status, re.MULTILINE)
    return int(found.group(1)) * 1024 if found else None
