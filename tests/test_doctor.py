"""A damaged file in the store: every command names it and points to `agenteval doctor`, which sets
unreadable files aside and says what they held; the rest of the store reads again, and resume re-runs
the trials that were lost."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from agenteval.run import evaluate
from agenteval.store import Store, compact, doctor


def agenteval(store: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "AGENTEVAL_STORE": str(store)}
    return subprocess.run(
        [sys.executable, "-m", "agenteval.cli", *args], capture_output=True, text=True, env=env, timeout=120
    )


def damage(path: Path, how: str) -> None:
    data = path.read_bytes()
    path.write_bytes(b"" if how == "empty" else data[: len(data) // 2] if how == "truncated" else b"x" * len(data))


@pytest.fixture
def two_runs(tmp_path):
    store = tmp_path / "store"
    first = evaluate("mock", "arithmetic", cases=6, attempts=2, store=store, progress="none")
    second = evaluate("mock", "arithmetic", cases=6, attempts=2, store=store, progress="none")
    return store, first.id, second.id


@pytest.mark.parametrize("how", ["empty", "truncated", "garbage"])
def test_the_doctor_finds_empty_truncated_and_garbage_files(two_runs, how):
    store, first, _ = two_runs
    (broken,) = (store / "scores" / f"experiment_id={first}").glob("*.parquet")
    damage(broken, how)
    report = doctor(Store(store), dry_run=True)
    assert [(p.table, p.path) for p in report.unreadable] == [("scores", broken)]
    assert report.files_checked == len(list(store.rglob("*.parquet")))
    listed = agenteval(store, "experiments")
    assert listed.returncode == 1 and broken.name in listed.stderr and "Traceback" not in listed.stderr


def test_every_command_names_the_unreadable_file_and_the_doctor_sets_it_aside(two_runs):
    store, first, second = two_runs
    (broken,) = (store / "trials" / f"experiment_id={first}").glob("*.parquet")
    damage(broken, "truncated")
    for command in (
        ("experiments",),
        ("report", first),
        ("rescore", second),
        ("gate", "--baseline", first, "--candidate", second),
    ):
        done = agenteval(store, *command)
        assert done.returncode in (1, 3), (command, done.stderr)
        assert "Traceback" not in done.stderr + done.stdout
        assert broken.name in done.stderr + done.stdout and "agenteval doctor" in done.stderr + done.stdout

    # The second experiment's own files are intact: its report, saved by its run, is shown from what it saved.
    intact = agenteval(store, "report", second, "--format", "json")
    assert intact.returncode == 0 and json.loads(intact.stdout)["trials"] == 12

    dry = agenteval(store, "doctor", "--dry-run")
    assert dry.returncode == 1 and f"{broken}: unreadable" in dry.stdout and "left in place" in dry.stdout
    assert broken.exists()

    fixed = agenteval(store, "doctor")
    assert fixed.returncode == 0, fixed.stderr
    assert "1 unreadable (trials)" in fixed.stdout and "agenteval run --resume" in fixed.stdout
    assert not broken.exists()
    (moved,) = (store / ".quarantine").rglob("*.unreadable")
    assert moved.name == broken.name + ".unreadable"
    # Every file that still ends in .parquet reads, and the views work again.
    for path in store.rglob("*.parquet"):
        pq.read_table(path)
    assert agenteval(store, "doctor").stdout.strip().endswith("all readable")
    listed = agenteval(store, "experiments", "--format", "json")
    assert listed.returncode == 0, listed.stderr
    # The lost trials are re-run by a resume of their experiment: each once.
    resumed = agenteval(store, "run", "--resume", first, "--json")
    assert resumed.returncode == 0, resumed.stderr
    assert json.loads(resumed.stdout)["this_run"]["trials"] == 12
    rows = Store(store).rows(
        "SELECT count(*) AS n, count(DISTINCT (case_id, attempt)) AS d FROM trials WHERE experiment_id = ?", [first]
    )
    assert rows == [{"n": 12, "d": 12}]


def test_a_run_into_a_damaged_store_keeps_its_trials_and_says_what_to_do(two_runs):
    store, first, _ = two_runs
    (broken,) = (store / "spans" / f"experiment_id={first}").glob("*.parquet")
    damage(broken, "truncated")
    done = agenteval(store, "run", "--dataset", "arithmetic", "--agent", "mock", "--cases", "4", "--attempts", "1")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert broken.name in done.stderr and "agenteval doctor" in done.stderr
    assert agenteval(store, "doctor").returncode == 0
    newest = Store(store).rows("SELECT experiment_id FROM experiments ORDER BY started_at DESC LIMIT 1")[0]
    counted = Store(store).rows("SELECT count(*) AS n FROM trials WHERE experiment_id = ?", [newest["experiment_id"]])
    assert counted == [{"n": 4}]  # the run itself finished and saved everything before the summary failed


def test_the_doctor_removes_saved_figures_that_cannot_be_read_and_reports_still_read(two_runs):
    from agenteval.analysis import build_report
    from agenteval.store._snapshots import snapshot_folders

    store, first, _ = two_runs
    before = build_report(Store(store), first).to_dict()
    folder = next(f for f in snapshot_folders(Store(store)) if first in str(f))
    damage(next(folder.glob("judged*.figures")), "truncated")
    # A damaged snapshot costs time, never a figure: the report computes what it cannot read.
    assert build_report(Store(store), first).to_dict() == before
    assert doctor(Store(store), dry_run=True).snapshots_removed == [folder] and folder.exists()
    report = doctor(Store(store))
    assert report.healthy and report.snapshots_removed == [folder] and not folder.exists()
    assert build_report(Store(store), first).to_dict() == before


def test_a_readable_file_whose_column_types_do_not_fit_its_table_is_set_aside_so_compaction_merges_again(two_runs):
    """A file that reads but holds a column of another type (text attempts: written by hand or by another tool)
    made every compaction leave its partition, pointing to the doctor, which found every file readable."""
    import pyarrow as pa

    store, first, _ = two_runs
    (good,) = (store / "trials" / f"experiment_id={first}").glob("*.parquet")
    rows = pq.read_table(good).slice(0, 2)
    rows = rows.set_column(rows.schema.get_field_index("attempt"), "attempt", pa.array(["one", "two"]))
    rows = rows.set_column(rows.schema.get_field_index("trial_id"), "trial_id", pa.array(["x1", "x2"]))
    alien = good.with_name("part-alien.parquet")
    pq.write_table(rows, alien)
    compacted = agenteval(store, "compact")
    assert compacted.returncode == 0 and "left 1 partition(s) as they were" in compacted.stderr, compacted.stderr

    dry = agenteval(store, "doctor", "--dry-run")
    assert dry.returncode == 1 and f"{alien}: unreadable" in dry.stdout, dry.stdout
    assert "do not fit the trials table" in dry.stdout and "2 rows" in dry.stdout
    assert agenteval(store, "doctor").returncode == 0 and not alien.exists()
    compacted = agenteval(store, "compact")
    assert compacted.returncode == 0 and "left" not in compacted.stderr, compacted.stderr
    assert Store(store).rows("SELECT count(*) AS n FROM trials WHERE experiment_id = ?", [first]) == [{"n": 12}]


def spans_sent_both_ways(store: Path, traces: int, ways: int = 2) -> int:
    """Real spans of production traces (service shop) exported by two Parquet exporters into one store, as an
    application whose setup_tracing() writes the store and whose OTLP endpoint is a collect writing it too; the
    number of distinct spans."""
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from agenteval_exporters import ParquetSpanExporter

    provider = TracerProvider(resource=Resource.create({"service.name": "shop"}))
    for _ in range(ways):
        provider.add_span_processor(SimpleSpanProcessor(ParquetSpanExporter(store)))
    tracer = provider.get_tracer("test.twice")
    for n in range(traces):
        with tracer.start_as_current_span(f"invoke_agent {n}"):
            with tracer.start_as_current_span("chat"):
                pass
            with tracer.start_as_current_span("execute_tool"):
                pass
    provider.shutdown()
    return 3 * traces


def span_rows(store: Path) -> tuple[int, int]:
    """(rows, distinct spans) of the store's spans."""
    (row,) = Store(store).rows("SELECT count(*) AS n, count(DISTINCT (trace_id, span_id)) AS spans FROM spans")
    return row["n"], row["spans"]


