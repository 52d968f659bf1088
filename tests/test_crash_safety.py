"""kill -9 at a random moment corrupts nothing: every file opens, nothing is partial or doubled."""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
from waiting import wait_until

WRITER = """
import itertools, sys
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from agenteval_exporters import ParquetSpanExporter

store, run = sys.argv[1], sys.argv[2]
provider = TracerProvider()
provider.add_span_processor(SimpleSpanProcessor(ParquetSpanExporter(store, max_rows=300, flush_interval=0.02)))
tracer = provider.get_tracer("crash")
print("ready", flush=True)
for i in itertools.count():
    experiment = f"{run}-{i % 3}"
    with tracer.start_as_current_span(f"{run}-{i}", attributes={"agenteval.experiment.id": experiment}):
        pass
"""


def data_files(store: Path) -> list[Path]:
    return sorted((store / "spans").rglob("*.parquet")) if (store / "spans").exists() else []


def _holds_run(path: Path, run: int) -> bool:
    """Whether the published file holds spans of this run (its experiments are named after it)."""
    return f"experiment_id=run{run}-" in str(path.parent)


def test_sigkill_never_leaves_partial_or_duplicate_files(tmp_path):
    store = tmp_path / "store"
    rng = random.Random(20261130)
    published: dict[str, int] = {}
    for run in range(5):
        child = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(store), f"run{run}"], stdout=subprocess.PIPE, text=True
        )
        assert child.stdout.readline().strip() == "ready"
        # Killed at a random moment once this run has published (on a loaded machine that can take a while).
        wait_until(lambda run=run: any(_holds_run(p, run) for p in data_files(store)), f"run {run} to publish", 60)
        time.sleep(rng.uniform(0.0, 0.6))
        # What a reader saw just before the kill must survive it.
        seen = {str(p): pq.read_metadata(p).num_rows for p in data_files(store)}
        os.kill(child.pid, signal.SIGKILL)
        child.wait()

        files = data_files(store)
        for path in files:
            pq.read_table(path)  # opens whole: footer present, every page readable
        glob = str(store / "spans" / "**" / "*.parquet")
        rows = duckdb.sql(
            f"SELECT count(*), count(DISTINCT span_id), count(DISTINCT name) FROM read_parquet('{glob}')"
        ).fetchall()[0]
        assert rows[0] == rows[1] == rows[2], "a span appears twice"
        for path, count in seen.items():
            assert Path(path).exists() and pq.read_metadata(path).num_rows == count
        published.update(seen)
        run_rows = duckdb.sql(f"SELECT count(*) FROM read_parquet('{glob}') WHERE name LIKE 'run{run}-%'").fetchall()[0]
        assert run_rows[0] > 0, "the run published nothing before it was killed"
    assert not [p for p in (store / "spans").rglob("*") if p.is_file() and p.suffix != ".parquet"]
