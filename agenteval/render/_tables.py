"""Rendering query results for people and for other programs."""

from __future__ import annotations

import csv
import datetime
import decimal
import io
import json
import math
from collections.abc import Iterable, Iterator
from typing import TYPE_CHECKING, Any

from ..errors import UsageError
from ._text_safety import markdown_cell, visible

if TYPE_CHECKING:  # a table to render comes with pyarrow loaded; `agenteval --help` needs neither
    import pyarrow as pa

FORMATS = ("table", "csv", "json", "markdown")


def _number(value: decimal.Decimal) -> int | float:
    """A DECIMAL or HUGEINT (any sum() of integers) as a JSON number: exact when whole, else a float."""
    return int(value) if value == value.to_integral_value() else float(value)


def _cell(value: Any, *, exact: bool = False) -> str:
    """``value`` as text; ``exact`` (CSV, read by programs) keeps every digit of a float, where people read six."""
    if value is None:
        return ""
    if isinstance(value, decimal.Decimal):
        return format(value, "f")  # the exact digits, never an exponent
    if isinstance(value, float):
        return repr(value) if exact else f"{value:.6g}"
    if isinstance(value, datetime.datetime):
        return value.isoformat()
    return str(value)


class _Jsonable:
    """Values made JSON's, counting the numbers JSON cannot hold that were written as null."""

    def __init__(self) -> None:
        self.non_finite = 0

    def __call__(self, value: Any) -> Any:
        if isinstance(value, float) and not math.isfinite(value):
            self.non_finite += 1
            return None  # JSON has no NaN or Infinity: strict parsers (jq, JSON.parse) refuse the whole document
        if isinstance(value, decimal.Decimal) and value.is_finite():
            return _number(value)
        if isinstance(value, (datetime.datetime, datetime.date)):
            return value.isoformat()
        if isinstance(value, bytes):
            return value.hex()
        if isinstance(value, dict):
            return {k: self(v) for k, v in value.items()}
        if isinstance(value, list):
            return [self(v) for v in value]
        return value


def _json_row(jsonable: _Jsonable, row: dict[str, Any], replaced: dict[str, int]) -> dict[str, Any]:
    """``row`` made JSON's; ``replaced`` gains per column how many NaN or infinite numbers (nested ones too) were
    written as null: JSON has none, and a strict parser refuses a document with them, so no value may be changed
    without the user being told (:func:`json_note`)."""
    out = {}
    for name, value in row.items():
        before = jsonable.non_finite
        out[name] = jsonable(value)
        if jsonable.non_finite != before:
            replaced[name] = replaced.get(name, 0) + jsonable.non_finite - before
    return out


def json_note(replaced: dict[str, int]) -> str | None:
    """What :func:`json_pieces` wrote as null, for stderr; None when nothing."""
    if not replaced:
        return None
    columns = ", ".join(f"{visible(name)} ({n})" for name, n in replaced.items())
    total = sum(replaced.values())
    return (
        f"note: JSON has no NaN or infinity: {total} such value{'s' if total != 1 else ''} written as null, in "
        f"column{'s' if len(replaced) != 1 else ''} {columns}; --format csv keeps them (nan, inf, -inf)"
    )


def to_rows(table: pa.Table | pa.RecordBatch) -> list[dict[str, Any]]:
    """Rows as dicts; nanosecond timestamps become microsecond datetimes (Python has no finer)."""
    import pyarrow as pa

    for i, field in enumerate(table.schema):
        if pa.types.is_timestamp(field.type) and field.type.unit == "ns":
            us = pa.timestamp("us", tz=field.type.tz)
            table = table.set_column(i, field.name, table.column(i).cast(us, safe=False))
    return table.to_pylist()


def csv_pieces(names: list[str], batches: Iterable[pa.Table | pa.RecordBatch]) -> Iterator[str]:
    """CSV of ``batches``' rows under a header of ``names``, one piece per batch (a file written as its rows come):
    a newline between rows, none after the last; every digit of a float."""
    out = io.StringIO()
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(names)
    yield out.getvalue()[:-1]
    for batch in batches:
        out.seek(0)
        out.truncate()
        writer.writerows([_cell(row[n], exact=True) for n in names] for row in to_rows(batch))
        if out.tell():
            yield "\n" + out.getvalue()[:-1]  # the newline after the previous row, none after this batch's last


