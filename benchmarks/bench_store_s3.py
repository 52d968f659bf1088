"""Harness throughput with the store on object storage against a local store: the arithmetic dataset, the mock
agent at zero latency, end to end (spans, scoring, Parquet, compaction), once with ``--store`` a temporary folder
and once with ``--store s3://...`` on a real S3 server on loopback (moto in server mode, its own process; the
tests' tests/s3_server.py). Each run is a fresh process; the two stores run in turns, and the script prints the
median trials per second of each and the median of the per-round ratios (local over S3).

    python benchmarks/bench_store_s3.py [--trials 2000] [--repeats 5]
    python benchmarks/bench_store_s3.py --ranges
    python benchmarks/bench_store_s3.py --queries [--files 60] [--repeats 5]

``--ranges`` measures what a read fetches instead: DuckDB summing one of eight columns of a 137 MB Parquet file
on the server, through the store's file system (1 MiB blocks) and through s3fs's defaults (50 MB blocks), in
bytes fetched from the server (counted where s3fs fetches a range).

``--queries`` measures a query over a store of many small files (a run's micro-batches before its compaction), each
query in a fresh process: the first query of the process and a second one, with the store's file system (answers
from the listing, small files fetched once; ``agenteval.store._listed_objects``) and with DuckDB asking s3fs for
every file's details, as before it (the baseline), in turns; medians, ranges, and the requests each sent.

What it shows: the cost of publishing each file with a PUT over HTTP (and listing, reading by range and
compacting through the server) instead of a rename on local disk. moto is a Python server sharing the 2 cores,
so it is slower than S3 or MinIO would be per request, while loopback has none of a real network's latency.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import uuid
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent

ONE_RUN = """
import json, shutil, sys, tempfile, time
from agenteval import evaluate
trials, where = int(sys.argv[1]), sys.argv[2]
store = tempfile.mkdtemp() if where == "local" else where
started = time.perf_counter()
experiment = evaluate("mock", "arithmetic", cases=trials, attempts=1, store=store, progress="none", concurrency=8)
elapsed = time.perf_counter() - started
assert experiment.summary.trials == trials, experiment.summary
if where == "local":
    shutil.rmtree(store)
print(json.dumps({"seconds": elapsed}))
"""


def one_run(trials: int, where: str) -> float:
    done = subprocess.run(
        [sys.executable, "-c", ONE_RUN, str(trials), where], capture_output=True, text=True, check=True
    )
    return trials / json.loads(done.stdout.strip().splitlines()[-1])["seconds"]


def ranges() -> None:
    import duckdb
    import fsspec
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq
    import s3fs

    from agenteval_exporters.storefs import RemoteRoot

    fetched: list[int] = []
    fetch_range = s3fs.core.S3File._fetch_range

    def counted(self: object, start: int, end: int) -> bytes:
        fetched.append(end - start)
        return fetch_range(self, start, end)

    s3fs.core.S3File._fetch_range = counted
    rows = 2_000_000
    table = pa.table({f"c{i}": np.random.default_rng(i).random(rows) for i in range(8)})
    with tempfile.TemporaryDirectory() as folder:
        local = Path(folder) / "wide.parquet"
        pq.write_table(table, local, row_group_size=500_000, compression="none")
        size = local.stat().st_size
        store = RemoteRoot("s3://bench/ranges")
        store.put(local, "wide.parquet")
    for name, fs in [
        ("the store's file system", store.fs),
        ("s3fs defaults", fsspec.filesystem("s3", skip_instance_cache=True)),
    ]:
        fetched.clear()
        con = duckdb.connect()
        con.register_filesystem(fs)
        con.sql("SELECT sum(c3) FROM read_parquet('s3://bench/ranges/wide.parquet')").fetchall()
        print(f"{name}: fetched {sum(fetched) / 1e6:.1f} MB of a {size / 1e6:.1f} MB file in {len(fetched)} reads")


ONE_QUERY = """
import collections, json, sys, time
from agenteval.store import Store
from agenteval_exporters.storefs import RemoteRoot
import agenteval.store._listed_objects as listed
if sys.argv[2] == "baseline":  # DuckDB asks s3fs itself, as before the listed file system
    listed.register = lambda con, root: con.register_filesystem(root.fs)