def test_spans_stored_twice_are_found_by_the_doctor_and_kept_once_by_compaction(tmp_path):
    store = tmp_path / "store"
    spans = spans_sent_both_ways(store, 5)
    assert span_rows(store) == (2 * spans, spans)
    (partition,) = {p.parent for p in (store / "spans").rglob("*.parquet")}
    checked = agenteval(store, "doctor", "--dry-run")
    assert checked.returncode == 1 and "all readable" in checked.stdout, checked.stderr
    assert f"{spans} span rows repeat another row's (trace_id, span_id) in 1 partition(s)" in checked.stdout
    assert "agenteval compact" in checked.stdout and "one way only" in checked.stdout
    assert doctor(Store(store), dry_run=True).span_copies == {str(partition.absolute()): spans}
    compacted = agenteval(store, "compact")
    assert compacted.returncode == 0, compacted.stderr
    assert f"{spans} rows;" in compacted.stdout, compacted.stdout
    assert f"dropped {spans} span rows" in compacted.stdout and f"({2 * spans} rows read, {spans} written)" in (
        compacted.stdout
    )
    assert span_rows(store) == (spans, spans)
    assert len(list(partition.glob("*.parquet"))) == 1
    checked = agenteval(store, "doctor", "--dry-run")
    assert checked.returncode == 0 and "repeat" not in checked.stdout, checked.stdout


