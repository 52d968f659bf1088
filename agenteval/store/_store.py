"""The embedded store: a folder of Hive-partitioned Parquet files, and DuckDB views over it."""

from __future__ import annotations

import contextlib
import functools
import os
import shlex
import time
import uuid
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import duckdb

from agenteval_exporters.files import STAGED_SUFFIX, publish, staging_dir, write_parquet
from agenteval_exporters.partitions import partition_by_experiment, partition_spans, store_path
from agenteval_exporters.storefs import RemoteRoot, StoreRoot, duckdb_glob, duckdb_literal, duckdb_path, local_home
from agenteval_instrumentation.masking import masked_logger

from ..errors import AgentevalError
from . import _schemas
from ._database import open_database, statement_settings
from ._lease import LOCKS, store_lease
from ._limits import DEFAULT_MEMORY_LIMIT
from ._required import check_required
from ._schemas import TABLE_NAMES, schema_file
from ._trace_views import trace_views
from ._views import CURRENT_VIEWS, raw_table, sql_string, stored_trials

if TYPE_CHECKING:
    import pyarrow as pa

    from agenteval_exporters.writer import PartitionedWriter, Partitioner

QUERY_RETRIES = 8
T = TypeVar("T")
logger = masked_logger(__name__)

COMPACTION_LEASE = "compaction"


class StoreBusy(AgentevalError, TimeoutError):
    """Another process held the store's compaction lock for longer than the caller would wait."""


class NoStore(AgentevalError, ValueError):
    """A read was pointed at a folder that holds no store (a mistyped ``--store``, or nothing written yet)."""


class StoreNotWritable(AgentevalError, OSError):
    """The store's files could not be written: its permissions, a read-only file system, a full disk."""

    @classmethod
    def at(cls, root: StoreRoot, error: OSError, what: str | None = None) -> StoreNotWritable:
        """The one-line error for ``root``, from the ``error`` writing it (``what``: the file it was writing)."""
        where = f": {what}" if what else ""
        return cls(
            f"the store at {root} cannot be written ({error.strerror or error}{where}); "
            "check its permissions and free space, or choose another with --store"
        )


class RowsWithoutPartition(AgentevalError, ValueError):
    """Rows given to :meth:`Store.write` that have nowhere to go: no experiment (and, for a span, no start time to
    give it a day); refused whole rather than published in part."""


class NotReadOnly(AgentevalError, ValueError):
    """A statement given to a read-only query is not a single read (``SELECT``, ``DESCRIBE``, ``EXPLAIN``, ...)."""


READ_STATEMENTS = frozenset({duckdb.StatementType.SELECT, duckdb.StatementType.EXPLAIN})
"""What a read-only query may run. DuckDB parses ``WITH``, ``FROM ...``, ``VALUES``, ``DESCRIBE``, ``SHOW`` and
``SUMMARIZE`` as SELECT; ``PIVOT`` is refused, since it runs as several statements (it creates a type first)."""

REFUSED_AS = {
    duckdb.StatementType.MULTI: "PIVOT (a statement DuckDB runs as several)",
    duckdb.StatementType.LOAD: "INSTALL or LOAD",
}
"""How a refusal names a statement whose DuckDB type is not the word the user wrote."""

SHOWN_TIME_ZONE = "UTC"
"""The zone a read-only connection (people's own statements) shows TIMESTAMPTZ values in."""

LOCKED_SETTINGS = (
    "SET autoinstall_known_extensions = false",
    "SET autoload_known_extensions = false",
    # TIMESTAMPTZ values shown as reports show them, in UTC, not the machine's zone: one instant reads the same in
    # `agenteval sql`, the dashboard's SQL page and everywhere else. ICU's setting; DuckDB's wheels link ICU in (a
    # build without it fails here, after autoloading is off, rather than fetch it). `AT TIME ZONE` gives another.
    f"SET TimeZone = '{SHOWN_TIME_ZONE}'",
    "SET enable_external_access = false",  # after allowed_directories: only the store stays reachable
    "SET lock_configuration = true",  # last: no statement can undo the others
)