store = Store(sys.argv[1])
sent = collections.Counter()
client = RemoteRoot(sys.argv[1]).fs.connect()
client.meta.events.register("before-call.s3", lambda model, **_: sent.update([model.name]))
figures = {}
for name in ("first", "second"):
    started = time.perf_counter()
    store.rows("SELECT count(*) AS n FROM cases")
    figures[name] = time.perf_counter() - started
print(json.dumps({**figures, "requests": dict(sent)}))
"""


def queries(files: int, repeats: int) -> None:
    from agenteval.store import Store

    url = f"s3://bench/queries-{uuid.uuid4().hex[:8]}"
    store = Store(url)
    for f in range(files):
        store.write("cases", [{"experiment_id": "x", "case_id": f"c{f}", "line": f, "input": "q"}])
    results: dict[str, list[dict]] = {"listed": [], "baseline": []}
    for round_ in range(repeats):
        for way in ("listed", "baseline") if round_ % 2 == 0 else ("baseline", "listed"):
            done = subprocess.run(
                [sys.executable, "-c", ONE_QUERY, url, way], capture_output=True, text=True, check=True
            )
            results[way].append(json.loads(done.stdout.strip().splitlines()[-1]))
    for query in ("first", "second"):
        for way, runs in results.items():
            seconds = [r[query] for r in runs]
            print(
                f"{query} query, {way:8s}: {statistics.median(seconds):6.2f} s "
                f"({min(seconds):.2f} to {max(seconds):.2f})"
            )
        ratios = [b[query] / s[query] for b, s in zip(results["baseline"], results["listed"], strict=True)]
        print(
            f"{query} query, baseline/listed: {statistics.median(ratios):.1f}x ({min(ratios):.1f} to {max(ratios):.1f})"
        )
    for way, runs in results.items():
        print(f"requests of both queries, {way}: {runs[-1]['requests']}")
    print(f"{files} files in cases, {repeats} rounds in turns; load average {os.getloadavg()[0]:.1f}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--ranges", action="store_true", help="measure the bytes a one-column read fetches")
    parser.add_argument("--queries", action="store_true", help="time a query over a store of many small files")
    parser.add_argument("--files", type=int, default=60, help="files of the store --queries reads")
    args = parser.parse_args()
    sys.path.insert(0, str(ROOT / "tests"))
    from s3_server import environment, make_bucket, moto_server

    if args.ranges or args.queries:
        with moto_server() as variables, environment(variables):
            make_bucket("bench")
            ranges() if args.ranges else queries(args.files, args.repeats)
        return

    local, remote, ratios = [], [], []
    with moto_server() as variables, environment(variables):
        make_bucket("bench")
        one_run(50, f"s3://bench/warm-{uuid.uuid4().hex[:6]}")  # the server's and the clients' first-time work
        for round_ in range(args.repeats):
            url = f"s3://bench/run-{uuid.uuid4().hex[:8]}"
            pair = [("local", "local"), ("s3", url)]
            speeds = {}
            for name, where in pair if round_ % 2 == 0 else pair[::-1]:
                speeds[name] = one_run(args.trials, where)
            local.append(speeds["local"])
            remote.append(speeds["s3"])
            ratios.append(speeds["local"] / speeds["s3"])
            print(f"round {round_ + 1}: local {speeds['local']:,.0f} trials/s, s3 {speeds['s3']:,.0f} trials/s")
    print(
        f"{args.trials} trials, {args.repeats} rounds: local store {statistics.median(local):,.0f} trials/s, "
        f"S3 on loopback (moto) {statistics.median(remote):,.0f} trials/s; "
        f"local/S3 {statistics.median(ratios):.2f}x ({min(ratios):.2f} to {max(ratios):.2f})"
    )
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
