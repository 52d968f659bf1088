"""The SQL page: one read-only statement over the store, and what of its first rows a page shows.

A result is untrusted twice over: its statement comes from whoever has the page, its values from agents' replies and
stored spans. So the rows read are bounded (:data:`SQL_ROWS_SHOWN`), the statement's time is bounded
(``--sql-timeout``) and so is its memory (:data:`MEMORY_OPTION`; the server runs it in a worker process capped at
that, :mod:`._sql_pool`), every cell shows at most :data:`SQL_CELL_CHARS`
characters with a count of the rest, and the page stops at about :data:`SQL_PAGE_CHARS` characters of cells. Long
values are cut by DuckDB, in the statement the page runs, and rows are read a few at a time: a result of huge values
costs the server a page's memory, not the values'. The whole values stay reachable as the result's downloads
(:mod:`._sql_download`).
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Iterator, Sequence
from typing import Any

import duckdb
import pyarrow as pa

from ..errors import AgentevalError
from ..render._text_safety import html_text
from ..store._kept_connection import KeptConnection
from ..store._limits import memory_errors_named
from ..store._store import check_read_only

SQL_ROWS_SHOWN = 1000
"""Rows of a result read and shown; the downloads and ``agenteval sql`` give them all."""

SQL_SECONDS = 30.0
"""How long a statement of the SQL page, or a download of its result, may run before it is stopped
(``agenteval dashboard --sql-timeout``)."""

SQL_CELL_CHARS = 500
"""Characters of a cell (or a column's name) the page shows before it cuts the rest and says how many."""

SQL_PAGE_CHARS = 2_000_000
"""About how many characters of cells a page holds, counted as sent (escapes and tags included): past it, the
page shows no more columns or rows and says how many it left out."""

MEMORY_OPTION = "--sql-memory-limit"
"""The dashboard's option for the memory of a statement of its SQL page or downloads (DuckDB's ``memory_limit``)."""

BATCH_ROWS = 100
"""Rows read from DuckDB at a time, by the page and by the downloads."""

WHOLE_CHARS = 4 * SQL_CELL_CHARS
"""A value of a type without a fixed size (text, lists, structs, blobs, ...) is read as it is when its text is at
most this long, and shown as Python shows it, as a download's CSV does; a longer one is read as its first
:data:`SQL_CELL_CHARS` characters of DuckDB's text, and its length."""

FIXED_SIZE_TYPES = frozenset(
    {
        "null",
        "boolean",
        *("tinyint", "smallint", "integer", "bigint", "hugeint"),
        *("utinyint", "usmallint", "uinteger", "ubigint", "uhugeint"),
        *("float", "double", "decimal", "uuid", "interval"),
        *("date", "time", "time_ns", "time with time zone"),
        *("timestamp", "timestamp_s", "timestamp_ms", "timestamp_ns", "timestamp with time zone"),
    }
)
"""DuckDB's type ids (``DuckDBPyType.id``) whose values are always short: read as they are. Any other type, one
of tomorrow's too, is cut by DuckDB."""

_CELL_TAGS = len("<td></td>") + len('<span class="cut"></span>')
"""What a cell's markup adds to its text, counted so that a result of many empty cells is bounded too."""


class SqlTimeout(AgentevalError, TimeoutError):
    """A statement of the SQL page ran past its time limit and was stopped."""


class SqlFailed(AgentevalError):
    """A statement of the SQL page failed: DuckDB's error (a syntax error, a cast, ``error()``, a file that
    vanished), as its worker process reported it, or one while its rows were read."""


def timed_out(seconds: float) -> SqlTimeout:
    """The error of a statement stopped after ``seconds``."""
    return SqlTimeout(
        f"the statement ran longer than {seconds:g} s and was stopped: narrow it (a WHERE, a LIMIT), "
        "raise --sql-timeout, or run it with `agenteval sql`"
    )


@contextlib.contextmanager
def time_limited(con: duckdb.DuckDBPyConnection, seconds: float) -> Iterator[None]:
    """Statements on ``con`` inside are interrupted once ``seconds`` have passed (:class:`SqlTimeout`): a request
    never holds the server's threads and cores for good, nor its shutdown. DuckDB's errors while rows are read
    (which Arrow's reader gives as ``OSError``) become :class:`SqlFailed`."""
    stopped = threading.Event()

    def stop() -> None:
        stopped.set()
        con.interrupt()  # between two reads of a stream too: the next one fails

    timer = threading.Timer(seconds, stop)
    timer.daemon = True
    timer.start()
    try:
        yield
    except (duckdb.Error, OSError) as exc:
        if stopped.is_set():
            raise timed_out(seconds) from None
        if isinstance(exc, duckdb.Error):
            raise
        raise SqlFailed(str(exc).splitlines()[0]) from None
    finally:
        timer.cancel()


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
    """More rows than :data:`SQL_ROWS_SHOWN` were found (none of them read)."""

    @property
    def cut_cells(self) -> bool:
        return any(cell.left_out for cell in self.columns) or any(c.left_out for row in self.rows for c in row)


def run_sql(connection: KeptConnection, sql: str, seconds: float = SQL_SECONDS) -> ShownResult:
    """One read-only statement, by the same rule as ``agenteval sql`` (a locked connection; anything but a single
    read is refused with :class:`agenteval.store.NotReadOnly`), as its page shows it: each cell cut to
    :data:`SQL_CELL_CHARS` characters, then columns and rows taken in order while the page stays under
    :data:`SQL_PAGE_CHARS` (a row is shown whole or not at all), of the first :data:`SQL_ROWS_SHOWN` rows. The
    result is read as a stream, :data:`BATCH_ROWS` rows at a time, and left once one more row than it shows came.
    A statement still running after ``seconds`` is interrupted (:class:`SqlTimeout`); one needing more than the
    connection's ``memory_limit`` bytes of DuckDB's memory is stopped
    (:class:`agenteval.store._limits.StatementOutOfMemory`)."""

    def read(con: duckdb.DuckDBPyConnection) -> ShownResult:
        check_read_only(con, sql)  # plans the statement, runs none of it
        with time_limited(con, seconds), memory_errors_named(connection.memory_limit, MEMORY_OPTION):
            return _read_page(con, sql)

    # Retried as Store.query is when a compaction replaced files under the statement.
    return connection.run(read)


@dataclasses.dataclass(frozen=True)
class _Column:
    """How the page reads column ``index`` of a result: as it is (a type of fixed size), or through DuckDB's cut."""

    index: int
    whole: bool

    def read(self) -> list[str]:
        """What the page's statement selects for this column (its columns are named ``c0``, ``c1``, ...)."""
        value = f"c{self.index}"
        if self.whole:
            return [value]
        text = f"CAST({value} AS VARCHAR)"
        whole_if_short = f"CASE WHEN length({text}) <= {WHOLE_CHARS} THEN {value} END"
        return [whole_if_short, f"left({text}, {SQL_CELL_CHARS})", f"length({text})"]

    def cell(self, values: Sequence[Any]) -> Cell:
        """The cell of what :meth:`read` selected (its values, in order)."""
        if self.whole:
            return Cell.of(values[0])
        value, start, length = values
        if length is None or length <= WHOLE_CHARS:
            return Cell.of(value)
        return Cell(start, length - SQL_CELL_CHARS)


def _read_page(con: duckdb.DuckDBPyConnection, sql: str) -> ShownResult:
    (statement,) = con.extract_statements(sql)
    room = SQL_PAGE_CHARS
    if statement.type == duckdb.StatementType.EXPLAIN:  # a plan: short, and cannot be a subquery
        reader = con.sql(sql).to_arrow_reader(BATCH_ROWS)
        names = reader.schema.names
    else:
        relation = con.sql(sql)  # bound, not run
        names = relation.columns
    columns: list[Cell] = []
    for name in names:
        cell = Cell.of(name)
        if cell.size > room:
            break
        room -= cell.size
        columns.append(cell)
    if statement.type == duckdb.StatementType.EXPLAIN:
        recipes = [_Column(i, whole=True) for i in range(len(columns))]
    else:
        recipes = [_Column(i, whole=kind.id in FIXED_SIZE_TYPES) for i, kind in enumerate(relation.types)]
        recipes = recipes[: len(columns)]
        cut = _cut_statement(sql, len(names), recipes)
        check_read_only(con, cut)  # what runs is held to the rule too, not only what was given
        reader = con.sql(cut).to_arrow_reader(BATCH_ROWS)
    rows: list[list[Cell]] = []
    found, full = 0, False
    with contextlib.closing(reader):
        for batch in reader:
            wanted = batch.slice(0, max(0, SQL_ROWS_SHOWN - found))
            found += batch.num_rows
            for row in [] if full else _rows(wanted, recipes):
                size = sum(cell.size for cell in row)
                if size > room:
                    full = True
                    break
                room -= size
                rows.append(row)
            if found > SQL_ROWS_SHOWN:
                break
    return ShownResult(
        columns,
        rows,
        columns_left_out=len(names) - len(columns),
        rows_left_out=min(found, SQL_ROWS_SHOWN) - len(rows),
        more_rows=found > SQL_ROWS_SHOWN,
    )


def _cut_statement(sql: str, width: int, recipes: list[_Column]) -> str:
    """``sql`` as a subquery whose ``width`` columns are named ``c0``, ``c1``, ... (names may repeat in a result),
    and what ``recipes`` read of them."""
    selected = [expression for recipe in recipes for expression in recipe.read()] or ["NULL"]
    names = ", ".join(f"c{i}" for i in range(width))
    return f"SELECT {', '.join(selected)} FROM (\n{_without_end(sql)}\n) AS q({names})"


def _without_end(sql: str) -> str:
    """``sql`` without the semicolons and comments it ends with, which a subquery cannot hold. DuckDB's tokenizer
    finds them (outside strings and quoted names); its positions count bytes."""
    text = sql.encode()
    end = len(text)
    for position, kind in reversed(duckdb.tokenize(sql)):
        if kind != duckdb.token_type.comment and text[position:end].strip() != b";":
            break
        end = position
    return text[:end].decode()


def _rows(batch: pa.RecordBatch, recipes: list[_Column]) -> Iterator[list[Cell]]:
    values = [column.to_pylist() for column in batch.columns]
    for row in zip(*values, strict=True) if values else ():
        cells, at = [], 0
        for recipe in recipes:
            used = 1 if recipe.whole else 3
            cells.append(recipe.cell(row[at : at + used]))
            at += used
        yield cells
