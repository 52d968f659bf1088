"""ParquetSpanExporter: real spans from the real SDK, written to Parquet, read back with DuckDB."""

from __future__ import annotations

import json
import logging
import os
import shutil
import threading
import time
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor, SpanExportResult
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode
from waiting import returns_within, wait_until

from agenteval_exporters import SCHEMA_VERSION, SPAN_SCHEMA, ParquetSpanExporter
from agenteval_exporters.partitions import partition_by_experiment
from agenteval_exporters.writer import PartitionedWriter
from agenteval_instrumentation import attributes as A


@pytest.fixture
def make_tracer(tmp_path):
    """A private provider writing to a Parquet exporter in a temporary store."""
    made = []

    def make(**settings):
        exporter = ParquetSpanExporter(tmp_path / "store", **settings)
        provider = TracerProvider(resource=Resource.create({"service.name": "test-svc", "deployment": "ci"}))
        provider.add_span_processor(SimpleSpanProcessor(exporter))
        made.append(provider)
        return provider.get_tracer("test.scope"), exporter

    yield make
    for provider in made:
        provider.shutdown()


def read_spans(store: Path, where: str = "true") -> list[dict]:
    glob = str(store / "spans" / "**" / "*.parquet")
    sql = (
        "SELECT * REPLACE (epoch_ns(start_time) AS start_time, epoch_ns(end_time) AS end_time) "
        f"FROM read_parquet('{glob}', union_by_name=true) WHERE {where} ORDER BY start_time"
    )
    return duckdb.sql(sql).to_arrow_table().to_pylist()


def data_files(store: Path) -> list[Path]:
    return sorted(p for p in (store / "spans").rglob("*.parquet") if not p.name.startswith("_"))


def test_span_row_round_trip(make_tracer, tmp_path):
    tracer, exporter = make_tracer()
    with tracer.start_as_current_span(
        "invoke_agent demo", attributes={A.GEN_AI_OPERATION_NAME: "invoke_agent"}
    ) as root:
        with tracer.start_as_current_span(
            "chat gpt-4o",
            kind=SpanKind.CLIENT,
            attributes={
                A.GEN_AI_OPERATION_NAME: "chat",
                A.GEN_AI_PROVIDER_NAME: "openai",
                A.GEN_AI_REQUEST_MODEL: "gpt-4o",
                A.GEN_AI_RESPONSE_MODEL: "gpt-4o-2024",
                A.GEN_AI_USAGE_INPUT_TOKENS: 120,
                A.GEN_AI_USAGE_OUTPUT_TOKENS: 7,
                A.GEN_AI_RESPONSE_FINISH_REASONS: ("length", "stop"),
                A.EXPERIMENT_ID: "exp1",
                A.CASE_ID: "case-3",
                A.TRIAL_ID: "trial-9",
                A.TRIAL_ATTEMPT: 2,
                "custom.flag": True,
            },
        ) as chat:
            chat.add_event("retry", {"attempt": 1})
        with tracer.start_as_current_span(
            "execute_tool lookup",
            attributes={A.GEN_AI_TOOL_NAME: "lookup", A.GEN_AI_TOOL_CALL_ID: "call_1", A.EXPERIMENT_ID: "exp1"},
        ) as tool_span:
            tool_span.set_attribute(A.ERROR_TYPE, "KeyError")
            tool_span.set_status(Status(StatusCode.ERROR, "no such country"))
    assert exporter.force_flush()

    rows = {r["name"]: r for r in read_spans(tmp_path / "store")}
    assert set(rows) == {"invoke_agent demo", "chat gpt-4o", "execute_tool lookup"}
    chat_row, tool_row, root_row = rows["chat gpt-4o"], rows["execute_tool lookup"], rows["invoke_agent demo"]
    assert chat_row["trace_id"] == format(root.get_span_context().trace_id, "032x")
    assert chat_row["span_id"] == format(chat.get_span_context().span_id, "016x")
    assert chat_row["parent_span_id"] == root_row["span_id"]
    assert root_row["parent_span_id"] is None
    assert chat_row["kind"] == "CLIENT" and root_row["kind"] == "INTERNAL"
    assert (chat_row["start_time"], chat_row["end_time"]) == (chat.start_time, chat.end_time)
    assert chat_row["duration_ms"] == pytest.approx((chat.end_time - chat.start_time) / 1e6)
    assert chat_row["operation"] == "chat" and chat_row["provider"] == "openai"
    assert (chat_row["request_model"], chat_row["response_model"]) == ("gpt-4o", "gpt-4o-2024")
    assert (chat_row["input_tokens"], chat_row["output_tokens"]) == (120, 7)
    assert chat_row["finish_reason"] == "length"
    assert (chat_row["experiment_id"], chat_row["case_id"], chat_row["trial_id"], chat_row["attempt"]) == (
        "exp1",
        "case-3",
        "trial-9",
        2,
    )
    assert json.loads(chat_row["attributes"])["custom.flag"] is True
    assert json.loads(chat_row["attributes"])[A.GEN_AI_RESPONSE_FINISH_REASONS] == ["length", "stop"]
    (event,) = json.loads(chat_row["events"])
    assert event["name"] == "retry" and event["attributes"] == {"attempt": 1}
    assert root_row["events"] is None
    assert chat_row["service_name"] == "test-svc" and json.loads(chat_row["resource"])["deployment"] == "ci"
    assert chat_row["scope_name"] == "test.scope"
    assert (tool_row["status_code"], tool_row["status_message"]) == ("ERROR", "no such country")
    assert (tool_row["tool_name"], tool_row["tool_call_id"], tool_row["error_type"]) == ("lookup", "call_1", "KeyError")


