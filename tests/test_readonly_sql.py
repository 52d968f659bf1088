"""`agenteval sql` only reads: one read statement over the store's views, on a locked DuckDB connection.
Read-only commands never create a store; numbers stay numbers in JSON and CSV."""

from __future__ import annotations

import csv
import hashlib
import io
import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner

from agenteval.cli import main
from agenteval.run import evaluate
from agenteval.scorers import rescore
from agenteval.store import NoStore, NotReadOnly, Store, compact, doctor


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("ro") / "store"
    evaluate("mock", "arithmetic", cases=4, attempts=2, store=root, progress="none")
    return root


def fingerprint(folder: Path) -> dict[str, str]:
    """Every file and folder under ``folder`` (and beside it), with each file's hash."""
    return {
        str(p.relative_to(folder.parent)): hashlib.sha256(p.read_bytes()).hexdigest() if p.is_file() else "dir"
        for p in sorted(folder.parent.rglob("*"))
    }


def sql(store: Path, query: str, fmt: str = "json"):
    return CliRunner().invoke(main, ["sql", query, "--store", str(store), "--format", fmt])


def refusals(store: Path, outside: Path) -> list[str]:
    trials_file = next((store / "trials").glob("experiment_id=*/*.parquet"))
    return [
        f"COPY (SELECT * FROM trial_history WHERE false) TO '{trials_file}' (FORMAT parquet)",
        f"COPY (SELECT * FROM trial_history) TO '{store / 'trials' / 'experiment_id=fake' / 'part-1.parquet'}'",
        f"COPY (SELECT 1 AS x) TO '{outside / 'written.csv'}'",
        f"EXPORT DATABASE '{outside / 'exported'}'",
        f"ATTACH '{outside / 'new.duckdb'}' AS other",
        f"ATTACH '{store / 'inside.duckdb'}' AS other",
        "INSTALL httpfs",
        "LOAD httpfs",
        "SET enable_external_access = true",
        "RESET lock_configuration",
        "CREATE TABLE t AS SELECT 1",
        "CREATE OR REPLACE VIEW trials AS SELECT 1 AS fake",
        "DROP VIEW trials",
        "INSERT INTO trials SELECT * FROM trials",
        "DELETE FROM trials",
        "CALL pragma_version()",
        "PRAGMA version",
        "PIVOT trials ON outcome USING count(*)",  # runs as several statements: it creates a type first
        "SELECT * FROM (PIVOT trials ON outcome USING count(*))",
        "SELECT 1; DROP VIEW trials",
        "SELECT 1; SELECT 2",
        # A SELECT can reach files only through table functions that read; outside the store they are refused.
        "SELECT * FROM read_csv('/etc/passwd')",
        f"SELECT * FROM read_text('{outside / 'secret.txt'}')",
    ]


def test_sql_refuses_every_statement_that_is_not_one_read_and_changes_no_file(store, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret.txt").write_text("not for agenteval sql")
    before, outside_before = fingerprint(store), sorted(outside.iterdir())
    for query in refusals(store, outside):
        result = sql(store, query)
        assert result.exit_code in (1, 2), (query, result.output)
        lines = result.output.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("Error: "), (query, result.output)
        assert "Traceback" not in result.output and "not for agenteval" not in result.output, query
        assert fingerprint(store) == before, query
        assert sorted(outside.iterdir()) == outside_before, query
    # The views are still there and give what they gave.
    assert json.loads(sql(store, "SELECT count(*) AS n FROM trials").output) == [{"n": 8}]


@pytest.mark.parametrize(
    ("query", "named"),
    [
        ("PIVOT trials ON outcome USING count(*)", "PIVOT"),
        ("SELECT * FROM (PIVOT trials ON outcome USING count(*))", "PIVOT"),
        ("INSTALL httpfs", "INSTALL"),
        ("CALL pragma_version()", "CALL"),
    ],
)
def test_a_refusal_names_the_statement_as_written(store, query, named):
    """PIVOT was refused as "MULTI is not allowed" and INSTALL as "LOAD": DuckDB's statement types, not the words
    the user wrote."""
    result = sql(store, query)
    assert result.output.startswith(f"Error: {named}"), result.output
    assert "MULTI" not in result.output


@pytest.mark.parametrize(
    "query",
    [
        "SELECT count(*) AS n FROM trials",
        "WITH t AS (SELECT * FROM trials) SELECT count(*) AS n FROM t",
        "FROM trials SELECT count(*) AS n",
        "DESCRIBE trials",
        "SHOW TABLES",
        "SUMMARIZE trials",
        "EXPLAIN SELECT count(*) FROM spans",
    ],
)
def test_sql_runs_read_statements(store, query):
    before = fingerprint(store)
    result = sql(store, query)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output)
    assert fingerprint(store) == before