@contextlib.contextmanager
def compaction_lock(root: StoreRoot, wait: float, only_reading: bool = False) -> Iterator[None]:
    """Hold ``root``'s compaction lease (an OS lock that dies with its process); waits up to ``wait``
    seconds for another holder, then raises :class:`StoreBusy`; :class:`StoreNotWritable` when its lock file cannot
    be made or opened (a read-only store), unless ``only_reading`` (a dry run): a store no one can write has no
    compaction to wait for, and the caller goes on without the lock."""
    lease = store_lease(root, COMPACTION_LEASE)
    try:
        taken = lease.acquire(wait)
    except OSError as exc:
        if only_reading:
            yield
            return
        raise StoreNotWritable.at(root, exc, str(exc.filename or LOCKS)) from exc
    if not taken:
        raise StoreBusy(
            f"{root} is being compacted by {lease.holder()}; waited {wait:g} s. "
            "Run `agenteval compact` again once it has finished, or give it longer with --wait."
        )
    with lease:
        yield


def unreachable_store_message(error: BaseException | None) -> str | None:
    """One line for an error reaching a store on object storage (a URL without a bucket, no credentials, an
    endpoint where no server answers, access refused: botocore's errors, raised from any read or write), naming
    what to check; None for any other error. Never a credential: botocore's messages hold none."""
    from agenteval_exporters.storefs import StoreLocationError

    while error is not None:
        if isinstance(error, StoreLocationError):
            return str(error)
        if any(cls.__module__.split(".")[0] in ("botocore", "aiobotocore") for cls in type(error).__mro__):
            said = " ".join(str(error).split())  # some span lines (a bucket name's rule)
            said = said if len(said) <= 200 else said[:199] + "…"
            return (
                f"the store on object storage cannot be used ({type(error).__name__}: {said}); check --store (or "
                "AGENTEVAL_STORE), the credentials (AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY, or a profile) and "
                "AWS_ENDPOINT_URL"
            )
        error = error.__cause__ or error.__context__
    return None


def quote_identifier(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def _vanished_file(exc: Exception) -> bool:
    """A file listed by the glob was gone when opened: a compaction swapped it; the retry sees the new one."""
    return any(text in str(exc) for text in ("No such file", "No files found", "Cannot open file", "FileNotFoundError"))


def _fetch_dicts(cursor: duckdb.DuckDBPyConnection) -> list[dict[str, Any]]:
    names = [column[0] for column in cursor.description or []]
    return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]


def _retry_vanished(run: Callable[[], T], pause: float = 0.005, before_retry: Callable[[], None] = lambda: None) -> T:
    for attempt in range(QUERY_RETRIES):
        try:
            if attempt:
                before_retry()
            return run()
        except duckdb.Error as exc:  # IOException on disk; on object storage, fsspec's error passed through
            if attempt == QUERY_RETRIES - 1 or not _vanished_file(exc):
                raise
            time.sleep(pause * (attempt + 1))
    raise AssertionError("unreachable")


def _create_view(con: duckdb.DuckDBPyConnection, name: str, sql: Callable[[], str]) -> None:
    con.execute(f"CREATE OR REPLACE VIEW {quote_identifier(name)} AS {sql()}")


REMOTE_RETRY_PAUSE = 0.05
"""On object storage a retry lists the files again, so it waits longer between tries than a glob on disk."""


_EMPTY_RELATIONS: dict[str, str] = {}


def empty_relation(table: str, con: duckdb.DuckDBPyConnection, schema_file_path: Path | None = None) -> str:
    """A SELECT of no rows with ``table``'s columns as its schema defines them, in DuckDB's types; read once per
    process through ``con`` (a connection of its own cost 0.15 s, a fifth of a small rescore) from the table's
    schema file when given one that exists, else from the Arrow schema, which costs importing pyarrow."""
    known = _EMPTY_RELATIONS.get(table)
    if known is not None:
        return known
    columns = _schema_file_columns(con, schema_file_path) or _arrow_columns(table, con)
    relation = ", ".join(f"NULL::{kind} AS {quote_identifier(name)}" for name, kind in columns)
    known = _EMPTY_RELATIONS[table] = f"SELECT {relation} WHERE false"
    return known


