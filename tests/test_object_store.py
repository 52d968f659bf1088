"""Stores on object storage, against a real S3 server on loopback (moto in server mode, tests/s3_server.py):
run, report, rescore, compact, sql and doctor on ``s3://``; a run killed with SIGKILL and resumed from another
process, every trial exactly once; compaction beside readers, who always see one consistent set of files."""

from __future__ import annotations

import collections
import contextlib
import inspect
import json
import logging
import os
import signal
import subprocess
import sys
import uuid
from collections.abc import Iterator
from typing import Any

import fsspec
import pytest
from s3_server import environment, make_bucket, moto_server_process, stalled
from test_doctor import span_rows, spans_sent_both_ways
from waiting import returns_within, wait_until

from agenteval.dataset import load_dataset
from agenteval.store import Store
from agenteval_exporters.storefs import RemoteRoot

pytestmark = pytest.mark.heavy

CASES, ATTEMPTS = 30, 3
# A killed run's lease is free this long after its last heartbeat (30 s by default). Not shorter: a holder counts
# its lease lost once two thirds of this pass without a renewal, and on a loaded machine (the suite's two workers,
# the S3 server, the runs) a heartbeat's listing and write may take a good part of a second.
LEASE_SECONDS = "5"


@pytest.fixture(scope="module")
def s3_server() -> Iterator[tuple[subprocess.Popen, dict[str, str]]]:
    """The server's process (to stall it) and the variables that point S3 clients at it."""
    with (
        moto_server_process() as (server, variables),
        environment({**variables, "AGENTEVAL_LEASE_SECONDS": LEASE_SECONDS}),
    ):
        make_bucket("evals")
        yield server, variables


@pytest.fixture(scope="module")
def s3(s3_server: tuple[subprocess.Popen, dict[str, str]]) -> dict[str, str]:
    return s3_server[1]


@pytest.fixture
def store(s3: dict[str, str]) -> str:
    return f"s3://evals/{uuid.uuid4().hex[:8]}/store"


def agenteval(store: str, *args: str, check: bool = True) -> subprocess.CompletedProcess:
    env = {**os.environ, "AGENTEVAL_STORE": store}
    done = subprocess.run(
        [sys.executable, "-m", "agenteval.cli", *args], env=env, capture_output=True, text=True, timeout=300
    )
    assert not check or done.returncode == 0, done.stdout + done.stderr
    return done


def objects(store: str) -> list[str]:
    fs = fsspec.filesystem("s3")
    fs.invalidate_cache()
    prefix = store.removeprefix("s3://")
    return [key[len(prefix) + 1 :] for key in fs.find(prefix)]


def every_trial() -> list[tuple[str, int]]:
    cases = load_dataset("arithmetic", cases=CASES).cases
    return sorted((c.id, attempt) for c in cases for attempt in range(1, ATTEMPTS + 1))


def trial_keys(store: str, experiment_id: str) -> list[tuple[str, int]]:
    rows = Store(store).rows(
        "SELECT case_id, attempt FROM trial_history WHERE experiment_id = ? ORDER BY 1, 2", [experiment_id]
    )
    return [(r["case_id"], r["attempt"]) for r in rows]


RUN = ["run", "--dataset", "arithmetic", "--agent", "mock", "--cases", str(CASES), "--attempts", str(ATTEMPTS)]


def one_at_a_time(store: str, latency: float) -> subprocess.Popen:
    """The mock's run in a process of its own, one trial at a time, each taking ``latency`` seconds."""
    slowly = ["--agent-option", f"latency={latency}", "--concurrency", "1", "--json"]
    env = {**os.environ, "AGENTEVAL_STORE": store}
    command = [sys.executable, "-m", "agenteval.cli", *RUN, *slowly]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def recorded_experiment(store: str) -> str:
    """The id of the one experiment the store holds, once its run has recorded it."""
    (row,) = wait_until(lambda: Store(store).rows("SELECT experiment_id FROM experiment_history"), "a run")
    return row["experiment_id"]


COUNT_SCORES = "SELECT count(*) AS n, count(DISTINCT (pass_id, trial_id, scorer)) AS d FROM score_history"


