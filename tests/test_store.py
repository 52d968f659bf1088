"""The store: views over an empty store, older files, compaction under readers, agenteval sql."""

from __future__ import annotations

import contextlib
import datetime
import json
import threading
import time

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from click.testing import CliRunner
from waiting import wait_until

from agenteval.cli import main
from agenteval.errors import AgentevalError
from agenteval.store import TABLES, TRIALS, MissingRequiredValue, Store, compact
from agenteval.store._snapshots import snapshot_folders
from agenteval.store._views import raw_table
from agenteval_exporters import SPAN_SCHEMA
from agenteval_exporters.files import publish


def trial_rows(experiment: str, n: int, start: int = 0) -> list[dict]:
    now = time.time_ns()
    return [
        {
            "experiment_id": experiment,
            "trial_id": f"{experiment}-t{i}",
            "case_id": f"c{i % 5}",
            "attempt": 1,
            "outcome": "passed" if i % 3 else "wrong",
            "passed": bool(i % 3),
            "started_at": now,
            "ended_at": now + 1000,
        }
        for i in range(start, start + n)
    ]


def test_empty_store_has_every_view_with_its_columns(tmp_path):
    store = Store(tmp_path / "empty")
    con = store.connect()
    for table, schema in TABLES.items():
        for view in {table, raw_table(table)}:  # current and history views have the stored columns
            described = con.execute(f"DESCRIBE {view}").fetchall()
            assert [row[0] for row in described] == schema.names, view
            assert con.execute(f"SELECT count(*) FROM {view}").fetchone() == (0,)
    assert sorted(r[0] for r in con.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()) == [
        "cases",
        "experiment_history",
        "experiments",
        "review_history",
        "reviews",
        "score_history",
        "scores",
        "spans",
        "trace_scores",
        "traces",
        "trial_history",
        "trials",
    ]
    typed = dict((r[0], r[1]) for r in con.execute("DESCRIBE spans").fetchall())
    assert typed["start_time"] == "TIMESTAMPTZ_NS" and typed["input_tokens"] == "BIGINT"
    experiments_only = store.connect(traces=False)  # what an experiment's report opens
    views = {
        r[0] for r in experiments_only.execute("SELECT view_name FROM duckdb_views() WHERE NOT internal").fetchall()
    }
    every = {"cases", "experiment_history", "experiments", "review_history", "reviews", "score_history", "scores"}
    assert views == every | {"spans", "trial_history", "trials"}


def test_store_path_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTEVAL_STORE", str(tmp_path / "from-env"))
    assert Store().root == tmp_path / "from-env"
    assert Store(tmp_path / "arg").root == tmp_path / "arg"


def test_files_of_an_older_schema_still_read(tmp_path):
    store = Store(tmp_path / "s")
    # A version-0 span file: fewer columns, and no typed token columns yet.
    old_fields = [f for f in SPAN_SCHEMA if f.name not in ("input_tokens", "output_tokens", "scope_name")]
    old_schema = pa.schema(old_fields, metadata={b"agenteval.schema_version": b"0"})
    row = {f.name: None for f in old_fields}
    row.update(trace_id="t" * 32, span_id="s" * 16, name="old", kind="INTERNAL", status_code="UNSET")
    row.update(start_time=1, end_time=2, duration_ms=0.0, experiment_id="e-old")
    publish(store.root, "spans", "experiment_id=e-old", pa.Table.from_pylist([row], schema=old_schema))
    result = store.query("SELECT name, input_tokens, scope_name, experiment_id FROM spans").to_pylist()
    assert result == [{"name": "old", "input_tokens": None, "scope_name": None, "experiment_id": "e-old"}]


def test_write_and_query_the_other_tables(tmp_path):
    store = Store(tmp_path / "s")
    written = store.write("trials", trial_rows("e1", 4) + trial_rows("e2", 2))
    assert sorted(p.parent.name for p in written) == ["experiment_id=e1", "experiment_id=e2"]
    counts = store.query("SELECT experiment_id, count(*) n FROM trials GROUP BY 1 ORDER BY 1").to_pylist()
    assert counts == [{"experiment_id": "e1", "n": 4}, {"experiment_id": "e2", "n": 2}]
    assert pq.read_schema(written[0]).remove_metadata() == TRIALS.remove_metadata()