def _schema_file_columns(con: duckdb.DuckDBPyConnection, path: Path | None) -> list[tuple[str, str]] | None:
    """The columns of a table's schema file (written from its Arrow schema when the store was laid out, and named
    by the schema's version), or None when there is none to read."""
    if path is None or not path.is_file():
        return None
    try:
        described = con.execute(f"DESCRIBE SELECT * FROM read_parquet({sql_string(duckdb_literal(path))})").fetchall()
    except duckdb.Error:  # unreadable: the Arrow schema says the same
        return None
    return [(row[0], row[1]) for row in described] or None


def _arrow_columns(table: str, con: duckdb.DuckDBPyConnection) -> list[tuple[str, str]]:
    import pyarrow as pa

    schema = _schemas.TABLES[table]
    # Not schema.empty_table(): that makes pyarrow import pandas, when installed (40 MB and 0.1 s of a report).
    types = con.from_arrow(pa.Table.from_batches([], schema=schema)).types
    return [(name, str(kind)) for name, kind in zip(schema.names, types, strict=True)]


def check_read_only(con: duckdb.DuckDBPyConnection, sql: str, parameters: Sequence[Any] | None = None) -> None:
    """Raise :class:`NotReadOnly` unless ``sql`` (run with ``parameters``) is exactly one read statement."""
    try:
        statements = con.extract_statements(sql)
    except duckdb.Error as exc:
        raise NotReadOnly(str(exc).splitlines()[0]) from exc
    if not statements:
        raise NotReadOnly("no SQL statement given; write one read statement, e.g. SELECT count(*) FROM trials")
    if len(statements) > 1:
        raise NotReadOnly(f"{len(statements)} statements given; the store's SQL runs one read statement at a time")
    kind, run = statements[0].type, statements[0].query
    if kind == duckdb.StatementType.EXPLAIN:
        # EXPLAIN ANALYZE runs what it explains, and the connection may write where it may read (the store):
        # the statement explained must be one read too.
        run = _explained(run)
        try:
            explained = con.extract_statements(run)
        except duckdb.Error:
            explained = []  # not found where expected: refused, as anything not known to be a read
        kind = explained[0].type if len(explained) == 1 else duckdb.StatementType.INVALID
    if kind not in READ_STATEMENTS or kind == duckdb.StatementType.EXPLAIN:
        raise NotReadOnly(
            f"{REFUSED_AS.get(kind, kind.name)} is not allowed: the store's SQL is read-only "
            "(SELECT, WITH, FROM, VALUES, DESCRIBE, SHOW, SUMMARIZE, EXPLAIN of one of these)"
        )
    # A SELECT may still write: DuckDB runs a COPY given as one of its CTEs. What it would run is in its plan.
    writer = _writing_operator(con, run, parameters)
    if writer is not None:
        raise NotReadOnly(f"{writer} is not allowed: the store's SQL is read-only, and this statement would write")


WRITING_OPERATORS = ("COPY", "INSERT", "UPDATE", "DELETE", "CREATE", "EXPORT", "ATTACH", "DROP", "ALTER")
"""Words in the names of the plan operators that write (COPY_TO_FILE, BATCH_COPY_TO_FILE, INSERT, ...); not MERGE,
which a join that reads is named after (PIECEWISE_MERGE_JOIN)."""


def _writing_operator(con: duckdb.DuckDBPyConnection, sql: str, parameters: Sequence[Any] | None = None) -> str | None:
    """The name of the first operator in ``sql``'s physical plan that writes, if any. A statement that cannot be
    planned (with the parameters it is run with) cannot run either: its own error says why when it is run."""
    import json

    try:
        rows = con.execute(f"EXPLAIN (FORMAT JSON) {sql}", parameters or None).fetchall()
    except duckdb.Error:
        return None
    nodes: list[Any] = []
    for _, plan in rows:
        try:
            loaded = json.loads(plan)
        except ValueError:  # not the plan this reads: refused, as anything not known to be a read
            return "a plan that cannot be read"
        nodes.extend(loaded if isinstance(loaded, list) else [loaded])
    while nodes:
        node = nodes.pop()
        name = str(node.get("name", ""))
        if any(word in name.upper() for word in WRITING_OPERATORS):
            return name
        nodes.extend(node.get("children", []))
    return None


EXPLAIN_WORDS = frozenset({"EXPLAIN", "ANALYZE", "ANALYSE"})