def test_files_have_the_schema_zstd_and_version(make_tracer, tmp_path):
    tracer, exporter = make_tracer()
    with tracer.start_as_current_span("s", attributes={A.EXPERIMENT_ID: "e"}):
        pass
    exporter.force_flush()
    (path,) = data_files(tmp_path / "store")
    parquet = pq.ParquetFile(path)
    assert parquet.schema_arrow.remove_metadata() == SPAN_SCHEMA.remove_metadata()
    assert parquet.metadata.metadata[b"agenteval.schema_version"] == str(SCHEMA_VERSION).encode()
    assert parquet.metadata.row_group(0).column(0).compression == "ZSTD"


def test_partitioned_by_experiment_else_by_date(make_tracer, tmp_path):
    tracer, exporter = make_tracer()
    for experiment in ("exp-a", "exp b/1", None):
        attributes = {A.EXPERIMENT_ID: experiment} if experiment else {}
        with tracer.start_as_current_span("step", attributes=attributes):
            pass
    exporter.force_flush()
    folders = sorted(str(p.parent.relative_to(tmp_path / "store" / "spans")) for p in data_files(tmp_path / "store"))
    today = time.strftime("%Y-%m-%d", time.gmtime())
    assert folders == sorted([f"date={today}/service=test-svc", "experiment_id=exp%20b%2F1", "experiment_id=exp-a"])
    ids = sorted(str(r["experiment_id"]) for r in read_spans(tmp_path / "store"))
    assert ids == ["None", "exp b/1", "exp-a"]


def test_nothing_visible_until_published_and_staging_is_outside_the_glob(make_tracer, tmp_path):
    tracer, exporter = make_tracer(flush_interval=3600)
    with tracer.start_as_current_span("buffered"):
        pass
    assert data_files(tmp_path / "store") == []
    exporter.force_flush()
    assert len(data_files(tmp_path / "store")) == 1
    assert not list((tmp_path / "store" / ".staging").glob("*.parquet"))


def test_new_file_by_rows(make_tracer, tmp_path):
    tracer, exporter = make_tracer(max_rows=10, flush_interval=3600)
    for i in range(25):
        with tracer.start_as_current_span(f"s{i}", attributes={A.EXPERIMENT_ID: "e"}):
            pass
    assert [pq.read_metadata(p).num_rows for p in data_files(tmp_path / "store")] == [10, 10]
    exporter.force_flush()
    assert len(read_spans(tmp_path / "store")) == 25