def test_run_report_rescore_compact_sql_and_doctor_on_s3(store, s3):
    wrong = ["--agent-option", "wrong_rate=0.2"]
    summary = json.loads(agenteval(store, *RUN, *wrong, "--json").stdout)
    experiment_id = summary["experiment_id"]
    assert trial_keys(store, experiment_id) == every_trial()
    report = json.loads(agenteval(store, "report", experiment_id, "--format", "json").stdout)
    assert report["trials"] == CASES * ATTEMPTS
    agenteval(store, "rescore", experiment_id)
    listed = objects(store)
    # Only published files end in .parquet, each in a table's partition; nothing staged reached the bucket.
    assert not [key for key in listed if key.endswith(".partial")]
    assert any(key.startswith("scores/experiment_id=") for key in listed)
    before = agenteval(store, "sql", COUNT_SCORES, "--format", "json")
    compacted = agenteval(store, "compact").stdout
    assert "compacted" in compacted
    after = agenteval(store, "sql", COUNT_SCORES, "--format", "json")
    assert json.loads(before.stdout) == json.loads(after.stdout)  # count in == count out
    (row,) = json.loads(after.stdout)
    assert row["n"] == row["d"] == 2 * CASES * ATTEMPTS * len(report["scorers"])
    # Compaction made each partition one live file, named by its manifest; the files it replaced are gone.
    scores = [key for key in objects(store) if key.startswith("scores/experiment_id=")]
    assert [k.rpartition("/")[2].split("-")[0] for k in scores] == ["_manifest", "compacted"]
    assert json.loads(agenteval(store, "report", experiment_id, "--format", "json").stdout) == report
    assert agenteval(store, "doctor").stdout.strip().endswith("all readable")
    # Reads through DuckDB's view of the bucket: a query, and read-only SQL that may reach nothing else.
    refused = agenteval(store, "sql", "SELECT * FROM read_csv('/etc/passwd')", check=False)
    assert refused.returncode != 0
    # The run's stored records hold no credential, though the run had them in its environment.
    (experiment,) = Store(store).rows("SELECT environment, options FROM experiment_history LIMIT 1")
    assert s3["AWS_SECRET_ACCESS_KEY"] not in json.dumps(experiment)
    assert s3["AWS_ACCESS_KEY_ID"] not in json.dumps(experiment)
    # Retention by whole days is a file-system operation: on a bucket it says what to use instead.
    pruned = agenteval(store, "prune", "--older-than", "30d", check=False)
    assert pruned.returncode == 2 and "lifecycle rules" in pruned.stderr, pruned.stderr