def span_rows(experiment: str | None, n: int, day: str, service: str | None) -> list[dict]:
    start = datetime.datetime.fromisoformat(f"{day}T23:59:00+00:00")
    return [
        {
            "trace_id": f"{experiment or service}-{day}-trace",
            "span_id": f"{experiment or service}-{day}-{i}",
            "name": "chat m",
            "kind": "INTERNAL",
            "start_time": start,
            "end_time": start + datetime.timedelta(seconds=1),
            "duration_ms": 1000.0,
            "status_code": "OK",
            "service_name": service,
            "experiment_id": experiment,
        }
        for i in range(n)
    ]


def test_write_publishes_spans_without_an_experiment_where_the_span_writer_does(tmp_path):
    """Store.write("spans") kept spans of experiments only: production spans (no experiment) were dropped without
    a word. Every row written is read back, in the folders the buffered span writer (the exporter's) uses."""
    rows = (
        span_rows("e1", 3, "2026-01-05", "shop")
        + span_rows(None, 4, "2026-01-05", "shop")
        + span_rows(None, 2, "2026-01-06", "shop")
        + span_rows(None, 5, "2026-01-05", "billing / eu")
        + span_rows(None, 1, "2026-01-05", None)
        + span_rows("e2", 2, "2026-01-05", "shop")
    )
    store = Store(tmp_path / "s")
    written = store.write("spans", rows)
    assert store.rows("SELECT count(*) AS n FROM spans")[0]["n"] == len(rows) == 17
    assert store.rows("SELECT count(*) AS n FROM spans WHERE experiment_id IS NULL")[0]["n"] == 12
    assert store.rows("SELECT sum(spans) AS n FROM traces")[0]["n"] == 12  # the production traces' view
    by_service = store.rows("SELECT service, count(*) AS n FROM traces GROUP BY service ORDER BY service")
    assert [(r["service"], r["n"]) for r in by_service] == [("billing / eu", 1), ("shop", 2), ("unknown_service", 1)]

    buffered = Store(tmp_path / "buffered")
    with contextlib.closing(buffered.writer("spans")) as writer:
        writer.append(pa.RecordBatch.from_pylist(rows, schema=SPAN_SCHEMA))
    folders = {p.parent.relative_to(store.root / "spans").as_posix() for p in written}
    assert folders == {
        p.parent.relative_to(buffered.root / "spans").as_posix() for p in (buffered.root / "spans").rglob("part-*")
    }
    assert "date=2026-01-05/service=billing%20%2F%20eu" in folders and "experiment_id=e1" in folders


def test_write_refuses_production_spans_without_a_start_time_rather_than_lose_them(tmp_path):
    store = Store(tmp_path / "s")
    rows = span_rows(None, 2, "2026-01-05", "shop")
    rows[1]["start_time"] = None
    with pytest.raises(AgentevalError, match="1 spans rows have no experiment_id and no start_time"):
        store.write("spans", rows)
    assert store.rows("SELECT count(*) AS n FROM spans")[0]["n"] == 0


REQUIRED_SPAN_COLUMNS = [field.name for field in SPAN_SCHEMA if not field.nullable]