def test_new_file_by_time_without_any_flush(make_tracer, tmp_path):
    tracer, _ = make_tracer(flush_interval=0.05)
    with tracer.start_as_current_span("timed"):
        pass
    wait_until(lambda: data_files(tmp_path / "store"), "the span's file, published by time")
    assert [r["name"] for r in read_spans(tmp_path / "store")] == ["timed"]


def test_settings_from_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("AGENTEVAL_STORE", str(tmp_path / "env-store"))
    monkeypatch.setenv("AGENTEVAL_PARQUET_MAX_ROWS", "7")
    monkeypatch.setenv("AGENTEVAL_PARQUET_FLUSH_INTERVAL", "2.5")
    exporter = ParquetSpanExporter()
    assert exporter.store == tmp_path / "env-store"
    assert (exporter._writer.max_rows, exporter._writer.flush_interval) == (7, 2.5)
    exporter.shutdown()
    explicit = ParquetSpanExporter(tmp_path / "arg", max_rows=3)
    assert explicit.store == tmp_path / "arg" and explicit._writer.max_rows == 3
    explicit.shutdown()


def test_shutdown_is_idempotent_and_later_exports_fail_quietly(make_tracer, tmp_path, caplog):
    tracer, exporter = make_tracer(flush_interval=3600)
    with tracer.start_as_current_span("last"):
        pass
    exporter.shutdown()
    assert len(data_files(tmp_path / "store")) == 1  # shutdown published the buffer
    with caplog.at_level(logging.WARNING):
        exporter.shutdown()
    assert "more than once" in caplog.text
    assert exporter.export([]) is SpanExportResult.FAILURE


def test_write_failure_returns_failure_logs_once_and_keeps_rows(tmp_path, caplog):
    store = tmp_path / "store"
    exporter = ParquetSpanExporter(store, max_rows=1, flush_interval=3600)
    provider = TracerProvider()
    tracer = provider.get_tracer("t")
    (store / "spans").mkdir(parents=True)
    blocker = store / "spans" / "experiment_id=e"
    blocker.write_text("a file where a folder should be")
    results = []
    with caplog.at_level(logging.ERROR):
        for i in range(3):
            with tracer.start_as_current_span(f"s{i}", attributes={A.EXPERIMENT_ID: "e"}) as span:
                pass
            results.append(exporter.export([span]))
    assert results == [SpanExportResult.FAILURE] * 3
    assert caplog.text.count("could not export spans") == 1
    blocker.unlink()
    assert exporter.force_flush()
    assert sorted(r["name"] for r in read_spans(store)) == ["s0", "s1", "s2"]
    exporter.shutdown()


def test_badly_typed_attributes_land_in_json_not_in_typed_columns(make_tracer, tmp_path):
    tracer, exporter = make_tracer()
    odd = {A.GEN_AI_USAGE_INPUT_TOKENS: "many", A.TRIAL_ATTEMPT: 2**40, "huge": 2**70}
    with tracer.start_as_current_span("odd", attributes=odd):
        pass
    exporter.force_flush()
    (row,) = read_spans(tmp_path / "store")
    assert row["input_tokens"] is None and row["attempt"] is None
    assert json.loads(row["attributes"])[A.GEN_AI_USAGE_INPUT_TOKENS] == "many"
    assert json.loads(row["attributes"])["huge"] == 2**70


