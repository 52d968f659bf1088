"""Rows lacking a value their schema requires (a field declared ``nullable=False``), found before they reach a file.

Left to the Parquet writer, one such row fails its whole file ("declared non-nullable but contains nulls"), and
every retry of that file, with every row later buffered for the same partition. The store's writes refuse a batch
holding one (``agenteval.store.MissingRequiredValue``); the span exporter leaves out that span alone. Both use
:func:`first_missing`, so a column made required in the schema is checked everywhere with no other change.
"""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import pyarrow as pa


@functools.cache
def required_columns(schema: pa.Schema) -> tuple[str, ...]:
    """The columns of ``schema`` declared ``nullable=False``, in schema order."""
    return tuple(field.name for field in schema if not field.nullable)


def first_missing(schema: pa.Schema, rows: pa.RecordBatch | pa.Table) -> tuple[str, int | None] | None:
    """The first required column of ``schema`` that ``rows`` lack (row None) or hold a null in (the first such row,
    counted from 0); None when every row has every required value. One null count per column when none is missing."""
    for name in required_columns(schema):
        if rows.schema.get_field_index(name) < 0:
            return name, None
        column = rows.column(name)
        if column.null_count:
            import pyarrow.compute as pc

            return name, int(pc.index(pc.is_null(column), True).as_py())
    return None


def without_missing(schema: pa.Schema, batch: pa.RecordBatch) -> tuple[pa.RecordBatch, int]:
    """``batch`` less its rows lacking a value ``schema`` requires, and how many were left out."""
    if first_missing(schema, batch) is None:
        return batch, 0
    import pyarrow.compute as pc

    keep = None
    for name in required_columns(schema):
        valid = pc.is_valid(batch.column(name))
        keep = valid if keep is None else pc.and_(keep, valid)
    kept = batch.filter(keep)
    return kept, batch.num_rows - kept.num_rows