@pytest.mark.parametrize("experiment", ["e1", None], ids=["experiment", "production"])
@pytest.mark.parametrize("column", REQUIRED_SPAN_COLUMNS)
def test_the_span_writer_refuses_a_row_missing_a_required_value_and_keeps_the_rows_around_it(
    tmp_path, column, experiment
):
    """A span without start_time raised pyarrow's ArrowInvalid (a production span) or was taken and failed its whole
    file when written, the rows appended before it included (a span of an experiment). Every column the schema
    declares non-nullable is checked the same way, before anything of the batch is taken."""
    store = Store(tmp_path / "s")
    before = span_rows(experiment, 3, "2026-01-05", "shop")
    bad = [{**row, "span_id": f"bad-{i}"} for i, row in enumerate(span_rows(experiment, 3, "2026-01-05", "shop"))]
    bad[2][column] = None
    after = [{**row, "span_id": f"after-{i}"} for i, row in enumerate(span_rows(experiment, 2, "2026-01-05", "shop"))]
    with contextlib.closing(store.writer("spans")) as writer:
        writer.append(pa.RecordBatch.from_pylist(before, schema=SPAN_SCHEMA))
        with pytest.raises(MissingRequiredValue, match=f"^spans row 2: {column} is missing") as refused:
            writer.append(pa.RecordBatch.from_pylist(bad, schema=SPAN_SCHEMA))
        writer.append(pa.RecordBatch.from_pylist(after, schema=SPAN_SCHEMA))
    assert isinstance(refused.value, AgentevalError)
    written = store.rows("SELECT span_id FROM spans ORDER BY span_id")
    assert [r["span_id"] for r in written] == sorted(r["span_id"] for r in before + after)


def test_write_refuses_a_row_missing_a_required_value_and_publishes_nothing(tmp_path):
    """Rows of two experiments, one without a name: the first experiment's file was published, then pyarrow
    raised on the second's."""
    store = Store(tmp_path / "s")
    rows = span_rows("e1", 2, "2026-01-05", "shop") + span_rows("e2", 2, "2026-01-05", "shop")
    rows[3]["name"] = None
    with pytest.raises(MissingRequiredValue, match="^spans row 3: name is missing"):
        store.write("spans", rows)
    assert store.rows("SELECT count(*) AS n FROM spans")[0]["n"] == 0
    assert not list((store.root / "spans").rglob("part-*"))


def test_buffered_writer_publishes_by_time(tmp_path):
    store = Store(tmp_path / "s")
    writer = store.writer("trials", flush_interval=0.05)
    writer.append(pa.RecordBatch.from_pylist(trial_rows("e", 3), schema=TRIALS))
    wait_until(lambda: store.query("SELECT count(*) n FROM trials").to_pylist()[0]["n"], "rows published by time")
    assert store.query("SELECT count(*) n FROM trials").to_pylist() == [{"n": 3}]
    writer.close()


def test_compaction_merges_and_keeps_every_row(tmp_path):
    store = Store(tmp_path / "s")
    for i in range(10):
        store.write("trials", trial_rows("e1", 5, start=i * 5))
    store.write("trials", trial_rows("e2", 1))
    before = store.rows("SELECT * FROM trials ORDER BY trial_id")
    result = compact(store)
    assert (result.partitions, result.files_before, result.files_after, result.rows) == (1, 10, 1, 50)
    files = sorted(p.parent.name for p in (store.root / "trials").glob("*/*.parquet"))
    assert files == ["experiment_id=e1", "experiment_id=e2"]
    assert store.rows("SELECT * FROM trials ORDER BY trial_id") == before
    assert not any((store.root / ".staging").rglob("*.parquet"))


def test_queries_in_flight_never_fail_nor_double_count_during_compaction(tmp_path):
    store = Store(tmp_path / "s")
    total = 0
    for i in range(40):
        store.write("trials", trial_rows("e1", 25, start=i * 25))
        total += 25
    errors, counts = [], []
    stop = threading.Event()

    def read() -> None:
        while not stop.is_set():
            try:
                counts.append(store.query("SELECT count(*) n FROM trial_history").to_pylist()[0]["n"])
            except Exception as exc:  # any failure is what this test is about
                errors.append(exc)

    readers = [threading.Thread(target=read) for _ in range(2)]
    for reader in readers:
        reader.start()
    for round_ in range(8):
        for i in range(5):
            store.write("trials", trial_rows("e1", 25, start=10_000 + round_ * 1000 + i * 25))
            total += 25
        compact(store)
    stop.set()
    for reader in readers:
        reader.join()
    assert errors == []
    assert counts and max(counts) <= total
    assert store.query("SELECT count(*) n, count(DISTINCT trial_id) d FROM trial_history").to_pylist() == [
        {"n": total, "d": total}
    ]


