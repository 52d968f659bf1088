"""Where rows go: the store folder, and the partition (folder) of each row of a table.

Apart from the exporter so that readers of a store (reports, queries) get these without the OpenTelemetry SDK.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

import pyarrow as pa

from .files import partition_path
from .schema import PARTITION_COLUMN
from .storefs import StoreRoot, as_root

ENV_STORE = "AGENTEVAL_STORE"
DEFAULT_STORE = ".agenteval"


def store_path(store: str | os.PathLike[str] | StoreRoot | None = None) -> StoreRoot:
    """The store: the argument, else ``AGENTEVAL_STORE``, else ``./.agenteval``; a folder, or an object-storage
    prefix for a URL (``s3://bucket/prefix``, see :mod:`.storefs`)."""
    return as_root(store if store is not None else os.environ.get(ENV_STORE) or DEFAULT_STORE)


def partition_by_experiment(batch: pa.RecordBatch) -> Iterable[tuple[str, pa.RecordBatch]]:
    """``experiment_id=<id>`` per experiment among the rows that have one (nulls are left out)."""
    import pyarrow.compute as pc  # here: a reader of the store needs the store path, not the compute kernels

    ids = batch.column(PARTITION_COLUMN)
    # In Python rather than pc.unique, which releases the GIL (see encode's _gil_held note).
    values = ids.to_pylist()
    if values and values[0] is not None and values.count(values[0]) == len(values):
        yield partition_path(PARTITION_COLUMN, values[0]), batch  # the usual case: one experiment, no filtering
        return
    for value in dict.fromkeys(v for v in values if v is not None):
        yield partition_path(PARTITION_COLUMN, value), batch.filter(pc.equal(ids, value))


def partition_spans(batch: pa.RecordBatch) -> Iterable[tuple[str, pa.RecordBatch]]:
    """``experiment_id=<id>`` for spans of an experiment, ``date=YYYY-MM-DD`` (UTC start) for others."""
    import pyarrow.compute as pc

    yield from partition_by_experiment(batch)
    ids = batch.column(PARTITION_COLUMN)
    if ids.null_count:
        rest = batch.filter(pc.is_null(ids))
        days = pc.cast(rest.column("start_time"), pa.date32())
        for day in pc.unique(days).to_pylist():
            yield partition_path("date", day.isoformat()), rest.filter(pc.equal(days, pa.scalar(day, pa.date32())))
