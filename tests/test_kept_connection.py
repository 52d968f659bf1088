"""The dashboard's SQL workers keep one read-only connection between statements: opening one and binding its views
cost about 0.1 s, twenty times a short statement. Kept, it must still show what was written since it was opened:
new runs, a compaction's files, a table's first file."""

from __future__ import annotations

import shutil

import pytest

from agenteval.dashboard._review import record_verdict
from agenteval.run import evaluate
from agenteval.store import NoStore, Store, compact
from agenteval.store._kept_connection import KeptConnection


def count(connection: KeptConnection, table: str) -> int:
    return connection.run(lambda con: con.execute(f"SELECT count(*) FROM {table}").fetchall()[0][0])


def run(store, cases: int) -> str:
    return evaluate("mock", "arithmetic", cases=cases, attempts=1, store=store, progress="none").id


def test_a_kept_connection_is_reused_and_shows_runs_and_compactions_made_after_it(tmp_path):
    store = tmp_path / "store"
    run(store, 6)
    with KeptConnection(Store(store)) as connection:
        assert count(connection, "trials") == 6
        opened = connection.connection()
        assert connection.connection() is opened  # nothing changed: no new connection, no views bound again
        run(store, 4)
        assert count(connection, "trials") == 10 and count(connection, "spans") > 0
        compact(Store(store))  # every table's files replaced by merged ones
        assert count(connection, "trials") == 10
        assert connection.connection() is opened  # each statement expands the views' globs again


def test_a_table_s_first_rows_show_in_the_next_statement(tmp_path):
    """A reviewer's first verdict, written after the connection was opened, is in the next statement's reviews."""
    store = tmp_path / "store"
    experiment = run(store, 3)
    with KeptConnection(Store(store)) as connection:
        assert count(connection, "reviews") == 0
        trial = connection.run(lambda con: con.execute("SELECT trial_id FROM trials LIMIT 1").fetchall()[0][0])
        record_verdict(Store(store), experiment, trial, "fail", "a wrong unit")
        assert count(connection, "reviews") == 1


def test_a_store_removed_under_a_kept_connection_is_said_as_a_missing_store(tmp_path):
    store = tmp_path / "store"
    run(store, 2)
    with KeptConnection(Store(store)) as connection:
        assert count(connection, "trials") == 2
        shutil.rmtree(store)
        with pytest.raises(NoStore):
            count(connection, "trials")
