"""The SQL page's result as a file (``/sql.csv``, ``/sql.json``): every row, read and sent a batch at a time.

A download is the SQL page's statement without the page's cuts, so it keeps the page's other rules: the same
locked connection and read-only check, and the same time limit, over the whole download (a statement of endless
rows is stopped as the page's is). Stopped or failed half way, the response ends without its last chunk, so the
client sees a broken transfer rather than a short file that looks whole.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
from collections.abc import Iterator

import pyarrow as pa
from starlette.responses import StreamingResponse
from starlette.types import Send

from ..errors import AgentevalError
from ..render._tables import csv_pieces, json_pieces
from ..render._text_safety import visible
from ..store import Store
from ..store._store import check_read_only
from ._sql import BATCH_ROWS, time_limited

MEDIA_TYPES = {"csv": "text/csv; charset=utf-8", "json": "application/json"}
"""The formats of a download, those of ``agenteval sql --format csv|json``, and their media types."""


def result_file(store: Store, sql: str, fmt: str, seconds: float) -> Iterator[str]:
    """The result of ``sql`` as a ``fmt`` file, in pieces. The statement is checked and started before this
    returns, so a refused or broken statement raises here (:class:`agenteval.store.NotReadOnly`,
    ``duckdb.Error``), not half way through a response; ``seconds`` bounds it from now to its last row."""
    pieces = _pieces(store, sql, fmt, seconds)
    started = next(pieces)
    return itertools.chain([started], pieces)


def _pieces(store: Store, sql: str, fmt: str, seconds: float) -> Iterator[str]:
    con = store.connect(read_only=True)
    try:
        check_read_only(con, sql)  # plans the statement, runs none of it
        with time_limited(con, seconds):

            def start() -> pa.RecordBatchReader:
                return con.sql(sql).to_arrow_reader(BATCH_ROWS)

            # Retried as Store.query is when a compaction replaced files under the statement; once rows are
            # sent it cannot be.
            with contextlib.closing(store.retry_on(con, start)) as reader:
                yield ""
                if fmt == "csv":
                    yield from csv_pieces(reader.schema.names, reader)
                else:
                    yield from json_pieces(reader)
    finally:
        con.close()


class ResultFile(StreamingResponse):
    """A download of :func:`result_file`'s pieces. Stopped or failed half way (:class:`._sql.SqlTimeout`,
    :class:`._sql.SqlFailed`), it ends without its last chunk, and the server's log says why: the status and the
    first rows are sent, so only a broken transfer tells the client the file is not whole."""

    async def stream_response(self, send: Send) -> None:
        try:
            await super().stream_response(send)
        except AgentevalError as exc:
            logging.getLogger("uvicorn.error").warning("a download of the SQL page stopped: %s", visible(str(exc)))
