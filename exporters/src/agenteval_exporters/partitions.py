"""Where rows go: the store folder, and the partition (folder) of each row of a table.

Apart from the exporter so that readers of a store (reports, queries) get these without the OpenTelemetry SDK.
"""

from __future__ import annotations

import datetime
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING

from .files import partition_path
from .schema import PARTITION_COLUMN
from .storefs import StoreRoot, as_root

if TYPE_CHECKING:
    import pyarrow as pa

ENV_STORE = "AGENTEVAL_STORE"
DEFAULT_STORE = ".agenteval"


def store_path(store: str | os.PathLike[str] | StoreRoot | None = None) -> StoreRoot:
    """The store: the argument, else ``AGENTEVAL_STORE``, else ``./.agenteval``; a folder, or an object-storage
    prefix for a URL (``s3://bucket/prefix``, see :mod:`.storefs`)."""
    return as_root(store if store is not None else os.environ.get(ENV_STORE) or DEFAULT_STORE)


def partition_by_experiment(batch: pa.RecordBatch) -> Iterable[tuple[str, pa.RecordBatch]]:
    """``experiment_id=<id>`` per experiment among the rows that have one (nulls are left out)."""
    ids = batch.column(PARTITION_COLUMN)
    # In Python rather than pc.unique, which releases the GIL (see encode's _gil_held note).
    values = ids.to_pylist()
    if values and values[0] is not None and values.count(values[0]) == len(values):
        yield partition_path(PARTITION_COLUMN, values[0]), batch  # the usual case: one experiment, no filtering
        return
    # Only here, for rows of several experiments: a run writes one, and need not load compute's 8 MB.
    import pyarrow.compute as pc

    for value in dict.fromkeys(v for v in values if v is not None):
        yield partition_path(PARTITION_COLUMN, value), batch.filter(pc.equal(ids, value))


DATE_KEY = "date"
SERVICE_KEY = "service"
UNKNOWN_SERVICE = "unknown_service"
"""The folder of spans whose resource names no ``service.name`` (OpenTelemetry's own default for a missing name)."""


def production_partition(day: datetime.date | str, service: str | None) -> str:
    """``date=YYYY-MM-DD/service=NAME``: where production spans (no experiment) of one UTC day and one
    service go, and their scores. Retention (``agenteval prune``) removes whole ``date=`` folders."""
    text = day if isinstance(day, str) else day.isoformat()
    return f"{partition_path(DATE_KEY, text)}/{partition_path(SERVICE_KEY, service or UNKNOWN_SERVICE)}"


def partition_spans(batch: pa.RecordBatch) -> Iterable[tuple[str, pa.RecordBatch]]:
    """``experiment_id=<id>`` for spans of an experiment; ``date=YYYY-MM-DD/service=NAME`` (UTC start, the
    resource's ``service.name``) for others: production traces."""
    yield from partition_by_experiment(batch)
    ids = batch.column(PARTITION_COLUMN)
    if not ids.null_count:
        return
    # Imported for production spans only: a run's spans all have an experiment (see partition_by_experiment).
    import numpy
    import pyarrow as pa
    import pyarrow.compute as pc

    rest = batch if ids.null_count == batch.num_rows else batch.filter(pc.is_null(ids))
    # numpy and Python lists rather than compute kernels, which release the GIL (see encode's _gil_held note).
    days = rest.column("start_time").to_numpy().astype("datetime64[D]")
    services = rest.column("service_name").to_pylist()
    first_day, first_service = days[0], services[0]
    if (days == first_day).all() and services.count(first_service) == len(services):  # the usual case
        yield production_partition(first_day.item(), first_service), rest
        return
    for service in dict.fromkeys(services):
        of_service = numpy.array([value == service for value in services], dtype=bool)
        for day in numpy.unique(days[of_service]):
            mask = of_service & (days == day)
            yield production_partition(day.item(), service), rest.filter(pa.array(mask, pa.bool_()))