def test_an_empty_query_is_a_clear_error(store):
    for query in ("", "   ", "/* only a comment */"):
        result = sql(store, query)
        assert result.exit_code == 1 and result.output.startswith("Error: no SQL statement"), result.output


def test_read_only_connection_from_python_is_locked_and_the_default_stays_the_callers(store, tmp_path):
    before = fingerprint(store)
    con = Store(store).connect(read_only=True)
    assert con.execute("SELECT count(*) FROM trials").fetchone() == (8,)
    for locked in ("SET enable_external_access = true", f"COPY (SELECT 1) TO '{tmp_path / 'x.csv'}'"):
        with pytest.raises(duckdb.Error):
            con.execute(locked)
    con.close()
    with pytest.raises(NotReadOnly, match="DELETE is not allowed"):
        Store(store).query("DELETE FROM trials", read_only=True)
    assert fingerprint(store) == before
    # The default connection is the caller's: temporary tables and files outside the store work.
    con = Store(store).connect()
    con.execute("CREATE TEMP TABLE mine AS SELECT * FROM trials")
    con.execute(f"COPY mine TO '{tmp_path / 'mine.csv'}'")
    con.close()
    assert (tmp_path / "mine.csv").exists()


@pytest.mark.parametrize(
    "args",
    [
        ["experiments"],
        ["report"],
        ["sql", "SELECT 1"],
        ["compare", "a", "b"],
        ["power", "--from", "a"],  # said "no experiment 'a' in ...", as though the store were there
        # Commands that rewrite a store: compact made the folder (and its .locks/) and said "compacted 0
        # partition(s)", rescore said "the store is empty" and doctor "there is no store" without what to do.
        ["compact"],
        ["rescore"],
        ["rescore", "20260101-000000-abcdef"],
        ["doctor"],
        ["doctor", "--dry-run"],
        ["prune", "--older-than", "1d"],
    ],
)
def test_commands_given_a_missing_store_never_create_one(tmp_path, args):
    missing = tmp_path / "mistyped"
    result = CliRunner().invoke(main, [*args, "--store", str(missing)])
    assert result.exit_code == 1, result.output
    assert result.output.strip().splitlines() == [
        f"Error: there is no store at {missing}: check --store (or AGENTEVAL_STORE), or run `agenteval run` first"
    ]
    assert not missing.exists() and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("call", [compact, doctor, rescore], ids=["compact", "doctor", "rescore"])
def test_the_python_functions_that_rewrite_a_store_refuse_a_missing_one(tmp_path, call):
    missing = tmp_path / "mistyped"
    with pytest.raises(NoStore, match="there is no store at"):
        call(Store(missing))
    assert not missing.exists()