def test_a_file_merged_with_its_copies_before_compaction_dropped_them_is_rewritten_by_compact(tmp_path):
    """A compaction before copies were dropped merged both exporters' files into one: a partition of one file,
    which compactions leave alone, unless agenteval compact finds copies in it."""
    store = tmp_path / "store"
    spans = spans_sent_both_ways(store, 4)
    files = sorted((store / "spans").rglob("*.parquet"))
    merged = pa.concat_tables([pq.read_table(f) for f in files])
    pq.write_table(merged, files[0].with_name("part-merged.parquet"))
    for file in files:
        file.unlink()
    assert span_rows(store) == (2 * spans, spans)
    assert compact(Store(store)).copies_dropped == 0  # a run's compaction: not looked for
    checked = agenteval(store, "doctor")
    assert checked.returncode == 0 and f"{spans} span rows repeat" in checked.stdout, checked.stdout
    compacted = agenteval(store, "compact")
    assert compacted.returncode == 0 and f"dropped {spans} span rows" in compacted.stdout, compacted.stdout
    assert span_rows(store) == (spans, spans)


def test_compaction_of_spans_without_copies_keeps_every_row(tmp_path):
    store = tmp_path / "store"
    spans = spans_sent_both_ways(store, 3, ways=1) + spans_sent_both_ways(store, 3, ways=1)
    assert len(list((store / "spans").rglob("*.parquet"))) == 2
    result = compact(Store(store), drop_span_copies=True)
    assert (result.partitions, result.files_before, result.rows, result.copies_dropped) == (1, 2, spans, 0)
    assert span_rows(store) == (spans, spans)


def test_compact_keeps_the_first_row_of_each_span_in_the_order_of_its_files_and_rows(tmp_path):
    """Which copy is kept: the first in the partition's files by name (their publication time), then by row in a
    file; the copies here differ in name only, to tell them apart."""
    store = tmp_path / "store"
    start = 1_700_000_000_000_000_000

    def span(span_id: str, name: str) -> dict:
        return {
            "trace_id": "t" * 32,
            "span_id": span_id,
            "name": name,
            "kind": "INTERNAL",
            "start_time": start,
            "end_time": start + 1,
            "duration_ms": 0.0,
            "status_code": "UNSET",
            "service_name": "shop",
        }

    Store(store).write("spans", [span("s1", "first"), span("s1", "second"), span("s2", "first")])
    Store(store).write("spans", [span("s3", "first"), span("s2", "second"), span("s1", "third")])
    result = compact(Store(store), ["spans"], drop_span_copies=True)
    assert (result.rows, result.copies_dropped) == (3, 3)
    kept = Store(store).rows("SELECT span_id, name FROM spans ORDER BY span_id")
    assert kept == [{"span_id": f"s{n}", "name": "first"} for n in (1, 2, 3)]


