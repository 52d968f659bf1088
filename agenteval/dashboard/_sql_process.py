"""A worker process of the SQL page: it runs the page's statements and downloads, one at a time, under a cap.

DuckDB's ``memory_limit`` does not count a value an expression builds (``repeat('x', 2000000000)``), so a statement
run in the server could grow it by gigabytes and have the OOM killer end it for everyone. Here the operating system
caps the worker's data (``RLIMIT_DATA``, see :func:`agenteval.store._limits.process_memory_capped`) at what it held
plus ``--sql-memory-limit`` for each statement: past it the statement fails (or, at worst, this process dies), and
the server only hears of it. A worker whose data grew past :data:`RETIRE_GROWTH` of the limit (DuckDB's allocator
keeps the address space it freed) ends after its statement, so the memory a worker holds stays bounded; the server
starts another (:mod:`._sql_pool`).

Messages are JSON, never pickles: the worker runs statements of whoever has the page, and the server trusts nothing
it sends back but text and numbers. Every message is one ``send_bytes``: a download's pieces of text start with
:data:`PIECE`, every other message with :data:`MESSAGE`.
"""

from __future__ import annotations

import contextlib
import json
import sys
import traceback
from multiprocessing.connection import Connection
from typing import Any

from ..errors import AgentevalError
from ..store._kept_connection import KeptConnection
from ..store._limits import data_bytes, process_memory_capped
from ._sql import MEMORY_OPTION, Cell, ShownResult, run_sql

PIECE = b"P"
MESSAGE = b"M"

RETIRE_GROWTH = 0.1
"""A worker whose data grew past this share of its limit since it started ends after its statement."""

WARM_UP_SECONDS = 60.0


def send(conn: Connection, **message: Any) -> None:
    conn.send_bytes(MESSAGE + json.dumps(message).encode())


def shown_result_message(result: ShownResult) -> dict[str, Any]:
    """A :class:`._sql.ShownResult` as JSON's values."""
    return {
        "columns": [[c.text, c.left_out] for c in result.columns],
        "rows": [[[c.text, c.left_out] for c in row] for row in result.rows],
        "columns_left_out": result.columns_left_out,
        "rows_left_out": result.rows_left_out,
        "more_rows": result.more_rows,
    }


def shown_result(message: dict[str, Any]) -> ShownResult:
    """The :class:`._sql.ShownResult` of :func:`shown_result_message`'s values."""
    return ShownResult(
        columns=[Cell(str(text), int(left_out)) for text, left_out in message["columns"]],
        rows=[[Cell(str(text), int(left_out)) for text, left_out in row] for row in message["rows"]],
        columns_left_out=int(message["columns_left_out"]),
        rows_left_out=int(message["rows_left_out"]),
        more_rows=bool(message["more_rows"]),
    )


def error_message(exc: BaseException) -> dict[str, str]:
    """What the server is told of a statement's error: its kind (the server raises its own of that kind) and its
    first line."""
    return {"error": type(exc).__name__, "message": (str(exc).splitlines() or [""])[0]}


def serve(conn: Connection, root: str, memory_limit: int) -> None:
    """Answer the server's requests on ``conn`` until it closes it, or until this worker grew enough to retire."""
    from ..store import Store

    with KeptConnection(Store(root), memory_limit) as connection:
        # A first statement opens the connection and loads what every statement uses (DuckDB's threads, the views'
        # code): not counted as growth.
        run_sql(connection, "SELECT 1", WARM_UP_SECONDS)
        _answer(conn, connection, data_bytes())


def _answer(conn: Connection, connection: KeptConnection, started_with: int | None) -> None:
    """Run the server's requests on ``connection`` until the server closes ``conn``, or this worker retires."""
    import duckdb

    from ._sql_download import result_file

    memory_limit = connection.memory_limit
    send(conn, ready=True)
    while True:
        try:
            request = json.loads(conn.recv_bytes())
        except (EOFError, OSError):  # the server ended, or closed this worker
            return
        try:
            with process_memory_capped(memory_limit, MEMORY_OPTION):
                if request["kind"] == "page":
                    shown = run_sql(connection, request["sql"], request["seconds"])
                    answer: dict[str, Any] = {"result": shown_result_message(shown)}
                else:
                    pieces = result_file(connection, request["sql"], request["fmt"], request["seconds"])
                    send(conn, started=True)
                    with contextlib.closing(pieces):
                        for piece in pieces:
                            conn.send_bytes(PIECE + piece.encode())
                    answer = {"end": True}
        except duckdb.FatalException as exc:  # DuckDB refuses every later statement on the connection: retire
            answer, started_with = error_message(exc), None
        except (AgentevalError, duckdb.Error) as exc:
            answer = error_message(exc)
        except Exception as exc:  # a bug: said as DuckDB's errors are, and in the server's log; this worker ends
            traceback.print_exc()
            answer, started_with = error_message(exc), None
        now = data_bytes()
        retire = started_with is None or now is None or now - started_with > RETIRE_GROWTH * memory_limit
        send(conn, retire=retire, **answer)
        if retire:
            return


def main() -> None:
    """``python -m agenteval.dashboard._sql_process FD STORE BYTES``: serve on the socket the server passed."""
    import socket

    fd, root, memory_limit = int(sys.argv[1]), sys.argv[2], int(sys.argv[3])
    conn = Connection(socket.socket(fileno=fd).detach())
    try:
        serve(conn, root, memory_limit)
    finally:
        conn.close()


if __name__ == "__main__":
    main()