def test_reads_of_a_spans_only_store_create_nothing(tmp_path):
    """A store the exporter alone wrote: the views of the other tables are empty, with their columns."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from agenteval_exporters import ParquetSpanExporter

    root = tmp_path / "spans-only"
    exporter = ParquetSpanExporter(root)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    with provider.get_tracer("t").start_as_current_span("work"):
        pass
    provider.shutdown()
    before = fingerprint(root)
    assert json.loads(sql(root, "SELECT count(*) AS n FROM spans").output) == [{"n": 1}]
    assert json.loads(sql(root, "SELECT count(*) AS n, count(passed) AS p FROM trials").output) == [{"n": 0, "p": 0}]
    for args in (["experiments"], ["report"]):
        result = CliRunner().invoke(main, [*args, "--store", str(root)])
        assert "Traceback" not in result.output, result.output
    assert fingerprint(root) == before


def test_sums_and_decimals_are_numbers_in_json_and_csv(store):
    query = "SELECT sum(attempt) AS total, 1.25::DECIMAL(10, 2) AS price, 10::HUGEINT * 10 AS big FROM trials"
    result = sql(store, query)
    assert result.exit_code == 0, result.output
    assert json.loads(result.output) == [{"total": 12, "price": 1.25, "big": 100}]
    as_csv = list(csv.DictReader(io.StringIO(sql(store, query, "csv").output)))
    assert as_csv == [{"total": "12", "price": "1.25", "big": "100"}]


def test_json_output_is_strict_json_when_values_are_not_finite(store):
    """JSON has no NaN or Infinity; written as Python writes them, jq and JSON.parse refused the whole result."""
    query = "SELECT 'nan'::DOUBLE AS x, ['inf'::DOUBLE, 1.5] AS l, {'a': '-inf'::FLOAT, 'b': 2} AS s"
    result = sql(store, query)
    assert result.exit_code == 0, result.output

    def refuse(constant: str) -> None:
        raise ValueError(f"{constant} is not JSON")

    assert json.loads(result.stdout, parse_constant=refuse) == [{"x": None, "l": [None, 1.5], "s": {"a": None, "b": 2}}]


def test_json_output_says_on_stderr_which_columns_had_values_written_as_null(store):
    """DuckDB's own shell writes NaN as null in its json mode, its to_json and COPY write bare NaN and Infinity (not
    JSON), Python's json.dumps too; null parses everywhere, but was written without a word, so a user read an
    infinite ratio as a missing one. stdout stays the JSON alone; stderr names the columns and the count."""
    query = (
        "SELECT 'nan'::DOUBLE AS x, ['inf'::DOUBLE, 1.5, '-inf'::DOUBLE] AS l, NULL::DOUBLE AS missing, 2.5 AS fine "
        "UNION ALL SELECT '-inf'::DOUBLE, [], NULL, 1"
    )
    result = sql(store, query)
    assert result.exit_code == 0, result.output
    assert json.loads(result.stdout) == [
        {"x": None, "l": [None, 1.5, None], "missing": None, "fine": 2.5},
        {"x": None, "l": [], "missing": None, "fine": 1.0},
    ]
    assert result.stderr == (
        "note: JSON has no NaN or infinity: 4 such values written as null, in columns x (2), l (2); --format csv "
        "keeps them (nan, inf, -inf)\n"
    )
    finite = sql(store, "SELECT 1.5::DOUBLE AS x, NULL::DOUBLE AS y")
    assert finite.stderr == "" and json.loads(finite.stdout) == [{"x": 1.5, "y": None}]
    as_csv = sql(store, query, "csv")
    assert as_csv.stderr == "" and as_csv.stdout.splitlines()[1].startswith("nan,")


def test_explain_analyze_of_a_write_is_refused_and_writes_nothing(store, tmp_path):
    """EXPLAIN ANALYZE runs the statement it explains: a COPY under it wrote into the store, which
    the connection's allowed_directories lets through, so the statement explained must be a read too."""
    target = store / "trials" / "experiment_id=fake" / "part-1.parquet"
    before = fingerprint(store)
    for query in (
        f"EXPLAIN ANALYZE COPY (SELECT * FROM trial_history) TO '{target}'",
        f"EXPLAIN ANALYSE COPY (SELECT 1 AS x) TO '{store / 'written.csv'}'",
        f"EXPLAIN (ANALYZE) COPY (SELECT 1 AS x) TO '{store / 'written.csv'}'",
        f"EXPLAIN (FORMAT JSON, ANALYZE) COPY (SELECT 1 AS x) TO '{store / 'written.csv'}'",
        f"EXPLAIN /* a comment */ ANALYZE COPY (SELECT 1 AS x) TO '{store / 'written.csv'}'",
        "EXPLAIN ANALYZE CREATE TABLE t AS SELECT 1",
        "EXPLAIN ANALYZE CHECKPOINT",
    ):
        result = sql(store, query)
        assert result.exit_code == 1, (query, result.output)
        assert result.output.startswith("Error: ") and "not allowed" in result.output, (query, result.output)
        assert fingerprint(store) == before, query
    for query in (
        "EXPLAIN ANALYZE SELECT count(*) FROM trials",
        "EXPLAIN (ANALYZE, FORMAT JSON) SELECT 1",
        "EXPLAIN (SELECT 1)",
        "EXPLAIN ANALYZE WITH t AS (SELECT 1) SELECT * FROM t",
    ):
        result = sql(store, query)
        assert result.exit_code == 0, (query, result.output)
    assert fingerprint(store) == before