def test_a_run_killed_mid_way_resumes_from_another_process_with_every_trial_once(store):
    # One trial at a time, 0.8 s each: about 72 s in all, so the run is still going after the refused resume
    # below (a fresh process that imports agenteval and reads the store) even on a loaded machine: at 0.3 s it
    # once finished all 90 before the refusal came back, with five other test processes beside it.
    first = one_at_a_time(store, latency=0.8)
    try:
        experiment_id = recorded_experiment(store)

        def published() -> int:
            return len(trial_keys(store, experiment_id))

        wait_until(lambda: published() >= 10, "the run to publish trials", timeout=120)
        # While it runs, its lease (an object on the store) keeps another process from resuming it.
        refused = agenteval(store, "run", "--resume", experiment_id, check=False)
        assert refused.returncode != 0 and "still running" in refused.stdout + refused.stderr, refused.stderr[-3000:]
        assert first.poll() is None, "the first run ended before it could be killed"
        os.kill(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            first.kill()
        first.communicate()
    assert first.returncode == -signal.SIGKILL
    assert published() < len(every_trial())

    # Its lease stops being renewed and expires; a resume waits for that, then runs only what is missing.
    def resumed() -> subprocess.CompletedProcess | None:
        # More at a time than the killed run, as the run's stored options allow: the rest takes seconds.
        done = agenteval(store, "run", "--resume", experiment_id, "--concurrency", "16", "--json", check=False)
        return done if done.returncode == 0 else None

    done = wait_until(resumed, "the killed run's lease to expire", timeout=120)
    assert json.loads(done.stdout)["status"] == "completed"
    assert trial_keys(store, experiment_id) == every_trial()  # every trial, exactly once
    (status,) = Store(store).rows("SELECT status FROM experiments")
    assert status["status"] == "completed"


def test_a_run_stopped_past_its_lease_saves_nothing_more_once_another_process_resumed_it(store):
    """A run stopped (Ctrl-Z, a suspended laptop or VM) for longer than its lease: another process resumes it, as
    it may. The stopped run used to carry on when continued, saving trial rows beside the resume's: 54 trial rows
    for 40 trials, and its own status row (failed, with a traceback) over the resume's. It now finds its lease gone
    before it commits trials, saves nothing more, records no status, and says so in one line.

    It is stopped just after a commit, with seconds before its next: a commit already under way when a process is
    stopped still lands when it goes on (closing that would take conditional writes; docs/scale.md says so)."""
    first = one_at_a_time(store, latency=3)
    try:
        experiment_id = recorded_experiment(store)
        published = wait_until(lambda: len(trial_keys(store, experiment_id)), "the run to publish trials", timeout=120)
        # Trial rows are a commit's last file: once more of them are seen, the next commit is a trial (3 s) away.
        wait_until(lambda: len(trial_keys(store, experiment_id)) > published, "another commit", timeout=120)
        os.kill(first.pid, signal.SIGSTOP)
        try:

            def resumed() -> subprocess.CompletedProcess | None:
                done = agenteval(store, "run", "--resume", experiment_id, "--concurrency", "16", "--json", check=False)
                return done if done.returncode == 0 else None

            done = wait_until(resumed, "the stopped run's lease to expire", timeout=120)
            assert json.loads(done.stdout)["status"] == "completed"
        finally:
            os.kill(first.pid, signal.SIGCONT)
        _, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    assert trial_keys(store, experiment_id) == every_trial()  # every trial, exactly once
    assert first.returncode == 1, err[-3000:]
    assert "Traceback" not in err and "is no longer this process's" in err, err[-3000:]
    (status,) = Store(store).rows("SELECT status FROM experiments")
    assert status["status"] == "completed"


WRITER = """
import sys, pyarrow as pa
from agenteval.store import Store
store, files, rows = Store(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
for f in range(files):
    store.write("cases", [{"experiment_id": "x", "case_id": f"c{f}-{r}", "line": r, "input": "q"} for r in range(rows)])
print("written", flush=True)
"""

COMPACTOR = """
import sys
from agenteval.store import Store, compact
store = Store(sys.argv[1])
merged = 0
while sys.stdin.readline().strip() == "again":
    merged += compact(store, ["cases"]).files_before
    print(merged, flush=True)
"""


def test_readers_see_one_consistent_set_while_compaction_and_writers_run(store):
    files, rows = 40, 5
    Store(store).ensure()
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)}
    writer = subprocess.Popen(
        [sys.executable, "-c", WRITER, store, str(files), str(rows)], env=env, stdout=subprocess.PIPE, text=True
    )
    compactor = subprocess.Popen(
        [sys.executable, "-c", COMPACTOR, store], env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True
    )
    assert compactor.stdin is not None and compactor.stdout is not None
    seen: list[int] = []
    merged = 0
    try:
        while writer.poll() is None or len(seen) < 3 or merged == 0:
            compactor.stdin.write("again\n")
            compactor.stdin.flush()
            # While it compacts, read: never a file twice (count == distinct), never a file lost (no going back).
            (row,) = Store(store).rows("SELECT count(*) AS n, count(DISTINCT case_id) AS d FROM cases")
            assert row["n"] == row["d"] and row["n"] % rows == 0
            assert not seen or row["n"] >= seen[-1]
            seen.append(row["n"])
            merged = int(compactor.stdout.readline())
        assert writer.wait(timeout=60) == 0
    finally:
        compactor.stdin.close()
        compactor.wait(timeout=60)
        writer.kill()
        writer.wait()
    assert merged > 0
    (row,) = Store(store).rows("SELECT count(*) AS n, count(DISTINCT case_id) AS d FROM cases")
    assert row == {"n": files * rows, "d": files * rows}


@contextlib.contextmanager
def s3_requests(detailed: bool = False) -> Iterator[Any]:
    """The S3 requests this process sends while the block runs, by operation (HeadObject, GetObject, ...); or,
    ``detailed``, a list of each one's operation, key and range."""
    client = RemoteRoot("s3://evals").fs.connect()  # the client every store on the server uses (fsspec keeps one)
    counted: collections.Counter[str] = collections.Counter()
    listed: list[tuple[str, str, str]] = []

    def count(model: Any, params: dict[str, Any], **_: Any) -> None:
        counted[model.name] += 1
        listed.append((model.name, params.get("Key", ""), params.get("Range", "")))

    client.meta.events.register("before-parameter-build.s3", count)
    try:
        yield listed if detailed else counted
    finally:
        client.meta.events.unregister("before-parameter-build.s3", count)