def test_compaction_conforms_older_files_to_the_current_schema(tmp_path):
    store = Store(tmp_path / "s")
    old = pa.table(
        {"experiment_id": ["e"], "trial_id": ["old"], "case_id": ["c"], "attempt": pa.array([1], pa.int32())}
    )
    publish(store.root, "trials", "experiment_id=e", old)
    store.write("trials", trial_rows("e", 1))
    compact(store)
    (merged,) = [p for p in (store.root / "trials" / "experiment_id=e").glob("*.parquet")]
    assert pq.read_schema(merged).names == TRIALS.names
    assert sorted(r["trial_id"] for r in store.query("SELECT trial_id FROM trials").to_pylist()) == ["e-t0", "old"]


def test_sql_command_formats(tmp_path):
    store = tmp_path / "s"
    Store(store).write("trials", trial_rows("e1", 3))
    runner = CliRunner()
    query = "SELECT trial_id, passed FROM trial_history ORDER BY trial_id"  # as stored: no scores judge them
    table = runner.invoke(main, ["sql", query, "--store", str(store)])
    assert table.exit_code == 0, table.output
    assert "e1-t0" in table.output and "3 rows" in table.output
    as_json = runner.invoke(main, ["sql", query, "--store", str(store), "--format", "json"])
    assert json.loads(as_json.output) == [
        {"trial_id": "e1-t0", "passed": False},
        {"trial_id": "e1-t1", "passed": True},
        {"trial_id": "e1-t2", "passed": True},
    ]
    as_csv = runner.invoke(main, ["sql", query, "--store", str(store), "--format", "csv"])
    assert as_csv.output.splitlines() == ["trial_id,passed", "e1-t0,False", "e1-t1,True", "e1-t2,True"]
    markdown = runner.invoke(main, ["sql", query, "--store", str(store), "--format", "markdown"])
    assert markdown.output.splitlines()[:3] == ["| trial_id | passed |", "|---|---|", "| e1-t0 | False |"]


def test_sql_command_reports_bad_sql_clearly(tmp_path):
    (tmp_path / "s").mkdir()  # an empty store: reads never create one
    result = CliRunner().invoke(main, ["sql", "SELECT * FROM nowhere", "--store", str(tmp_path / "s")])
    assert result.exit_code == 1
    assert "Error:" in result.output and "nowhere" in result.output and "Traceback" not in result.output


def test_table_output_never_interprets_markup(tmp_path):
    (tmp_path / "s").mkdir()
    result = CliRunner().invoke(main, ["sql", "SELECT '[bold red]hi[/]' AS reply", "--store", str(tmp_path / "s")])
    assert "[bold red]hi[/]" in result.output


def test_compact_command(tmp_path):
    store = tmp_path / "s"
    for i in range(3):
        Store(store).write("trials", trial_rows("e", 2, start=i * 2))
    result = CliRunner().invoke(main, ["compact", "--store", str(store)])
    assert result.exit_code == 0
    assert "3 files -> 1" in result.output


def test_demo_writes_spans_that_sql_reads(tmp_path):
    store = str(tmp_path / "demo-store")
    demo = CliRunner().invoke(main, ["demo", "--store", store])
    assert demo.exit_code == 0, demo.output
    assert "What is 6 * 7? -> 42" in demo.output
    rows = Store(store).query("SELECT name, count(*) n FROM spans GROUP BY name ORDER BY name").to_pylist()
    assert {"name": "execute_tool calculator", "n": 2} in rows
    assert {"name": "chat demo-model", "n": 2} in rows