def test_csv_keeps_every_digit_of_a_float(store):
    """CSV is for other programs: a float rounded to six digits for display (1.23457e+08 for 123456789.123, a trial
    of 20 minutes to the second) summed to other totals than the report's."""
    query = (
        "SELECT 123456789.123::DOUBLE AS big, 0.000123456789::DOUBLE AS small, sum(duration_ms) AS total FROM trials"
    )
    exact = json.loads(sql(store, query).output)[0]
    as_csv = list(csv.DictReader(io.StringIO(sql(store, query, "csv").output)))
    assert [{k: float(v) for k, v in row.items()} for row in as_csv] == [exact]
    assert exact["big"] == 123456789.123 and exact["small"] == 0.000123456789


def test_a_select_whose_cte_copies_to_a_file_is_refused_and_writes_nothing(store, tmp_path):
    """DuckDB runs a COPY given as a CTE of a SELECT (the statement's type is SELECT): it wrote anywhere in the
    store, even over a trials file (here with no rows: the trials lost), so a read must hold no operator that
    writes, however it is spelled."""
    trials_file = next((store / "trials").glob("experiment_id=*/*.parquet"))
    emptied = f"COPY (SELECT * FROM trial_history WHERE false) TO '{trials_file}' (FORMAT parquet)"
    written = f"COPY (SELECT 1 AS x) TO '{store / 'written.csv'}'"
    before = fingerprint(store)
    for query in (
        f"WITH x AS ({emptied}) SELECT 1",
        f"WITH x AS ({written}) SELECT * FROM x",
        f"WITH x AS MATERIALIZED ({written}) SELECT 1",
        f"WITH t AS (SELECT 1), x AS ({written}) SELECT * FROM t",
        f"EXPLAIN ANALYZE WITH x AS ({written}) SELECT 1",
    ):
        result = sql(store, query)
        assert result.exit_code == 1, (query, result.output)
        assert result.output.startswith("Error: ") and "not allowed" in result.output, (query, result.output)
        assert fingerprint(store) == before, query
    assert json.loads(sql(store, "SELECT count(*) AS n FROM trials").output) == [{"n": 8}]
    # From Python with parameters, which the plan is made with too.
    copy = f"WITH x AS (COPY (SELECT ?::INT AS a) TO '{store / 'written.csv'}') SELECT 1 AS one"
    with pytest.raises(NotReadOnly, match="COPY_TO_FILE is not allowed"):
        Store(store).query(copy, [5], read_only=True)
    assert fingerprint(store) == before
    # Words are not operators: a read that names them still runs.
    assert json.loads(sql(store, "SELECT 1 AS copy, 'COPY x TO y' AS text").output) == [
        {"copy": 1, "text": "COPY x TO y"}
    ]


