"""Rows missing a value their table requires, refused before they reach a file.

Which columns are required is read off the table's Arrow schema (``nullable=False``), by the one check the span
exporter uses too (:mod:`agenteval_exporters.required`), so a column made required there is checked here with no
other change. The check runs before anything is buffered or published: a null in
a required column used to fail only when its file was written, taking the rows written before it in that file
down with it, or, for a span of no experiment without a start time, surfaced as pyarrow's own error.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from agenteval_exporters.required import first_missing

from ..errors import AgentevalError
from . import _schemas

if TYPE_CHECKING:
    import pyarrow as pa


class MissingRequiredValue(AgentevalError, ValueError):
    """A row given to the store lacks a value its table requires (a span's ``start_time``, a trial's ``case_id``);
    the message names the row, counted from 0 in what was given, and the column."""


def check_required(table: str, rows: pa.RecordBatch | pa.Table) -> None:
    """Raise :class:`MissingRequiredValue` for the first row of ``rows`` with a null in a column ``table``'s schema
    requires (:func:`agenteval_exporters.required.first_missing`). Costs one null count per required column when
    nothing is missing."""
    missing = first_missing(_schemas.TABLES[table], rows)
    if missing is None:
        return
    name, row = missing
    if row is None:
        raise MissingRequiredValue(
            f"{table} rows have no {name} column, and every {table} row needs a value there; "
            f"build them with the {table} schema. Nothing of these rows was written; rows given earlier are kept"
        )
    raise MissingRequiredValue(
        f"{table} row {row}: {name} is missing, and every {table} row needs one; "
        "give it a value and write the rows again. Nothing of these rows was written; rows given earlier "
        "are kept"
    )