def test_each_table_carries_its_own_schema_version(tmp_path):
    """The store's own tables are versioned by agenteval, the span table by its exporter: a new trials
    column needs no exporters release."""
    from agenteval import evaluate
    from agenteval.store import TABLE_VERSIONS, TABLES_VERSION
    from agenteval.store._schemas import schema_file
    from agenteval_exporters import SCHEMA_VERSION

    store = Store(tmp_path / "s")
    evaluate("mock", "arithmetic", cases=2, attempts=1, store=store, progress="none")
    assert TABLE_VERSIONS == {
        **dict.fromkeys(("experiments", "cases", "trials", "scores", "reviews"), TABLES_VERSION),
        "spans": SCHEMA_VERSION,
    }
    for table, version in TABLE_VERSIONS.items():
        assert (store.root / table / f"_schema-v{version}.parquet").is_file() and schema_file(table).endswith(
            f"v{version}.parquet"
        )
    (written,) = (store.root / "trials").glob("experiment_id=*/*.parquet")
    assert pq.read_metadata(written).metadata[b"agenteval.schema_version"] == str(TABLES_VERSION).encode()


def test_views_read_their_columns_from_the_schema_files_as_the_arrow_schemas_give_them(tmp_path, monkeypatch):
    """Reading a laid-out store takes each table's columns from its schema file, without pyarrow; the columns and
    DuckDB types are the Arrow schema's. Without its schema file (a store of an older version), a table's columns
    come from the Arrow schema."""
    from agenteval.store import _store
    from agenteval.store._schemas import schema_file

    store = Store(tmp_path / "s")
    store.write("trials", trial_rows("e1", 3))  # lays the store out: every table's schema file
    con = store.connect()
    for table in TABLES:
        from_file = _store._schema_file_columns(con, store.root / table / schema_file(table))
        assert from_file == _store._arrow_columns(table, con), table
    (store.root / "trials" / schema_file("trials")).unlink()
    monkeypatch.setattr(_store, "_EMPTY_RELATIONS", {})
    con = store.connect()
    assert [row[0] for row in con.execute("DESCRIBE trial_history").fetchall()] == TABLES["trials"].names
    assert con.execute("SELECT count(*) FROM trials").fetchone() == (3,)


def test_a_store_in_a_folder_named_with_glob_characters_reads_its_own_files_and_only_those(tmp_path):
    """DuckDB reads every name given to read_parquet as a glob, and the store's folder was part of the pattern: in
    `runs [2024]` (found by a hostile check) a run failed at its end with a traceback and every read of the store
    raised "No files found" ([2024] is one character of 2, 0 or 4), and a store in `a?b` read the files of `a*b` as
    well. Here `runs [2024] a?b`, beside `runs 2 a-b`, which the unescaped pattern matched instead of the store."""
    sibling = Store(tmp_path / "runs 2 a-b")
    sibling.write("trials", trial_rows("other", 4))
    sibling.write("spans", span_rows("other", 3, "2026-01-05", "shop"))
    store = tmp_path / "runs [2024] a?b"
    runner = CliRunner()
    run = runner.invoke(main, ["run", "-d", "arithmetic", "-a", "mock", "--cases", "3", "--store", str(store), "-q"])
    assert run.exit_code == 0, run.output
    for i in range(3):  # small files, and spans stored twice, for the compaction to merge and look into
        Store(store).write("trials", trial_rows("e", 2, start=i * 2))
        Store(store).write("spans", span_rows("e", 2, "2026-01-05", "shop"))
    compacted = runner.invoke(main, ["compact", "--store", str(store)])
    assert compacted.exit_code == 0, compacted.output
    assert "dropped 4 span rows" in compacted.output
    counted = "SELECT (SELECT count(*) FROM trials) AS trials, (SELECT count(*) FROM spans) AS spans"
    assert Store(store).query(counted, read_only=True).to_pylist() == [{"trials": 9 + 6, "spans": 27 + 2}]
    assert Store(store).query(counted).to_pylist() == [{"trials": 15, "spans": 29}]
    sql = runner.invoke(main, ["sql", counted, "--store", str(store), "--format", "csv"])
    assert sql.exit_code == 0, sql.output
    assert sql.output.splitlines()[-1] == "15,29"
    doctor = runner.invoke(main, ["doctor", "--store", str(store)])
    assert doctor.exit_code == 0, doctor.output
    assert "all readable" in doctor.output
    report = runner.invoke(main, ["report", "--store", str(store), "--format", "json"])
    assert report.exit_code == 0, report.output
    assert snapshot_folders(Store(store)), "the run's and the compaction's report figures were saved"
