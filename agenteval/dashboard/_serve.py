"""Starting the dashboard: check the extra, the address and the token, then serve with uvicorn."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from ..errors import AgentevalError
from ..store import Store
from ..store._limits import SERVER_MEMORY_LIMIT, SERVER_STATEMENTS

EXTRA_MODULES = ("starlette", "jinja2", "uvicorn", "multipart")
DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765


class MissingExtra(AgentevalError, ImportError):
    """The dashboard's libraries are not installed."""


def require_extra() -> None:
    """Raise :class:`MissingExtra`, naming the extra, unless Starlette, Jinja2 and uvicorn are installed."""
    missing = [name for name in EXTRA_MODULES if importlib.util.find_spec(name) is None]
    if missing:
        raise MissingExtra(f"the dashboard needs {', '.join(missing)}: pip install 'agenteval[dashboard]'")


def serve(
    store: str | Path | Store | None = None,
    *,
    host: str = DEFAULT_HOST,
    port: int = DEFAULT_PORT,
    token: str | None = None,
    case_files: Sequence[str | Path] = (),
    sql_seconds: float = 30.0,
    sql_memory: int = SERVER_MEMORY_LIMIT,
    sql_workers: int = SERVER_STATEMENTS,
    on_ready: Callable[[str], Any] | None = None,
) -> None:
    """Serve the dashboard over ``store`` until interrupted. Off loopback, ``token`` is required (see
    :mod:`agenteval.dashboard._security`); ``case_files``: files of ``agenteval generate`` to review;
    ``sql_seconds``: how long a statement of the SQL page may run before it is stopped; ``sql_memory``: the bytes
    it may use (DuckDB's, and its worker process's: see :mod:`._sql_pool`); ``sql_workers``: how many may run at
    once; ``on_ready`` is given the address to open once the server listens."""
    require_extra()
    import uvicorn

    from ._app import create_app
    from ._security import check_binding

    check_binding(host, token)
    target = store if isinstance(store, Store) else Store(store)
    app = create_app(
        target,
        host=host,
        token=token,
        case_files=[Path(p) for p in case_files],
        sql_seconds=sql_seconds,
        sql_memory=sql_memory,
        sql_workers=sql_workers,
    )
    config = uvicorn.Config(app, host=host.strip("[]"), port=port, log_level="warning", access_log=False)
    server = uvicorn.Server(config)
    if on_ready is not None:
        shown = f"[{host.strip('[]')}]" if ":" in host else host
        original = server.startup

        async def startup(sockets: Any = None) -> None:
            await original(sockets)
            if server.started:  # the port it listens on: --port 0 picks a free one
                bound = server.servers[0].sockets[0].getsockname()[1]
                on_ready(f"http://{shown}:{bound}/" + (f"?token={token}" if token else ""))

        server.startup = startup  # type: ignore[method-assign]
    server.run()