def test_a_query_fetches_each_small_file_once_a_process_and_asks_nothing_else_of_a_listed_file(store):
    """DuckDB asked the object store about each file of each view it bound: a count over a store of 66 objects sent
    856 HEADs, 388 LISTs and 428 opens (15 s on loopback). Objects are never changed once written, so the listing
    answers for them, and a small file is fetched whole, once a process."""
    files = 30
    written = Store(store)
    for f in range(files):
        written.write("cases", [{"experiment_id": "x", "case_id": f"c{f}", "line": f, "input": "q"}])
    parquet = [key for key in objects(store) if key.endswith(".parquet")]  # the cases' files and the schema files
    reader = Store(store)
    with s3_requests() as sent:
        assert reader.rows("SELECT count(*) AS n FROM cases") == [{"n": files}]
    assert sent["HeadObject"] == 0 and sent["GetObject"] == len(parquet), sent
    with s3_requests() as sent:
        assert reader.rows("SELECT count(DISTINCT case_id) AS n FROM cases") == [{"n": files}]
    assert set(sent) == {"ListObjectsV2"}, sent  # a new listing for the new connection's views, nothing more


def test_a_large_file_is_read_without_a_head_and_its_footer_once_a_process(store):
    """A compacted file (over the 1 MiB fetched whole) was opened by every query with a HEAD, and its footer
    fetched again each time, twice a query. The listing answers the HEAD, and the footer is kept."""
    from agenteval.store import compact

    written = Store(store)
    for f in range(4):  # random inputs: about 3 MB that does not compress
        rows = [
            {"experiment_id": "x", "case_id": f"c{f}-{i}", "line": i, "input": os.urandom(400).hex()}
            for i in range(2000)
        ]
        written.write("cases", rows)
    compact(Store(store), ["cases"])
    (merged,) = [key for key in objects(store) if "/compacted-" in key]
    size = fsspec.filesystem("s3").size(f"{store}/{merged}")
    assert size > 2 << 20
    reader = Store(store)
    assert reader.rows("SELECT count(*) AS n FROM cases") == [{"n": 8000}]
    with s3_requests(detailed=True) as sent:
        assert reader.rows("SELECT max(line) AS n FROM cases WHERE case_id LIKE 'c3-%'") == [{"n": 1999}]
    of_merged = [(operation, ranged) for operation, key, ranged in sent if key.endswith(merged)]
    assert of_merged and all(operation == "GetObject" for operation, _ in of_merged), sent
    ends = [int(ranged.rsplit("-", 1)[1]) for _, ranged in of_merged]
    assert max(ends) < size - 1, sent  # the rows' columns, not the footer at the file's end


def test_a_compaction_reads_each_file_once_and_asks_nothing_else_of_it(store):
    """A compaction read each file twice (its schema, then its rows), each time a HEAD and GETs: now once, by the
    listing, the small files fetched together."""
    from agenteval.store import compact

    files = 30
    written = Store(store)
    for f in range(files):
        written.write("cases", [{"experiment_id": "x", "case_id": f"c{f}", "line": f, "input": "q"}])
    with s3_requests() as sent:
        done = compact(Store(store), ["cases"])
    assert (done.files_before, done.files_after, done.rows) == (files, 1, files)
    # The two HEADs: whether the store is there at all, and the compaction's lease.
    assert sent["GetObject"] == files and sent["HeadObject"] <= 2, sent
    assert Store(store).rows("SELECT count(*) AS n FROM cases") == [{"n": files}]


def test_a_kept_connection_shows_objects_written_and_compacted_after_it_was_opened(store):
    """The dashboard's SQL workers keep their connection between statements. On object storage its views name the
    files listed when they were made: a file written since, or a compaction's, makes them again."""
    from agenteval.store import compact
    from agenteval.store._kept_connection import KeptConnection

    def case(f: int) -> list[dict[str, Any]]:
        return [{"experiment_id": "x", "case_id": f"c{f}", "line": f, "input": "q"}]

    def cases(connection: KeptConnection) -> int:
        return connection.run(lambda con: con.execute("SELECT count(DISTINCT case_id) FROM cases").fetchall()[0][0])

    written = Store(store)
    for f in range(3):
        written.write("cases", case(f))
    with KeptConnection(Store(store)) as connection:
        assert cases(connection) == 3
        opened = connection.connection()
        assert cases(connection) == 3 and connection.connection() is opened  # the same listing: kept
        written.write("cases", case(3))
        assert cases(connection) == 4
        assert compact(Store(store), ["cases"]).files_after == 1
        assert cases(connection) == 4


