"""The SQL page's result as a file (``/sql.csv``, ``/sql.json``): every row, read and sent a batch at a time.

A download is the SQL page's statement without the page's cuts, so it keeps the page's other rules: the same locked
connection and read-only check, the same memory limit, and the same time limit, over the whole download (a statement
of endless rows is stopped as the page's is), sending included: a client that stops reading does not hold the
statement past it. Stopped or failed half way, the response ends without its last chunk, so the client
sees a broken transfer rather than a short file that looks whole.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Generator
from typing import Any

import pyarrow as pa
from starlette.responses import StreamingResponse
from starlette.types import Message, Send

from ..errors import AgentevalError
from ..render._tables import csv_pieces, json_pieces
from ..render._text_safety import visible
from ..store._kept_connection import KeptConnection
from ..store._limits import memory_errors_named
from ..store._store import check_read_only
from ._sql import BATCH_ROWS, MEMORY_OPTION, time_limited

MEDIA_TYPES = {"csv": "text/csv; charset=utf-8", "json": "application/json"}
"""The formats of a download, those of ``agenteval sql --format csv|json``, and their media types."""


class DownloadNotRead(AgentevalError):
    """The client of a download stopped reading it, and the download's time limit passed."""


def result_file(connection: KeptConnection, sql: str, fmt: str, seconds: float) -> Generator[str, None, None]:
    """The result of ``sql`` as a ``fmt`` file, in pieces. The statement is checked and started before this
    returns, so a refused or broken statement raises here (:class:`agenteval.store.NotReadOnly`,
    ``duckdb.Error``), not half way through a response; ``seconds`` bounds it from now to its last row, and the
    connection's ``memory_limit`` bytes its DuckDB memory. Closing the generator ends the statement."""
    pieces = _pieces(connection, sql, fmt, seconds)
    next(pieces)  # the empty piece that says the statement started
    return pieces


def _pieces(connection: KeptConnection, sql: str, fmt: str, seconds: float) -> Generator[str, None, None]:
    con = connection.connection()
    check_read_only(con, sql)  # plans the statement, runs none of it
    with time_limited(con, seconds), memory_errors_named(connection.memory_limit, MEMORY_OPTION):

        def start() -> pa.RecordBatchReader:
            return con.sql(sql).to_arrow_reader(BATCH_ROWS)

        # Retried as Store.query is when a compaction replaced files under the statement; once rows are
        # sent it cannot be.
        with contextlib.closing(connection.store.retry_on(con, start)) as reader:
            yield ""
            if fmt == "csv":
                yield from csv_pieces(reader.schema.names, reader)
            else:
                yield from json_pieces(reader)
            yield "\n"  # the file ends as `agenteval sql` ends what it prints


class ResultFile(StreamingResponse):
    """A download of :func:`result_file`'s pieces within ``seconds``. Stopped or failed half way
    (:class:`._sql.SqlTimeout`, :class:`._sql.SqlFailed`, :class:`DownloadNotRead`, out of memory), it ends without
    its last chunk, and the server's log says why: the status and the first rows are sent, so only a broken transfer
    tells the client the file is not whole."""

    def __init__(self, pieces: Generator[str, None, None], seconds: float, **options: Any) -> None:
        super().__init__(pieces, **options)
        self.pieces = pieces
        self.seconds = seconds

    async def stream_response(self, send: Send) -> None:
        # The statement's own timer stops DuckDB, but not a send waiting on a client that reads nothing: bounded
        # here too, the connection is closed when the limit passes, not when the client goes away.
        deadline = asyncio.get_running_loop().time() + self.seconds

        async def send_in_time(message: Message) -> None:
            left = deadline - asyncio.get_running_loop().time()
            try:
                await asyncio.wait_for(send(message), max(left, 0.0))
            except TimeoutError:
                raise DownloadNotRead(
                    f"the client took no more of it within {self.seconds:g} s (--sql-timeout)"
                ) from None

        try:
            await super().stream_response(send_in_time)
        except AgentevalError as exc:
            logging.getLogger("uvicorn.error").warning("a download of the SQL page stopped: %s", visible(str(exc)))
        finally:
            self.pieces.close()  # never running here: each piece is read, in a worker thread, between two sends