def test_a_span_lacking_a_required_value_costs_that_span_not_its_batch_nor_its_file(tmp_path):
    """An application names a span None (a name read from something that was not there). The span reached the
    Parquet writer with a null in the non-nullable name column, and its file failed ("declared non-nullable but
    contains nulls"): all 11 spans of the batch lost, and every retry of that file failed with them. Now that span
    alone is left out and counted; spans in == spans stored + spans refused."""
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    exporter = ParquetSpanExporter(tmp_path / "store")
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter))  # one batch: the good spans and the bad one
    tracer = provider.get_tracer("test.scope")
    for n in range(10):
        with tracer.start_as_current_span(f"good {n}"):
            if n == 4:
                with tracer.start_as_current_span(None):  # type: ignore[arg-type]
                    pass
    provider.shutdown()
    stored = read_spans(tmp_path / "store")
    assert sorted(r["name"] for r in stored) == [f"good {n}" for n in range(10)]
    assert len(stored) + exporter.spans_refused == 11 and exporter.spans_unwritten == 0


def test_exporter_is_thread_safe(make_tracer, tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    tracer, exporter = make_tracer(max_rows=50, flush_interval=0.01)

    def work(worker: int) -> None:
        for i in range(200):
            with tracer.start_as_current_span(f"w{worker}-{i}", attributes={A.EXPERIMENT_ID: f"e{worker % 2}"}):
                pass

    with ThreadPoolExecutor(4) as pool:
        list(pool.map(work, range(4)))
    exporter.force_flush()
    rows = read_spans(tmp_path / "store")
    assert len(rows) == 800
    assert len({r["span_id"] for r in rows}) == 800


def test_auto_configuration_entry_point(tmp_path, monkeypatch):
    from importlib.metadata import entry_points

    (entry,) = [e for e in entry_points(group="opentelemetry_traces_exporter") if e.name == "agenteval_parquet"]
    assert entry.load() is ParquetSpanExporter


# PartitionedWriter: row groups reach staging as they fill; files appear whole, by rows, time or flush.

ROWS = pa.schema([pa.field("experiment_id", pa.string()), pa.field("n", pa.int64())])


def rows(start: int, count: int, experiment: str = "e") -> pa.RecordBatch:
    return pa.RecordBatch.from_pydict(
        {"experiment_id": [experiment] * count, "n": list(range(start, start + count))}, schema=ROWS
    )


def published(root: Path) -> list[Path]:
    return sorted((root / "t").rglob("*.parquet"))


def numbers(root: Path) -> list[int]:
    return sorted(n for path in published(root) for n in pq.ParquetFile(path).read().column("n").to_pylist())


def test_writer_streams_row_groups_then_publishes_whole_files(tmp_path):
    writer = PartitionedWriter(
        tmp_path, "t", ROWS, partition_by_experiment, max_rows=25, flush_interval=3600, row_group_rows=10
    )
    for start in range(0, 24, 4):  # 24 rows: two row groups handed over, no file full yet
        writer.append(rows(start, 4))
    assert published(tmp_path) == []
    writer.append(rows(24, 4))  # the 25th row fills the file: published before append returns
    (first,) = published(tmp_path)
    assert pq.read_metadata(first).num_rows == 28
    assert [pq.read_metadata(first).row_group(i).num_rows for i in range(3)] == [12, 12, 4]
    writer.append(rows(28, 2))
    writer.close()
    assert numbers(tmp_path) == list(range(30))
    assert not list((tmp_path / ".staging").iterdir())


class StagingCounted(PartitionedWriter):
    """A real writer that counts its attempts to stage a file, so a test can wait for the timer's retries."""

    def __init__(self, *args, **kwargs) -> None:
        self.attempts = 0
        self.attempted = threading.Condition()
        super().__init__(*args, **kwargs)

    def _stage(self):
        with self.attempted:
            self.attempts += 1
            self.attempted.notify_all()
        return super()._stage()

    def wait_for_attempts(self, count: int, timeout: float = 30) -> None:
        with self.attempted:
            assert self.attempted.wait_for(lambda: self.attempts >= count, timeout), f"fewer than {count} attempts"


def test_writer_keeps_rows_of_a_file_that_could_not_be_staged(tmp_path, caplog):
    writer = StagingCounted(
        tmp_path, "t", ROWS, partition_by_experiment, max_rows=1000, flush_interval=0.05, row_group_rows=5
    )
    staging = tmp_path / ".staging"
    if staging.exists():
        shutil.rmtree(staging)
    staging.write_text("a file where the staging folder should be")  # no staged file can be opened
    with caplog.at_level(logging.ERROR):
        for start in range(0, 20, 5):
            writer.append(rows(start, 5))
        with pytest.raises(OSError):
            writer.flush()
        # The timer retries on its own, and logs the failure once: by the third retry's attempt, the first
        # two retries have failed and been logged (the timer handles one at a time).
        writer.wait_for_attempts(writer.attempts + 3)
    assert caplog.text.count("could not publish t files") == 1
    staging.unlink()
    writer.append(rows(20, 3))
    writer.flush()
    assert numbers(tmp_path) == list(range(23))
    writer.close()


def test_writer_retries_kept_rows_on_time_without_new_rows(tmp_path):
    writer = PartitionedWriter(tmp_path, "t", ROWS, partition_by_experiment, max_rows=1000, flush_interval=0.05)
    blocker = tmp_path / "t" / "experiment_id=e"
    blocker.parent.mkdir(parents=True)
    blocker.write_text("a file where the partition folder should be")
    writer.append(rows(0, 3))
    with pytest.raises(OSError):
        writer.flush()
    blocker.unlink()
    wait_until(lambda: published(tmp_path), "the kept rows, published by the timer")
    assert numbers(tmp_path) == [0, 1, 2]
    writer.close()


class StalledStore(PartitionedWriter):
    """A real writer whose background thread, when it starts a file, waits while the test holds ``stalled``: the
    writer as it is on a store that stopped answering (a hung network mount, an object store that never replies)."""

    def __init__(self, *args, **kwargs) -> None:
        self.stalled = threading.Lock()
        self.reached = threading.Event()
        super().__init__(*args, **kwargs)

    def _stage(self):
        self.reached.set()
        with self.stalled:
            pass
        return super()._stage()


def test_writer_flush_gives_up_after_its_timeout_on_a_stalled_store_and_loses_nothing(tmp_path):
    """flush() waited for as long as the store took, for ever on one that stopped answering. It returns False
    after its timeout whatever it waits for: its publishing, room in the background thread's queue, or an append
    holding the writer while it waits for that room; every row is published once the store answers."""
    writer = StalledStore(
        tmp_path, "t", ROWS, partition_by_experiment, max_rows=1000, flush_interval=3600, row_group_rows=5
    )
    writer.stalled.acquire()
    try:
        writer.append(rows(0, 5))  # a row group: handed over, and the background thread stalls starting its file
        assert writer.reached.wait(30)
        assert returns_within(10, lambda: writer.flush(timeout=0.2)) is False  # its publishing is queued
        for start in range(5, 20, 5):
            writer.append(rows(start, 5))  # three more row groups fill the queue (the publishing is in it)
        writer.append(rows(20, 3))  # buffered: not a row group yet
        assert returns_within(10, lambda: writer.flush(timeout=0.2)) is False  # no room for these rows
        held = threading.Thread(target=writer.append, args=(rows(23, 5),))  # waits for room, holding the writer
        held.start()
        assert returns_within(10, lambda: writer.flush(timeout=0.2)) is False
    finally:
        writer.stalled.release()
    # The publishing the first flush queued happens once the store answers, with no other call.
    wait_until(lambda: numbers(tmp_path) == list(range(5)), "the file the first flush asked for")
    held.join(30)
    assert not held.is_alive()
    assert writer.flush(timeout=30) is True
    assert numbers(tmp_path) == list(range(28))  # count in == count out
    writer.close()


def test_writer_close_gives_up_after_its_timeout_on_a_stalled_store_and_still_publishes_the_rest(tmp_path):
    writer = StalledStore(tmp_path, "t", ROWS, partition_by_experiment, flush_interval=3600)
    writer.stalled.acquire()
    try:
        writer.append(rows(0, 3))
        assert returns_within(10, lambda: writer.close(timeout=0.2)) is False
        assert writer.reached.wait(30)  # the last rows are on their way: the background thread is writing them
        assert returns_within(10, lambda: writer.flush(timeout=0.2)) is False  # they are not published yet
    finally:
        writer.stalled.release()
    wait_until(lambda: numbers(tmp_path) == [0, 1, 2], "the last rows, published once the store answers")
    assert writer.flush(timeout=30) is True
    assert writer.close(timeout=30) is True
    assert writer.rows_unwritten == 0


def test_writer_after_close(tmp_path):
    writer = PartitionedWriter(tmp_path, "t", ROWS, partition_by_experiment, flush_interval=3600)
    writer.append(rows(0, 2))
    writer.close()
    writer.close()
    writer.flush()  # nothing is buffered after close: returns at once
    with pytest.raises(RuntimeError, match="closed"):
        writer.append(rows(2, 1))
    assert len(published(tmp_path)) == 1


def test_spans_not_made_by_the_sdk_tracer_encode_the_same():
    from opentelemetry.sdk.trace import ReadableSpan
    from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

    from agenteval_exporters import spans_to_batch

    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource.create({"service.name": "svc"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("scope")
    with tracer.start_as_current_span("root", attributes={A.EXPERIMENT_ID: "e", A.TRIAL_ATTEMPT: 1}):
        with tracer.start_as_current_span("chat", kind=SpanKind.CLIENT) as chat:
            chat.set_attribute(A.GEN_AI_RESPONSE_FINISH_REASONS, ("stop",))
            chat.add_event("retry", {"attempt": 2})
            chat.set_status(Status(StatusCode.ERROR, "boom"))
    made = list(memory.get_finished_spans())
    # The shape other SDK users hand to exporters: plain dicts and tuples, no bounded containers.
    copies = [
        ReadableSpan(
            s.name,
            s.context,
            s.parent,
            s.resource,
            dict(s.attributes),
            tuple(s.events),
            kind=s.kind,
            status=s.status,
            start_time=s.start_time,
            end_time=s.end_time,
            instrumentation_scope=s.instrumentation_scope,
        )
        for s in made
    ]
    expected = spans_to_batch(made)
    assert spans_to_batch(copies).equals(expected)
    assert spans_to_batch([made[0], copies[1]]).equals(expected)
    chat_row = pa.Table.from_batches([expected]).drop_columns(["start_time", "end_time"]).to_pylist()[0]
    assert (chat_row["finish_reason"], chat_row["status_code"], chat_row["kind"]) == ("stop", "ERROR", "CLIENT")
    assert spans_to_batch([]).num_rows == 0


def test_writer_in_a_forked_child_publishes_only_its_own_rows(tmp_path):
    writer = PartitionedWriter(
        tmp_path, "t", ROWS, partition_by_experiment, max_rows=1000, flush_interval=3600, row_group_rows=4
    )
    writer.append(rows(0, 10))  # two row groups in the parent's staged file, two rows still buffered
    pid = os.fork()
    if pid == 0:  # the child: its own rows only, through threads of its own
        code = 1
        try:
            writer.append(rows(100, 5))
            writer.close()
            code = 0
        finally:
            os._exit(code)
    deadline = time.monotonic() + 20
    while (done := os.waitpid(pid, os.WNOHANG))[0] == 0 and time.monotonic() < deadline:
        time.sleep(0.01)
    if done[0] == 0:
        os.kill(pid, 9)
        pytest.fail("the forked child hung writing")
    assert os.waitstatus_to_exitcode(done[1]) == 0
    writer.append(rows(10, 3))
    writer.close()
    assert numbers(tmp_path) == [*range(13), *range(100, 105)]  # each row once, every file readable
    assert len(published(tmp_path)) == 2


def test_json_column_over_several_chunks_keeps_every_value_in_order():
    from agenteval_exporters import encode

    count = encode.JSON_CHUNK * 2 + 7
    # A null, and past the first chunk a value orjson refuses (an integer beyond 64 bits): that chunk takes the
    # plain path, the others stay on orjson.
    values = [None if i % 5 == 0 else {"i": i, "text": "é" * (i % 3)} for i in range(count)]
    values[encode.JSON_CHUNK + 3] = {"big": 2**70}
    column = encode._json_column(values)
    assert column.null_count == len([v for v in values if v is None])
    assert [None if text is None else json.loads(text) for text in column.to_pylist()] == values


def test_spans_acknowledged_while_shutting_down_are_all_written(tmp_path, caplog):
    # SimpleSpanProcessor exports from the application's threads, so an export can race with shutdown(): each
    # batch either returns SUCCESS and is on disk, or returns FAILURE; none is acknowledged and then left behind.
    provider = TracerProvider()
    tracer = provider.get_tracer("t")
    batch = []
    for i in range(40):  # many partitions: the last publishing takes a while (one fsync a file)
        with tracer.start_as_current_span(f"s{i}", attributes={A.EXPERIMENT_ID: f"e{i % 20}"}) as span:
            pass
        batch.append(span)
    caplog.set_level(logging.CRITICAL, logger="agenteval_exporters")
    for round_ in range(20):
        store = tmp_path / f"store{round_}"
        exporter = ParquetSpanExporter(store, flush_interval=3600)
        acknowledged = []
        started = threading.Barrier(5)

        def work(exporter: ParquetSpanExporter, acknowledged: list[int], started: threading.Barrier) -> None:
            started.wait()
            while exporter.export(batch) is SpanExportResult.SUCCESS:
                acknowledged.append(len(batch))

        threads = [threading.Thread(target=work, args=(exporter, acknowledged, started)) for _ in range(4)]
        for thread in threads:
            thread.start()
        started.wait()
        time.sleep(0.05)
        exporter.shutdown()
        for thread in threads:
            thread.join(timeout=30)
        assert not any(thread.is_alive() for thread in threads)
        assert len(read_spans(store)) == sum(acknowledged), f"round {round_}"
        assert exporter.spans_unwritten == 0


def _strict_json(text: str):
    """JSON as Spark, ClickHouse or a browser read it: no NaN or Infinity words."""

    def refuse(word: str):
        raise ValueError(f"not JSON: {word}")

    return json.loads(text, parse_constant=refuse)


def test_nan_and_infinity_are_null_in_the_json_columns_whatever_else_the_span_holds(make_tracer, tmp_path):
    # orjson writes NaN as null; a span that orjson refuses (an integer past 64 bits, a lone surrogate) went through
    # the standard library instead, which wrote the words NaN and Infinity: text that is not JSON.
    tracer, exporter = make_tracer()
    with tracer.start_as_current_span("big", attributes={"x": float("nan"), "y": float("-inf"), "n": 2**70}) as span:
        span.add_event("scored", {"score": float("nan"), "scores": (1.0, float("inf"))})
    with tracer.start_as_current_span("surrogate", attributes={"x": float("inf"), "s": "a\ud800"}):
        pass
    with tracer.start_as_current_span("plain", attributes={"x": float("nan")}):
        pass
    exporter.force_flush()
    rows = {r["name"]: r for r in read_spans(tmp_path / "store")}
    assert _strict_json(rows["big"]["attributes"]) == {"x": None, "y": None, "n": 2**70}
    (event,) = _strict_json(rows["big"]["events"])
    assert event["attributes"] == {"score": None, "scores": [1.0, None]}
    assert _strict_json(rows["surrogate"]["attributes"]) == {"x": None, "s": "a\ufffd"}
    assert _strict_json(rows["plain"]["attributes"]) == {"x": None}


def test_a_batch_whose_json_passes_the_string_column_limit_is_written_whole_in_several(tmp_path, monkeypatch, caplog):
    # Past 2 GB of attribute (or event) JSON in one batch, the encoder built a ChunkedArray no record batch could
    # hold: export failed with TypeError and the batch's every span was lost (seen with 3 spans of 750 MB: 9.6 GB
    # peak, 2 minutes, nothing written). The limit is lowered here, so kilobytes take the path gigabytes take.
    from agenteval_exporters import encode

    monkeypatch.setattr(encode, "MAX_COLUMN_BYTES", 20_000)
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("app")
    for i in range(100):
        with tracer.start_as_current_span(f"step {i}") as span:
            span.set_attribute("payload", f"{i}:" + "p" * 1000)
            span.add_event("note", {"text": "e" * 500})
    with tracer.start_as_current_span("too long alone") as span:
        span.set_attribute("payload", "x" * 30_000)
    spans = memory.get_finished_spans()
    assert len(encode.spans_to_batches(spans)) > 4
    exporter = ParquetSpanExporter(tmp_path / "store")
    with caplog.at_level(logging.WARNING, logger="agenteval_exporters.encode"):
        assert exporter.export(spans) is SpanExportResult.SUCCESS
    exporter.shutdown()
    rows = read_spans(tmp_path / "store")
    assert len(rows) == len(spans) == 101
    steps = [row for row in rows if row["name"].startswith("step ")]
    assert [json.loads(row["attributes"])["payload"] for row in steps] == [f"{i}:" + "p" * 1000 for i in range(100)]
    assert all(json.loads(row["events"])[0]["attributes"]["text"] == "e" * 500 for row in steps)
    (alone,) = [row for row in rows if row["name"] == "too long alone"]
    assert alone["attributes"] is None and alone["span_id"]  # that value alone is lost, its row is kept
    assert "more than one Parquet row can hold" in caplog.text


EXITS_WITHOUT_SHUTDOWN = """
import sys
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from agenteval_exporters import ParquetSpanExporter
from agenteval_exporters.partitions import partition_by_experiment
from agenteval_exporters.writer import PartitionedWriter
import pyarrow as pa

store, how, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
if how == "exporter":  # an exporter used by hand, never shut down
    made = InMemorySpanExporter()
    provider = TracerProvider(shutdown_on_exit=False)
    provider.add_span_processor(SimpleSpanProcessor(made))
    for n in range(count):
        provider.get_tracer("app").start_span(f"s{n}").end()
    spans = made.get_finished_spans()
    exporter = ParquetSpanExporter(store)
    for start in range(0, count, 512):
        assert exporter.export(spans[start : start + 512]).name == "SUCCESS"
elif how == "provider":  # the SDK's exit hook: spans still queued in the batch processor when the process ends
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(ParquetSpanExporter(store), schedule_delay_millis=60_000))
    for n in range(count):
        provider.get_tracer("app").start_span(f"s{n}").end()
else:  # a writer of the store's own, never closed
    schema = pa.schema([("experiment_id", pa.string()), ("n", pa.int64())])
    writer = PartitionedWriter(store, "rows", schema, partition_by_experiment, flush_interval=3600)
    writer.append(pa.record_batch({"experiment_id": ["e"] * count, "n": list(range(count))}, schema=schema))
"""


@pytest.mark.parametrize("how", ["exporter", "provider", "writer"])
def test_rows_taken_before_the_process_exits_are_published_without_a_shutdown(tmp_path, how):
    """An exporter's writer publishes on a background thread, a daemon: a process that exported 3,000 spans by
    hand and exited without ``shutdown()`` stored none of them (export had said SUCCESS). Now the writer publishes
    at exit; with an SDK provider, whose own exit hook runs after it, the spans it still had queued are stored too."""
    import subprocess
    import sys

    store = tmp_path / "store"
    count = 3000
    script = tmp_path / "exits.py"
    script.write_text(EXITS_WITHOUT_SHUTDOWN)
    done = subprocess.run([sys.executable, str(script), str(store), how, str(count)], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    table = "rows" if how == "writer" else "spans"
    files = f"{store}/{table}/**/*.parquet"
    assert duckdb.sql(f"SELECT count(*) FROM read_parquet('{files}')").fetchall() == [(count,)]