def test_a_long_result_shows_its_first_rows_on_the_terminal_and_every_row_as_csv_or_json(store):
    """A table of every row of a large result (`SELECT * FROM spans`) was drawn cell by cell: 3,000,000 rows had
    printed nothing after a minute. The table shows the first rows and says how many there are and how to get
    them all; csv, json and markdown keep every row."""
    query = "SELECT range AS n FROM range(2500)"
    table = sql(store, query, "table")
    assert table.exit_code == 0, table.output
    assert "1,000 of 2,500 rows shown: --format csv or json gives them all" in table.output
    assert "│ 999 " in table.output and "│ 1000 " not in table.output
    assert sql(store, query, "markdown").output.count("\n| ") == 2_500  # text for a file or a page: every row
    assert len(sql(store, query, "csv").output.splitlines()) == 2_500 + 1
    assert len(json.loads(sql(store, query, "json").output)) == 2_500
    short = sql(store, "SELECT range AS n FROM range(3)", "table")
    assert short.output.rstrip().endswith("3 rows")


# `agenteval sql` in its own process, capped well above what its limit lets a statement take, so that the statements
# below, which would take 2 to 7 GB unbounded, can never fill the shared machine when the limit fails to hold.
GUARDED = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (3 * 2**30, 3 * 2**30))
from agenteval.cli import main
sys.argv = ["agenteval", *sys.argv[1:]]
main()
"""

BUILT_HUGE = (
    "SELECT repeat('x', 2000000000) AS s",  # a value DuckDB's memory limit does not count
    "SELECT length(list(range(100000000))) AS n",
    "SELECT length(string_agg(a.attributes || b.attributes || repeat('x', 2000000), ',')) AS n FROM spans a, spans b",
)


@pytest.mark.parametrize("query", BUILT_HUGE)
def test_a_statement_past_its_memory_limit_is_a_one_line_error_not_a_killed_process(store, query):
    """Statements building huge values (measured unbounded: 2 to 6.9 GB, then a MemoryError traceback under an 8 GB
    cap, or the OOM killer) stop at --memory-limit: exit 1, one line naming the limit and how to raise it."""
    done = subprocess.run(
        [sys.executable, "-c", GUARDED, "sql", query, "--store", str(store), "--memory-limit", "100MB"],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, (done.returncode, done.stderr[-2000:])
    assert done.stderr.splitlines() == [
        "Error: the statement needed more memory than the 100MB a statement may use (--memory-limit), and was "
        "stopped: narrow it (a WHERE, a LIMIT, fewer or shorter values), or raise --memory-limit"
    ], done.stderr[-2000:]
    assert done.stdout == ""


BIG_RESULT = "SELECT i, repeat(chr(65 + (i % 26)::INT), 1000) AS s FROM range(300000) t(i)"
"""300 MB of rows: the command held the whole result before printing it, so past --memory-limit 100MB it failed."""


@pytest.mark.parametrize("fmt", ["csv", "json", "markdown", "table"])
def test_a_result_larger_than_the_memory_limit_is_printed_as_it_is_read(store, tmp_path, fmt):
    """The rows are read and printed a batch at a time: a result three times --memory-limit goes to a file whole
    (the table format draws its first 1,000 rows and counts the rest), the same text as before."""
    out = tmp_path / f"out.{fmt}"
    with out.open("w") as stdout:
        done = subprocess.run(
            [sys.executable, "-c", GUARDED, "sql", BIG_RESULT, "--store", str(store), "--memory-limit", "100MB"]
            + ["--format", fmt],
            stdout=stdout,
            stderr=subprocess.PIPE,
            text=True,
            timeout=300,
        )
    assert done.returncode == 0, done.stderr[-2000:]
    text = out.read_text()
    last = chr(65 + 299_999 % 26) * 1000
    if fmt == "table":
        assert text.endswith("1,000 of 300,000 rows shown: --format csv or json gives them all\n"), text[-300:]
        assert "A" * 150 in text and "999" in text
        return
    assert text.endswith("\n")
    if fmt == "csv":
        assert text.count("\n") == 300_001 and text.splitlines()[-1] == f"299999,{last}"
    elif fmt == "json":
        rows = json.loads(text)
        assert len(rows) == 300_000 and rows[-1] == {"i": 299_999, "s": last}
    else:
        assert text.count("\n| ") == 300_000 and text.splitlines()[-1] == f"| 299999 | {last} |"


def test_the_memory_limit_is_given_as_a_size_and_lifted_after_the_statement(store):
    runner = CliRunner()
    for wrong in ("lots", "4 parsecs", "0MB", "-1GB"):
        refused = runner.invoke(main, ["sql", "SELECT 1", "--store", str(store), "--memory-limit", wrong])
        assert refused.exit_code == 2 and "is not a size: write a number and a unit" in refused.output, wrong
    before = resource.getrlimit(resource.RLIMIT_DATA)
    stopped = runner.invoke(main, ["sql", BUILT_HUGE[0], "--store", str(store), "--memory-limit", "100MB"])
    assert stopped.exit_code == 1 and "100MB a statement may use (--memory-limit)" in stopped.output
    assert resource.getrlimit(resource.RLIMIT_DATA) == before  # this process's cap is its own again
    ok = runner.invoke(
        main, ["sql", "SELECT count(*) AS n FROM trials", "--store", str(store), "--memory-limit", "1.5GB"]
    )
    assert ok.exit_code == 0 and "8" in ok.output, ok.output


def test_a_read_only_statement_past_its_memory_never_spills_to_disk(store, tmp_path, monkeypatch):
    """A read-only connection spilled what did not fit in its memory to `.tmp` in the working folder (DuckDB's
    default for a database in memory), up to 90% of the free disk: a read wrote files. Now it stops instead."""
    monkeypatch.chdir(tmp_path)
    con = Store(store).connect(read_only=True, memory_limit=50 * 10**6)
    try:
        with pytest.raises(duckdb.OutOfMemoryException):
            con.execute("SELECT count(*) FROM (SELECT i FROM range(20000000) t(i) ORDER BY random())").fetchall()
    finally:
        con.close()
    assert list(tmp_path.iterdir()) == []


# An instant and how it reads in UTC; in Tokyo (no daylight saving time) it read 2024-01-01T09:00:00+09:00.
INSTANT = "SELECT TIMESTAMPTZ '2024-01-01 00:00:00+00' AS t, (SELECT min(started_at) FROM experiments) AS first_run"
IN_UTC = "2024-01-01T00:00:00+00:00"


def test_sql_shows_times_in_utc_whatever_the_machines_time_zone(store):
    """``agenteval sql`` showed TIMESTAMPTZ values in the machine's zone, the report and everything else in UTC:
    one instant read two ways. The read-only connection's zone is UTC; ``AT TIME ZONE`` still gives another."""
    env = {**os.environ, "TZ": "Asia/Tokyo"}
    command = [sys.executable, "-m", "agenteval.cli", "sql", "--store", str(store), "--format", "csv"]
    shown = subprocess.run([*command, INSTANT], capture_output=True, text=True, env=env, timeout=120)
    assert shown.returncode == 0, shown.stderr
    rows = list(csv.DictReader(io.StringIO(shown.stdout)))
    assert rows[0]["t"] == IN_UTC and rows[0]["first_run"].endswith("+00:00"), shown.stdout
    local = "SELECT TIMESTAMPTZ '2024-01-01 00:00:00+00' AT TIME ZONE 'Asia/Tokyo' AS t"
    tokyo = subprocess.run([*command, local], capture_output=True, text=True, env=env, timeout=120)
    assert tokyo.returncode == 0 and tokyo.stdout.splitlines()[1] == "2024-01-01T09:00:00", tokyo.stdout