def _explained(sql: str) -> str:
    """The statement an ``EXPLAIN`` explains: ``sql`` after ``EXPLAIN``, ``ANALYZE`` and an options list such as
    ``(FORMAT JSON, ANALYZE)`` (one that opens with a word that is no keyword, or with ANALYZE; a query in
    parentheses opens with a keyword or a parenthesis), comments skipped."""
    tokens = duckdb.tokenize(sql)
    ends = [start for start, _ in tokens[1:]] + [len(sql)]
    words = [
        (start, sql[start:end].strip().upper(), kind)
        for (start, kind), end in zip(tokens, ends, strict=True)
        if kind != duckdb.token_type.comment
    ]
    i = 0
    while i < len(words) and words[i][1] in EXPLAIN_WORDS:
        i += 1
    options = i + 1 < len(words) and words[i][1] == "("
    if options and (words[i + 1][2] == duckdb.token_type.identifier or words[i + 1][1] in EXPLAIN_WORDS):
        depth = 1
        while depth and i + 1 < len(words):
            i += 1
            depth += {"(": 1, ")": -1}.get(words[i][1], 0)
        i += 1
    return sql[words[i][0] :] if i < len(words) else ""


class Store:
    """A store folder (``--store``, else ``AGENTEVAL_STORE``, else ``./.agenteval``)."""

    def __init__(self, path: str | os.PathLike[str] | StoreRoot | None = None) -> None:
        self.root: StoreRoot = store_path(path)
        self._laid_out = False  # writers lay out the store once per object; reads never do

    def __repr__(self) -> str:
        return f"Store({str(self.root)!r})"

    def as_option(self) -> str:
        """`` --store ROOT`` for a command printed for the user to run next (the full report, the resume), or ""
        when a command given no ``--store`` finds this store (it is ``$AGENTEVAL_STORE``'s or ``./.agenteval``)."""
        default = store_path(None)
        if isinstance(default, Path) and isinstance(self.root, Path):
            same = default.absolute() == self.root.absolute()
        else:
            same = str(default) == str(self.root)
        return "" if same else f" --store {shlex.quote(str(self.root))}"

    def ensure(self) -> None:
        """Create the table folders and their schema files if missing, and finish or roll back a
        compaction that was killed half way (see :func:`agenteval.store._compact.recover`).
        Raises :class:`StoreNotWritable` when the store cannot be written."""
        try:
            self._lay_out()
            self._laid_out = True
        except AgentevalError:
            raise
        except OSError as exc:
            raise StoreNotWritable.at(self.root, exc) from exc

    def _lay_out(self) -> None:
        if isinstance(self.root, RemoteRoot):
            self._lay_out_remote(self.root)
            return
        # The staging folder is written first, even when every folder exists: a store that only
        # reads would otherwise pass here and fail on its first trial.
        probe = staging_dir(self.root) / f"probe-{uuid.uuid4().hex}{STAGED_SUFFIX}"
        probe.touch()
        probe.unlink()
        for table, schema in _schemas.TABLES.items():
            folder = self.root / table
            folder.mkdir(parents=True, exist_ok=True)
            target = folder / schema_file(table)
            if not target.exists():
                staged = staging_dir(self.root) / f"{table}-{uuid.uuid4().hex}{STAGED_SUFFIX}"
                write_parquet(staged, schema.empty_table())
                os.replace(staged, target)
        from ._compact import recover

        recover(self, wait=0)

    def _lay_out_remote(self, root: RemoteRoot) -> None:
        """Object storage has no folders: only the schema files, each published whole if missing. Writing them
        also proves the bucket exists and can be written, before any trial runs."""
        for table, schema in _schemas.TABLES.items():
            if not root.has(f"{table}/{schema_file(table)}"):
                staged = staging_dir(root) / f"{table}-{uuid.uuid4().hex}{STAGED_SUFFIX}"
                try:
                    write_parquet(staged, schema.empty_table())
                    root.put(staged, f"{table}/{schema_file(table)}")
                finally:
                    staged.unlink(missing_ok=True)

    def _ensure_once(self) -> None:
        if not self._laid_out:
            self.ensure()

    def glob(self, table: str) -> str:
        """The pattern that reads every file of ``table`` (absolute: a read-only connection reaches the store
        through DuckDB's ``allowed_directories``, which it compares with absolute paths)."""
        return duckdb_glob(self.root, f"{table}/**/*.parquet")

    def require(self) -> None:
        """Raise :class:`NoStore` unless the store folder exists: reads never create it."""
        if not self.root.is_dir():
            raise NoStore(
                f"there is no store at {self.root}: check --store (or AGENTEVAL_STORE), or run `agenteval run` first"
            )

    def read_parquet_sql(self, table: str) -> str:
        """The ``read_parquet`` call over ``table``'s files: a glob on disk; on object storage, the files that
        are live now, listed (see :mod:`._live`)."""
        # experiment_id is stored in every file, so Hive partitioning is not needed, and it would
        # fail here: DuckDB refuses one glob over experiment_id=... and date=... folders.
        return self._read_parquet(self._sources(table) or "[]")

    @staticmethod
    def _read_parquet(sources: str, *, filename: bool = False, row_numbers: bool = False) -> str:
        """``read_parquet`` over ``sources``; ``filename`` adds each row's file as a column ``filename``, and
        ``row_numbers`` its place in that file (from 0) as ``file_row_number``."""
        named = ", filename = true" if filename else ""
        numbered = ", file_row_number = true" if row_numbers else ""
        return f"read_parquet({sources}, union_by_name = true, hive_partitioning = false{named}{numbered})"

    def _sources(self, table: str) -> str | None:
        """What ``read_parquet`` reads for ``table``, or None when it has no file."""
        if not isinstance(self.root, RemoteRoot):
            return sql_string(self.glob(table)) if any((self.root / table).rglob("*.parquet")) else None
        from ._listed_objects import remember
        from ._live import live_files

        live = live_files(self.root, table)
        remember(self.root, live)  # what DuckDB asks of these files is answered from this listing
        files = [sql_string(duckdb_path(self.root, f.relative)) for f in live]
        return "[" + ", ".join(files) + "]" if files else None

    def connect(
        self,
        database: str = ":memory:",
        *,
        read_only: bool = False,
        traces: bool = True,
        memory_limit: int = DEFAULT_MEMORY_LIMIT,
    ) -> duckdb.DuckDBPyConnection:
        """A DuckDB connection with views ``experiments``, ``cases``, ``trials``, ``spans``, ``scores`` (current:
        what reports give), ``experiment_history``, ``trial_history``, ``score_history`` (every row as written), and
        ``traces``, ``trace_scores`` (production traces: spans without an experiment, and their scores).

        Nothing is created: a missing store or table gives empty views with every column. The default connection
        is the caller's to use (temporary tables, any file); it first finishes a compaction killed half way.
        ``read_only=True`` raises :class:`NoStore` when the folder does not exist, writes nothing, and locks the
        connection: no file outside the store can be read, no extension installed or loaded, no setting changed,
        and a statement may use ``memory_limit`` bytes of DuckDB's memory and no temporary file (past it DuckDB
        raises ``duckdb.OutOfMemoryException``; see :mod:`._limits` for what it does not count). Pair it with
        :meth:`query` ``(read_only=True)``, or :func:`check_read_only` for statements of your own.
        ``traces=False`` leaves out ``traces`` and ``trace_scores``, whose binding is a tenth of a small report's.
        """
        if read_only:
            self.require()
        elif isinstance(self.root, RemoteRoot):
            pass  # a compaction on object storage never needs recovering before a read (see ._live)
        elif self.root.is_dir():
            from ._compact import recover

            recover(self, wait=0)
        con = open_database(database, statement_settings(memory_limit) if read_only else None)
        if isinstance(self.root, RemoteRoot):
            from ._listed_objects import register  # fsspec: only with a store on object storage

            register(con, self.root)
        # Our commands show their own progress, or none. Only switched off when on: in a Jupyter kernel
        # without ipywidgets it is off already, and DuckDB refuses any change to it there.
        if con.execute("SELECT current_setting('enable_progress_bar')").fetchall()[0][0]:
            con.execute("SET enable_progress_bar = false")
        self._create_table_views(con)
        for name, current in (CURRENT_VIEWS | (trace_views() if traces else {})).items():
            view = f"CREATE OR REPLACE VIEW {quote_identifier(name)} AS {current}"
            _retry_vanished(functools.partial(con.execute, view), self._retry_pause)
        if read_only:
            con.execute("SET allowed_directories = ?", [self.readable_places()])
            for setting in LOCKED_SETTINGS:
                con.execute(setting)
        return con

    def _create_table_views(self, con: duckdb.DuckDBPyConnection) -> None:
        views = {raw_table(table): functools.partial(self._stored_sql, table, con) for table in TABLE_NAMES}
        for name, sql in views.items():
            # Creating the view binds it, which opens the files to union their columns. On object storage the
            # files are listed for the view (see ._live), again on each try: a compaction may have replaced them.
            _retry_vanished(functools.partial(_create_view, con, name, sql), self._retry_pause)

    def retry_on(self, con: duckdb.DuckDBPyConnection, run: Callable[[], T]) -> T:
        """``run`` (statements on ``con``, a connection of this store's), again when a compaction replaced a file
        under it. On disk the views' globs find the new files; on object storage the views name the files live
        when they were made, so each retry makes them again from a fresh listing (see :mod:`._live`)."""
        if not isinstance(self.root, RemoteRoot):
            return _retry_vanished(run)
        return _retry_vanished(run, REMOTE_RETRY_PAUSE, lambda: self._create_table_views(con))

    def readable_places(self) -> list[str]:
        """What a read-only connection may read: the store, and for a store on object storage the folder of
        this machine's where its saved report figures are kept (see :mod:`._snapshots`)."""
        if isinstance(self.root, RemoteRoot):
            return [duckdb_path(self.root, "") + "/", str(local_home(self.root, "snapshots", create=False)) + os.sep]
        # DuckDB checks a pattern against these before it expands it, and the files it finds after: the store's own
        # patterns name its folder as a pattern that matches only itself (see duckdb_literal).
        folder = self.root.absolute()
        return list(dict.fromkeys([str(folder) + os.sep, duckdb_literal(folder) + os.sep]))

    def _stored_sql(self, table: str, con: duckdb.DuckDBPyConnection) -> str:
        """The table's rows as written; with the schema's columns in any case, so that files of an older
        version, or no files at all, still give every column (the store itself is never changed for it)."""
        local = None if isinstance(self.root, RemoteRoot) else self.root / table / schema_file(table)
        columns = empty_relation(table, con, local)
        sources = self._sources(table)
        if sources is not None:
            columns = f"SELECT * FROM {self._read_parquet(sources)} UNION ALL BY NAME {columns}"
        return stored_trials(f"({columns})") if table == "trials" else columns

    @property
    def _retry_pause(self) -> float:
        return REMOTE_RETRY_PAUSE if isinstance(self.root, RemoteRoot) else 0.005

    def _on_connection(
        self,
        read: Callable[[duckdb.DuckDBPyConnection], T],
        *,
        read_only: bool = False,
        memory_limit: int = DEFAULT_MEMORY_LIMIT,
    ) -> T:
        """``read`` on a connection of the store, retried when a compaction replaced files under it. On disk the
        views' globs find the new files on the same connection; on object storage a connection's views hold the
        files live when it was opened, so each try opens a new one (see :mod:`._live`)."""
        if not isinstance(self.root, RemoteRoot):
            con = self.connect(read_only=read_only, memory_limit=memory_limit)
            try:
                return _retry_vanished(lambda: read(con))
            finally:
                con.close()

        def fresh() -> T:
            con = self.connect(read_only=read_only, memory_limit=memory_limit)
            try:
                return read(con)
            finally:
                con.close()

        return _retry_vanished(fresh, REMOTE_RETRY_PAUSE)

    def query(
        self,
        sql: str,
        parameters: Sequence[Any] | None = None,
        *,
        read_only: bool = False,
        memory_limit: int = DEFAULT_MEMORY_LIMIT,
    ) -> pa.Table:
        """Run ``sql`` over the views; retried when a compaction swapped files under it. ``read_only=True``
        runs one read statement on a locked connection (see :meth:`connect`, and its ``memory_limit``) and
        refuses anything else."""

        def read(con: duckdb.DuckDBPyConnection) -> pa.Table:
            if read_only:
                check_read_only(con, sql, parameters)
            return con.sql(sql, params=parameters or None).to_arrow_table()

        return self._on_connection(read, read_only=read_only, memory_limit=memory_limit)

    @contextlib.contextmanager
    def read_batches(
        self, sql: str, *, memory_limit: int = DEFAULT_MEMORY_LIMIT, batch_rows: int = 2048
    ) -> Iterator[pa.RecordBatchReader]:
        """:meth:`query` ``(read_only=True)`` as a stream: one read statement's rows, ``batch_rows`` at a time, read
        as they are taken, so what is held is a batch, not the result. Starting is retried when a compaction
        replaced files under it; once rows are read it cannot be. The connection closes on leaving."""
        con = self.connect(read_only=True, memory_limit=memory_limit)
        try:
            check_read_only(con, sql)
            reader = self.retry_on(con, lambda: con.sql(sql).to_arrow_reader(batch_rows))
            with contextlib.closing(reader):
                yield reader
        finally:
            con.close()

    def rows(self, sql: str, parameters: Sequence[Any] | None = None) -> list[dict[str, Any]]:
        """:meth:`query` as a list of dicts (nanosecond timestamps as microsecond datetimes). Fetched from
        DuckDB as Python values: through Arrow, pyarrow would import pandas when installed (0.1 s, 40 MB)."""
        return self._on_connection(lambda con: _fetch_dicts(con.execute(sql, parameters or [])))

    def writer(self, table: str, *, max_rows: int = 100_000, flush_interval: float = 1.0) -> PartitionedWriter:
        """A buffered writer for one table, publishing by rows or by time; its ``flush`` and ``close``
        raise when the files cannot be written (the rows are kept for the next try). Its ``append`` raises
        :class:`MissingRequiredValue` for a batch with a row that lacks a value the table requires, and takes
        nothing of that batch; what was appended before it is published as usual."""
        from agenteval_exporters.writer import PartitionedWriter

        self._ensure_once()
        return PartitionedWriter(
            self.root,
            table,
            _schemas.TABLES[table],
            partitioner(table),
            max_rows=max_rows,
            flush_interval=flush_interval,
            check=functools.partial(check_required, table),
        )

    def write(self, table: str, rows: pa.Table | list[dict[str, Any]]) -> list[StoreRoot]:
        """Publish ``rows`` at once, one file per partition: per experiment, and for spans of no experiment (production
        traces) per UTC day and service, as the span writer places them. Raises :class:`RowsWithoutPartition` when a row
        has nowhere to go, and :class:`MissingRequiredValue` when one lacks a value the table requires; either way it
        publishes nothing."""
        import pyarrow as pa

        self._ensure_once()
        schema = _schemas.TABLES[table]
        data = rows if isinstance(rows, pa.Table) else pa.Table.from_pylist(rows, schema=schema)
        data = data.cast(schema) if data.schema != schema else data
        _check_placeable(table, data)
        check_required(table, data)
        written = []
        for batch in data.to_batches():
            for partition, part in partitioner(table)(batch):
                written.append(publish(self.root, table, partition, pa.Table.from_batches([part], schema)))
        return written


def partitioner(table: str) -> Partitioner:
    """Where ``table``'s rows go: spans of no experiment into their day and service, anything else by experiment
    (which leaves out rows of no experiment: see :func:`_check_placeable`)."""
    return partition_spans if table == "spans" else partition_by_experiment


def _check_placeable(table: str, data: pa.Table) -> None:
    """Raise :class:`RowsWithoutPartition` for rows the partitioner would leave out, or fail on half way."""
    unplaced = data.column("experiment_id").null_count
    if not unplaced:
        return
    if table != "spans":
        # Production rows of other tables (a trace's scores) are published into their trace's day and service by
        # their own writer (agenteval.scorers._traces), which knows the trace.
        raise RowsWithoutPartition(
            f"{unplaced} {table} rows have no experiment_id; only spans may have none (production traces)"
        )
    import pyarrow.compute as pc

    undated = pc.sum(pc.and_(pc.is_null(data.column("experiment_id")), pc.is_null(data.column("start_time"))))
    if undated.as_py():
        raise RowsWithoutPartition(
            f"{undated.as_py()} spans rows have no experiment_id and no start_time: a span of no experiment is kept "
            "in the folder of the UTC day it started"
        )