def json_pieces(batches: Iterable[pa.Table | pa.RecordBatch], replaced: dict[str, int] | None = None) -> Iterator[str]:
    """A JSON list of ``batches``' rows as objects, one piece per batch; joined, the text ``json.dumps`` gives the
    whole list with ``indent=2`` (a row's own lines indented once more: none is inside a string, escaped there).
    ``replaced`` gains per column how many NaN or infinite numbers were written as null."""
    jsonable, counts = _Jsonable(), {} if replaced is None else replaced
    first = True
    for batch in batches:
        rows = [
            json.dumps(_json_row(jsonable, row, counts), indent=2, default=str, allow_nan=False)
            for row in to_rows(batch)
        ]
        if rows:
            yield ("[\n  " if first else ",\n  ") + ",\n  ".join(row.replace("\n", "\n  ") for row in rows)
            first = False
    yield "[]" if first else "\n]"


TABLE_ROWS = 1_000
"""The most rows the ``table`` format draws: rich lays out every cell, and a result of millions of rows (``SELECT *
FROM spans``) printed nothing for minutes. The other formats, for files and programs, give every row."""


def render(table: pa.Table, fmt: str = "table") -> str:
    """``table`` as ``table`` (aligned text; its first :data:`TABLE_ROWS` rows, and how many there are), ``csv``,
    ``json`` (a list of objects) or ``markdown``."""
    return render_noted(table, fmt)[0]


def render_noted(table: pa.Table, fmt: str = "table") -> tuple[str, list[str]]:
    """:func:`render`, and what the rendering could not keep as it was, to tell the user (on stderr)."""
    if fmt == "json":
        replaced: dict[str, int] = {}
        text = "".join(json_pieces([table], replaced))
        note = json_note(replaced)
        return text, [note] if note else []
    return _rendered(table, fmt), []


def rendered_pieces(
    names: list[str], batches: Iterable[pa.Table | pa.RecordBatch], fmt: str, notes: list[str]
) -> Iterator[str]:
    """What :func:`render` gives of ``batches``' rows, in pieces as they come: ``csv``, ``json`` and ``markdown``
    hold one batch at a time, ``table`` its first :data:`TABLE_ROWS` rows (it lays them out together), counting
    the rest. ``notes`` gains what the rendering could not keep as it was (:func:`json_note`)."""
    if fmt == "csv":
        yield from csv_pieces(names, batches)
    elif fmt == "json":
        replaced: dict[str, int] = {}
        yield from json_pieces(batches, replaced)
        note = json_note(replaced)
        notes.extend([note] if note else [])
    elif fmt == "markdown":
        yield from markdown_pieces(names, ([_cell(row[n]) for n in names] for b in batches for row in to_rows(b)))
    elif fmt == "table":
        shown: list[list[str]] = []
        total = 0
        for batch in batches:
            wanted = batch.slice(0, max(0, TABLE_ROWS - len(shown)))
            shown += [[_cell(row[n]) for n in names] for row in to_rows(wanted)]
            total += batch.num_rows
        yield rich_table_text(names, shown, total=total)
    else:
        raise UsageError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")


def _rendered(table: pa.Table, fmt: str) -> str:
    if fmt == "table" and table.num_rows > TABLE_ROWS:
        names = table.column_names
        shown = [[_cell(row[n]) for n in names] for row in to_rows(table.slice(0, TABLE_ROWS))]
        return rich_table_text(names, shown, total=table.num_rows)
    names = table.column_names
    if fmt == "csv":
        return "".join(csv_pieces(names, [table]))
    rows = to_rows(table)
    if fmt == "markdown":
        return markdown_table(names, [[_cell(row[n]) for n in names] for row in rows])
    if fmt == "table":
        return rich_table_text(names, [[_cell(row[n]) for n in names] for row in rows])
    raise UsageError(f"unknown format {fmt!r}; choose one of {', '.join(FORMATS)}")


def markdown_table(names: list[str], rows: list[list[str]]) -> str:
    """A GitHub-flavoured markdown table whose cells read literally and stay one row each (see text_safety)."""
    return "".join(markdown_pieces(names, rows))


def markdown_pieces(names: list[str], rows: Iterable[list[str]]) -> Iterator[str]:
    """:func:`markdown_table` in pieces: its header, then a row at a time."""
    header = "| " + " | ".join(markdown_cell(n) for n in names) + " |" if any(names) else "|" + " |" * len(names)
    yield header + "\n|" + "---|" * len(names)
    for row in rows:
        yield "\n| " + " | ".join(markdown_cell(cell) for cell in row) + " |"