def test_the_exporter_publishes_every_span_to_s3(store):
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from agenteval_exporters import ParquetSpanExporter

    exporter = ParquetSpanExporter(store, max_rows=300, flush_interval=0.2)
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    for i in range(1000):
        with tracer.start_as_current_span(f"step {i % 7}"):
            pass
    provider.shutdown()
    assert exporter.files_written >= 2
    (row,) = Store(store).rows("SELECT count(*) AS n, count(DISTINCT span_id) AS d FROM spans")
    assert row == {"n": 1000, "d": 1000}  # count in == count out, each published file whole


def span_count(store: str) -> dict[str, int]:
    (row,) = Store(store).rows("SELECT count(*) AS n, count(DISTINCT span_id) AS d FROM spans")
    return row


def test_force_flush_returns_false_on_a_stalled_store_and_every_span_is_published_once_it_answers(store, s3_server):
    """force_flush(timeout_millis) ignored its timeout: on a store that stopped answering it waited until the store
    came back. It returns False after the timeout, drops nothing, and what it asked for is published once the store
    answers, with no other call."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from agenteval_exporters import ParquetSpanExporter

    server, _ = s3_server
    exporter = ParquetSpanExporter(store, max_rows=100, flush_interval=3600)
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")

    def make_spans(what: str, count: int) -> None:
        for i in range(count):
            with tracer.start_as_current_span(f"{what} {i}"):
                pass

    make_spans("before", 250)  # two files published (max_rows), 50 spans buffered
    with stalled(server):
        assert returns_within(10, lambda: exporter.force_flush(timeout_millis=500)) is False
        make_spans("during", 30)  # taken while the store stalls: buffered, fewer than a file's rows
        assert returns_within(10, lambda: exporter.force_flush(timeout_millis=500)) is False
    wait_until(lambda: span_count(store)["n"] == 280, "the spans both flushes asked for, once the store answers")
    assert exporter.force_flush(timeout_millis=30_000) is True
    assert span_count(store) == {"n": 280, "d": 280}  # count in == count out
    assert exporter.spans_unwritten == 0
    provider.shutdown()


def test_shutdown_returns_after_its_timeout_on_a_stalled_store_and_its_spans_are_published_later(
    store, s3_server, caplog
):
    """shutdown() took no timeout and waited for a stalled store for as long as it stalled; at exit, a process
    hung. The SDK's BatchSpanProcessor hands what is left of its own shutdown timeout to an exporter whose
    shutdown takes ``timeout_millis``."""
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import SimpleSpanProcessor

    from agenteval_exporters import ParquetSpanExporter

    server, _ = s3_server
    exporter = ParquetSpanExporter(store, flush_interval=3600)
    assert "timeout_millis" in inspect.getfullargspec(exporter.shutdown).args  # what the batch processor looks for
    provider = TracerProvider(shutdown_on_exit=False)  # the test shuts the exporter down itself
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    tracer = provider.get_tracer("test")
    for i in range(40):
        with tracer.start_as_current_span(f"step {i}"):
            pass
    with caplog.at_level(logging.WARNING, logger="agenteval_exporters"), stalled(server):
        returns_within(10, lambda: exporter.shutdown(timeout_millis=500))
    assert "the last spans were not published" in caplog.text
    wait_until(lambda: span_count(store)["n"] == 40, "the last spans, once the store answers")
    assert span_count(store) == {"n": 40, "d": 40}


def test_the_doctor_sets_an_unreadable_object_aside_and_the_store_reads_again(store):
    summary = json.loads(agenteval(store, *RUN, "--json").stdout)
    experiment_id = summary["experiment_id"]
    fs = fsspec.filesystem("s3")
    # A truncated copy of the trials, published beside them as a writer would (a copy cut short, say).
    (merged,) = [k for k in objects(store) if k.startswith("trials/experiment_id=") and k.endswith(".parquet")]
    data = fs.cat_file(f"{store.removeprefix('s3://')}/{merged}")
    broken = merged.rpartition("/")[0] + "/part-0-broken.parquet"
    fs.pipe_file(f"{store.removeprefix('s3://')}/{broken}", data[: len(data) // 2])
    failed = agenteval(store, "report", experiment_id, check=False)
    assert failed.returncode != 0 and "agenteval doctor" in failed.stdout + failed.stderr
    healed = agenteval(store, "doctor").stdout
    assert "part-0-broken.parquet" in healed
    assert f".quarantine/{broken}.unreadable" in objects(store) and broken not in objects(store)
    assert trial_keys(store, experiment_id) == every_trial()
    assert json.loads(agenteval(store, "report", experiment_id, "--format", "json").stdout)["trials"] == len(
        every_trial()
    )


def test_figures_on_a_connection_opened_before_a_compaction_finished_are_computed_from_the_new_files(store, tmp_path):
    """A run's summary (and a report) opens one connection and computes the experiment's figures on it. On object
    storage a connection's views name the files live when it opened; a compaction that finished meanwhile (another
    shard's, at its end) deleted them, and every retry ran on the same stale views: the run that had just completed
    ended with a traceback (IOException: No files found ... compacted-*.parquet). The retry now lists afresh."""
    from agenteval.store._snapshots import judged_connection

    experiment_id = json.loads(agenteval(store, *RUN, "--json").stdout)["experiment_id"]
    agenteval(store, "rescore", experiment_id)  # a second file of scores: something to compact
    con = Store(store).connect()
    try:
        # From another machine (its own temporary folder): the figures it saves for the new files are not here.
        elsewhere = {**os.environ, "AGENTEVAL_STORE": store, "TMPDIR": str(tmp_path)}
        compacted = subprocess.run(
            [sys.executable, "-m", "agenteval.cli", "compact"], env=elsewhere, capture_output=True, text=True
        )
        assert "compacted 1 partition(s)" in compacted.stdout, compacted.stderr
        with judged_connection(Store(store), experiment_id, con=con) as judged:
            (row,) = judged.execute("SELECT count(*) FROM judged").fetchall()
    finally:
        con.close()
    assert row[0] == CASES * ATTEMPTS


def test_a_compaction_whose_lease_was_taken_over_says_another_compaction_won_and_loses_nothing(store, tmp_path):
    """A compaction stopped (SIGSTOP) past its lease's time while it merges a partition; another takes the lease and
    compacts everything; the first goes on and finds its files gone or its manifest taken. It said 'left 3
    partition(s) as they were: a file could not be read; run agenteval doctor', though nothing was wrong."""
    from agenteval_exporters.storefs import RemoteRoot, local_home

    env = {**os.environ, "AGENTEVAL_STORE": store, "AGENTEVAL_LEASE_SECONDS": "2"}
    env["PYTHONPATH"] = os.pathsep.join(sys.path)
    writing = [sys.executable, "-c", WRITER_IN_PARTITIONS, store, "3", "30", "5"]
    subprocess.run(writing, env=env, check=True, capture_output=True)
    counted = "SELECT count(*) AS n, count(DISTINCT (experiment_id, case_id)) AS d FROM cases"
    assert Store(store).rows(counted) == [{"n": 450, "d": 450}]
    staging = local_home(RemoteRoot(store), "staging")
    compact_command = [sys.executable, "-m", "agenteval.cli", "compact", "--wait", "120"]
    first = subprocess.Popen(compact_command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        # Stopped while it merges a partition: its merged file is being written on this machine.
        while True:
            wait_until(lambda: list(staging.glob("compacted-*")) or first.poll() is not None, "a merge under way")
            assert first.poll() is None, first.communicate()
            first.send_signal(signal.SIGSTOP)
            if list(staging.glob("compacted-*")):
                break
            first.send_signal(signal.SIGCONT)  # it had just finished that file: catch the next one
        second = subprocess.run(compact_command, env=env, capture_output=True, text=True, timeout=300)
        assert second.returncode == 0 and "compacted 3 partition(s): 90 files -> 3" in second.stdout, second.stderr
    finally:
        first.send_signal(signal.SIGCONT)
    out, err = first.communicate(timeout=300)
    assert first.returncode == 0, err
    assert "could not be read" not in err and "doctor" not in err, err
    assert "were compacted meanwhile by another compaction" in err and "nothing was lost" in err, err
    assert Store(store).rows(counted) == [{"n": 450, "d": 450}]  # count in == count out
    # What the first merged and could not make live is gone: one merged file per partition, and its manifest.
    names = sorted(key.rpartition("/")[2].split("-")[0] for key in objects(store) if key.startswith("cases/"))
    assert names == ["_manifest"] * 3 + ["_schema"] * names.count("_schema") + ["compacted"] * 3


WRITER_IN_PARTITIONS = """
import sys
from agenteval.store import Store
store, partitions, files, rows = Store(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4])
for p in range(partitions):
    for f in range(files):
        cases = [{"experiment_id": f"x{p}", "case_id": f"c{f}-{r}", "line": r, "input": "q"} for r in range(rows)]
        store.write("cases", cases)
"""


def spans_partition_objects(store: str) -> list[str]:
    """The kinds of object (``part``, ``compacted``, ``_manifest``) in the spans partitions, sorted."""
    return sorted(key.rpartition("/")[2].split("-")[0] for key in objects(store) if key.startswith("spans/date="))


def test_compact_merges_production_spans_on_s3_and_a_store_without_copies_loses_nothing(store):
    """Production spans (``spans/date=<day>/service=<name>/``, a folder deeper than an experiment's) were never
    compacted on object storage: only folders one below the table were taken for partitions."""
    spans = spans_sent_both_ways(store, 3, ways=1) + spans_sent_both_ways(store, 3, ways=1)
    assert spans_partition_objects(store) == ["part", "part"]
    compacted = agenteval(store, "compact").stdout
    assert f"compacted 1 partition(s): 2 files -> 1, {spans} rows" in compacted, compacted
    assert "dropped" not in compacted
    assert span_rows(store) == (spans, spans)  # count in == count out
    assert spans_partition_objects(store) == ["_manifest", "compacted"]


def test_spans_stored_twice_on_s3_are_counted_by_the_doctor_and_kept_once_by_compact(store):
    """Compaction on object storage kept both rows of a span sent to the store both ways, though the doctor said to
    run agenteval compact to keep one."""
    spans = spans_sent_both_ways(store, 5)
    assert span_rows(store) == (2 * spans, spans)
    assert spans_partition_objects(store) == ["part", "part"]
    checked = agenteval(store, "doctor", "--dry-run", check=False)
    assert checked.returncode == 1 and "all readable" in checked.stdout, checked.stdout + checked.stderr
    assert f"{spans} span rows repeat another row's (trace_id, span_id) in 1 partition(s)" in checked.stdout
    assert "agenteval compact" in checked.stdout
    compacted = agenteval(store, "compact").stdout
    assert f"compacted 1 partition(s): 2 files -> 1, {spans} rows;" in compacted, compacted
    assert f"dropped {spans} span rows" in compacted and f"({2 * spans} rows read, {spans} written)" in compacted
    assert span_rows(store) == (spans, spans)
    assert spans_partition_objects(store) == ["_manifest", "compacted"]
    checked = agenteval(store, "doctor", "--dry-run")
    assert "repeat" not in checked.stdout, checked.stdout


def test_a_file_on_s3_merged_with_its_copies_is_rewritten_through_the_next_manifest_by_compact(store):
    """A partition of one file holding copies: a compaction that does not look for them (a run's, or one from before
    copies were dropped) merged both ways' files into one. agenteval compact replaces that file as any merge does,
    by the partition's next manifest, and deletes it and the older manifest."""
    from agenteval.store import compact

    spans = spans_sent_both_ways(store, 4)
    assert compact(Store(store)).copies_dropped == 0  # two files merged into one, copies and all
    assert span_rows(store) == (2 * spans, spans)
    before = [key.rpartition("/")[2] for key in objects(store) if key.startswith("spans/date=")]
    assert sorted(name.split("-")[0] for name in before) == ["_manifest", "compacted"]
    assert compact(Store(store)).partitions == 0  # one file: a run's compaction leaves it
    compacted = agenteval(store, "compact").stdout
    assert f"compacted 1 partition(s): 1 files -> 1, {spans} rows;" in compacted, compacted
    assert f"({2 * spans} rows read, {spans} written)" in compacted, compacted
    assert span_rows(store) == (spans, spans)
    after = [key.rpartition("/")[2] for key in objects(store) if key.startswith("spans/date=")]
    assert sorted(name.split("-")[0] for name in after) == ["_manifest", "compacted"]
    assert not set(before) & set(after)  # the next generation's manifest, naming a new file; the old ones gone
    assert "_manifest-000000000002.json" in after
