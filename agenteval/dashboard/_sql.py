"""The SQL page: one read-only statement over the store, its first rows, and what of them a page shows.

A result is untrusted twice over: its statement comes from whoever has the page, its values from agents' replies
and stored spans. So the rows fetched are bounded (:data:`SQL_ROWS_SHOWN`), the statement's time is bounded
(``--sql-timeout``), every cell shows at most :data:`SQL_CELL_CHARS` characters with a count of the rest, and the
page stops at about :data:`SQL_PAGE_CHARS` characters of cells. The whole values stay reachable as the result's
CSV and JSON downloads, in the formats of ``agenteval sql --format csv|json``.
"""

from __future__ import annotations

import dataclasses
import threading
from typing import Any

import duckdb
import pyarrow as pa

from ..errors import AgentevalError
from ..render._text_safety import html_text
from ..store import Store
from ..store._store import check_read_only

SQL_ROWS_SHOWN = 1000
"""Rows of a result fetched, shown and downloaded; ``agenteval sql`` gives them all."""

SQL_SECONDS = 30.0
"""How long a statement of the SQL page may run before it is stopped (``agenteval dashboard --sql-timeout``)."""

SQL_CELL_CHARS = 500
"""Characters of a cell (or a column's name) the page shows before it cuts the rest and says how many."""

SQL_PAGE_CHARS = 2_000_000
"""About how many characters of cells a page holds, counted as sent (escapes and tags included): past it, the
page shows no more columns or rows and says how many it left out."""

_CELL_TAGS = len("<td></td>") + len('<span class="cut"></span>')
"""What a cell's markup adds to its text, counted so that a result of many empty cells is bounded too."""


class SqlTimeout(AgentevalError, TimeoutError):
    """A statement of the SQL page ran past its time limit and was stopped."""


@dataclasses.dataclass(frozen=True)
class SqlResult:
    """The first :data:`SQL_ROWS_SHOWN` rows of a statement's result, values whole; ``truncated``: more were found."""

    table: pa.Table
    truncated: bool

    @property
    def columns(self) -> list[str]:
        return list(self.table.column_names)

    def rows(self) -> list[tuple[Any, ...]]:
        data = [column.to_pylist() for column in self.table.columns]
        return list(zip(*data, strict=True)) if data else []


def run_sql(store: Store, sql: str, seconds: float = SQL_SECONDS) -> SqlResult:
    """One read-only statement, by the same rule as ``agenteval sql`` (a locked connection; anything but a single
    read is refused with :class:`agenteval.store.NotReadOnly`). Only the rows shown are fetched: the result is
    read as a stream and left once one more than :data:`SQL_ROWS_SHOWN` rows came. A statement still running after
    ``seconds`` is interrupted (:class:`SqlTimeout`): a page request never holds the server's threads and cores
    for good, nor its shutdown."""

    def read(con: duckdb.DuckDBPyConnection) -> SqlResult:
        check_read_only(con, sql)  # plans the statement, runs none of it
        timer = threading.Timer(seconds, con.interrupt)
        timer.daemon = True
        timer.start()
        try:
            reader = con.sql(sql).to_arrow_reader(SQL_ROWS_SHOWN + 1)
            batches, count = [], 0
            try:
                for batch in reader:
                    batches.append(batch)
                    count += batch.num_rows
                    if count > SQL_ROWS_SHOWN:
                        break
            finally:
                reader.close()
        except duckdb.InterruptException:
            raise SqlTimeout(
                f"the statement ran longer than {seconds:g} s and was stopped: narrow it (a WHERE, a LIMIT), "
                "or run it with `agenteval sql`"
            ) from None
        finally:
            timer.cancel()
        shown = pa.Table.from_batches(batches, schema=reader.schema).slice(0, SQL_ROWS_SHOWN)
        return SqlResult(shown, count > SQL_ROWS_SHOWN)

    # Retried as Store.query is when a compaction replaced files under the statement.
    return store._on_connection(read, read_only=True)


@dataclasses.dataclass(frozen=True)
class Cell:
    """What a page shows of one value: its first characters, and how many it left out."""

    text: str
    left_out: int = 0

    @classmethod
    def of(cls, value: Any) -> Cell:
        text = "" if value is None else str(value)
        if len(text) <= SQL_CELL_CHARS:
            return cls(text)
        return cls(text[:SQL_CELL_CHARS], len(text) - SQL_CELL_CHARS)

    @property
    def size(self) -> int:
        """Characters this cell adds to the page: its text as escaped (a ``<`` is four), the marker, the tags."""
        return len(html_text(self.text)) + len(f"{self.left_out:,}") + _CELL_TAGS


@dataclasses.dataclass(frozen=True)
class ShownResult:
    """A result as its page shows it: cells cut, columns and rows up to the page's size."""

    columns: list[Cell]
    rows: list[list[Cell]]
    columns_left_out: int
    rows_left_out: int
    more_rows: bool
    """More rows than :data:`SQL_ROWS_SHOWN` were found (none of them fetched)."""

    @property
    def cut_cells(self) -> bool:
        return any(cell.left_out for cell in self.columns) or any(c.left_out for row in self.rows for c in row)


def shown(result: SqlResult) -> ShownResult:
    """``result`` cut for its page: each cell to :data:`SQL_CELL_CHARS` characters, then columns and rows taken in
    order while the page stays under :data:`SQL_PAGE_CHARS` (a row is shown whole or not at all)."""
    room = SQL_PAGE_CHARS
    columns: list[Cell] = []
    for name in result.columns:
        cell = Cell.of(name)
        if cell.size > room:
            break
        room -= cell.size
        columns.append(cell)
    rows: list[list[Cell]] = []
    every_row = result.rows()
    for values in every_row:
        row = [Cell.of(value) for value in values[: len(columns)]]
        size = sum(cell.size for cell in row)
        if size > room:
            break
        room -= size
        rows.append(row)
    return ShownResult(
        columns,
        rows,
        columns_left_out=len(result.columns) - len(columns),
        rows_left_out=len(every_row) - len(rows),
        more_rows=result.truncated,
    )