def rich_table(names: list[str], rows: list[list[str]], title: str | None = None) -> Any:
    """A rich table whose cells are plain text, never parsed as markup (they hold agents' replies), with
    control and bidirectional characters shown as escapes; a newline stays a line break within its cell.

    Its columns are fitted to the width it is drawn at (:class:`_FittedTable`): rich narrows the widest columns
    first and breaks words to do it, so at 80 columns (a CI log, a pipe) ``answer_match`` read ``answer_ma`` over
    ``tch`` while shorter columns kept room to spare."""
    return _FittedTable(
        [visible(name) for name in names],
        [[visible(cell, newlines=True) for cell in row] for row in rows],
        None if title is None else visible(title),
    )


class _FittedTable:
    """A table drawn at the width it is given: where every column can show its longest word whole, no word is
    broken (columns narrower than a common level keep their full width, wider ones wrap at spaces down to it)."""

    def __init__(self, names: list[str], rows: list[list[str]], title: str | None) -> None:
        self.names, self.rows, self.title = names, rows, title

    def __rich_console__(self, console: Any, options: Any) -> Any:
        yield self._table(options.max_width)

    def __rich_measure__(self, console: Any, options: Any) -> Any:
        return self._table(options.max_width).__rich_measure__(console, options)

    def _table(self, max_width: int) -> Any:
        from rich.table import Table
        from rich.text import Text

        table = Table(title=None if self.title is None else Text(self.title))
        fitted = _fitted_widths(self.names, self.rows, max_width - _FRAME_PER_COLUMN * len(self.names) - 1)
        widths: list[int | None] = [None] * len(self.names) if fitted is None else list(fitted)
        for name, width in zip(self.names, widths, strict=True):
            table.add_column(Text(name), overflow="fold", width=width)
        for row in self.rows:
            table.add_row(*(Text(cell) for cell in row))
        return table


_FRAME_PER_COLUMN = 3
"""What a column of a rich table takes beside its text: a space either side and the line to its right."""


def _cell_width(text: str) -> int:
    from rich.cells import cell_len

    return max((cell_len(line) for line in text.split("\n")), default=0)


def _longest_word(text: str) -> int:
    from rich.cells import cell_len

    return max((cell_len(word) for word in text.split()), default=0)


def _fitted_widths(names: list[str], rows: list[list[str]], room: int) -> list[int] | None:
    """The columns' text widths within ``room``: each column's full width up to a common level, and no column
    below its longest word; None when the table fits as it is (rich draws it so) or when even the longest words
    do not fit (rich must break words anyway)."""
    columns = list(zip(names, *rows, strict=True))
    full = [max(_cell_width(cell) for cell in column) or 1 for column in columns]
    if sum(full) <= room:
        return None
    least = [max(_longest_word(cell) for cell in column) or 1 for column in columns]
    if sum(least) > room:
        return None
    level = _highest_level(full, least, room)
    return [min(f, max(m, level)) for f, m in zip(full, least, strict=True)]


def _highest_level(full: list[int], least: list[int], room: int) -> int:
    """The highest width every column may take (none below its longest word, none above its full width) that
    keeps the columns within ``room``: found by halving, as the total only grows with the level."""
    low, high = 0, max(full)
    while low < high:
        level = (low + high + 1) // 2
        if sum(min(f, max(m, level)) for f, m in zip(full, least, strict=True)) <= room:
            low = level
        else:
            high = level - 1
    return low


def rich_table_text(names: list[str], rows: list[list[str]], total: int | None = None) -> str:
    """``rows`` drawn as a table, then how many there are; ``total``: how many the result had, when ``rows`` are
    only its first."""
    if total is not None and total > len(rows):
        count = f"{len(rows):,} of {total:,} rows shown: --format csv or json gives them all"
    else:
        count = f"{len(rows)} row{'s' if len(rows) != 1 else ''}"
    return plain_text(rich_table(names, rows), width=200).rstrip("\n") + "\n" + count


def plain_text(renderable: Any, width: int = 120) -> str:
    """What a terminal ``width`` columns wide shows of ``renderable`` (rich tables), as plain text: no colours or
    styles, for a file or a pipe."""
    from rich.console import Console

    console = Console(width=width, file=io.StringIO(), color_system=None, force_terminal=False, highlight=False)
    console.print(renderable)
    return console.file.getvalue()  # type: ignore[attr-defined]