SENDS_BOTH_WAYS = """
import sys
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from agenteval_exporters import ParquetSpanExporter

store, batches = sys.argv[1], int(sys.argv[2])
made = InMemorySpanExporter()
provider = TracerProvider(resource=Resource.create({"service.name": "shop"}))
provider.add_span_processor(SimpleSpanProcessor(made))
tracer = provider.get_tracer("test.twice")
direct, collected = ParquetSpanExporter(store), ParquetSpanExporter(store)
print("ready", flush=True)
sent = 0
for n in range(batches):
    for _ in range(5):
        with tracer.start_as_current_span(f"invoke_agent {n}"):
            with tracer.start_as_current_span("chat"):
                pass
    spans = made.get_finished_spans()
    made.clear()
    direct.export(spans)  # the copy written into the store directly, then the one that came through collect
    collected.export(spans)
    sent += len(spans)
direct.shutdown()
collected.shutdown()
print(sent, flush=True)
"""


def test_copies_arriving_while_compact_drops_copies_are_all_kept_once_by_the_next_compact(tmp_path):
    """Spans stored twice keep arriving (both copies, one file each) while compactions that drop copies run from
    another process: no span is lost, and once the writer is done one more agenteval compact leaves each span
    stored once."""
    store = tmp_path / "store"
    first = spans_sent_both_ways(store, 20)  # copies already there, so every compaction has some to drop
    writer = subprocess.Popen(
        [sys.executable, "-c", SENDS_BOTH_WAYS, str(store), "150"], stdout=subprocess.PIPE, text=True
    )
    assert writer.stdout.readline().strip() == "ready"
    dropped = []
    while writer.poll() is None:
        result = compact(Store(store), ["spans"], drop_span_copies=True)
        dropped.append(result.copies_dropped)
        rows, spans = span_rows(store)
        assert spans >= first and rows >= spans  # never a span lost on the way
    out, _ = writer.communicate(timeout=120)
    sent = first + int(out.split()[-1])
    assert writer.returncode == 0 and len(dropped) > 1 and sum(dropped) > 0
    assert span_rows(store)[1] == sent
    compacted = agenteval(store, "compact")
    assert compacted.returncode == 0, compacted.stderr
    assert span_rows(store) == (sent, sent)


def test_doctor_and_compact_of_many_files_show_their_progress_on_stderr(tmp_path):
    """Both went through thousands of small files without a word (6,000 files: 30 s and 22 s). Past a few hundred
    files (the doctor) or a few dozen partitions (compact) each says what it reads, on stderr, as a run does; what
    they print on stdout is as before."""
    store = tmp_path / "store"
    written = Store(store)
    for experiment in range(60):
        for line in range(10):
            written.write("cases", [{"experiment_id": f"e{experiment}", "case_id": f"c{line}", "line": line}])
    checked = agenteval(store, "doctor")
    files = int(checked.stdout.split(" files checked")[0].rsplit("\n", 1)[-1])
    assert files >= 600 and checked.stdout.endswith(f"{files} files checked: all readable\n"), checked.stdout
    lines = checked.stderr.splitlines()
    assert lines[:2] == [f"reading {files} files", f"0/{files} done"] and lines[-1] == f"{files}/{files} done", lines
    compacted = agenteval(store, "compact")
    assert compacted.stdout.startswith("compacted 60 partition(s): 600 files -> 60"), compacted.stdout
    lines = compacted.stderr.splitlines()
    partitions = int(lines[0].split()[1])
    assert lines[0] == f"compacting {partitions} partitions" and partitions >= 60, lines
    assert lines[-1] == f"{partitions}/{partitions} done" and "done" not in compacted.stdout, lines
    assert agenteval(store, "doctor").stderr == ""  # 60 files now: over before anyone would wait
