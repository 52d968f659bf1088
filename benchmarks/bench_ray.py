"""Scaling of a mock run over 1, 2 and 4 Ray worker processes on this machine, against the same run on one
process (``--executor local``), and the model of what N machines would give.

A real cluster per worker count (tests/ray_cluster.py: a head with no CPUs for tasks and one worker node with
``--num-cpus W``, so W worker processes, in a loopback-only network namespace); the driver, ``agenteval run
--executor ray``, runs there too. Each figure is the run's own time as the store records it (the experiment's
start to its end: connecting to the cluster, every task, committing the rows, compaction), not the Python
start-up before it; medians of ``--repeats`` runs.

Two workloads: ``cpu``, the mock at zero latency (the harness's own work: spans, scoring, Parquet), which no
number of worker processes can speed up past the machine's cores; and ``io``, the mock waiting ``--latency``
seconds per model call, as an agent waiting on a model API does, where each worker adds ``--concurrency`` trials
in flight.

    python benchmarks/bench_ray.py [--workers 1 2 4] [--repeats 3] [--cpu-trials 6000] [--io-trials 1200]
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from ray_cluster import BIN, LoopbackRayCluster  # noqa: E402

from agenteval.store import Store  # noqa: E402


def one_run(cluster: LoopbackRayCluster | None, trials: int, latency: float, concurrency: int, store: Path) -> float:
    """Seconds the run took, as its experiment records them."""
    command = [str(BIN / "agenteval"), "run", "--dataset", "arithmetic", "--agent", "mock", "--attempts", "1"]
    command += ["--cases", str(trials), "--concurrency", str(concurrency), "--store", str(store), "--json"]
    command += ["--agent-option", f"latency={latency}"]
    if cluster is not None:
        command += ["--executor", "ray", "--ray-address", cluster.address]
        child = cluster.popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    else:
        child = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    out, err = child.communicate(timeout=1800)
    if child.returncode != 0:
        raise SystemExit(f"the run failed:\n{out}\n{err}")
    summary = json.loads(out)
    assert summary["trials"] == trials and summary["status"] == "completed", summary
    (row,) = Store(store).rows(
        "SELECT epoch_ns(ended_at) - epoch_ns(started_at) AS ns FROM experiments WHERE experiment_id = ?",
        [summary["experiment_id"]],
    )
    return row["ns"] / 1e9


def measure(cluster, trials, latency, concurrency, repeats) -> float:
    times = []
    for _ in range(repeats):
        with tempfile.TemporaryDirectory() as store:
            times.append(one_run(cluster, trials, latency, concurrency, Path(store) / "store"))
    return statistics.median(times)


def commit_rate(rows: int = 20_000) -> float:
    """Trial rows per second the driver turns into a batch and publishes (its share of every trial)."""
    from agenteval.run._sink import trial_batch

    row = {
        "experiment_id": "x",
        "trial_id": "0" * 24,
        "case_id": "case-1",
        "attempt": 1,
        "trace_id": "0" * 32,
        "outcome": "passed",
        "passed": True,
        "started_at": 1,
        "ended_at": 2,
        "duration_ms": 1.0,
        "input_tokens": 10,
        "output_tokens": 5,
        "reply": "42",
    }
    with tempfile.TemporaryDirectory() as folder:
        store = Store(Path(folder) / "store")
        writer = store.writer("trials", flush_interval=3600)
        started = time.perf_counter()
        for start in range(0, rows, 500):
            writer.append(trial_batch([dict(row, trial_id=f"{i:024x}") for i in range(start, start + 500)]))
            writer.flush()
        writer.close()
        return rows / (time.perf_counter() - started)


def main() -> None:
    # A SIGTERM ends the benchmark through its ``with`` blocks, so the cluster it started is stopped too.
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, nargs="+", default=[1, 2, 4])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--cpu-trials", type=int, default=6000)
    parser.add_argument("--io-trials", type=int, default=1200)
    parser.add_argument("--latency", type=float, default=0.05)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--small-trials", type=int, default=20, help="a run this small shows the fixed cost")
    args = parser.parse_args()
    workloads = {"cpu": (args.cpu_trials, 0.0), "io": (args.io_trials, args.latency)}
    print(f"machine: {os.cpu_count()} cores; medians of {args.repeats} runs; trials/s over the run's own time")
    local = {name: measure(None, n, lat, args.concurrency, args.repeats) for name, (n, lat) in workloads.items()}
    for name, (n, _) in workloads.items():
        print(f"local, one process     {name:>3}: {n / local[name]:8.0f} trials/s ({local[name]:.2f} s)")
    results: dict[int, dict[str, float]] = {}
    fixed: dict[int, float] = {}
    for workers in args.workers:
        with LoopbackRayCluster(head_cpus=0) as cluster:
            cluster.add_node(workers, 6500 + workers)
            one_run(cluster, args.small_trials, 0.0, args.concurrency, Path(tempfile.mkdtemp()) / "warm")
            results[workers] = {
                name: measure(cluster, n, lat, args.concurrency, args.repeats) for name, (n, lat) in workloads.items()
            }
            fixed[workers] = measure(cluster, args.small_trials, 0.0, args.concurrency, args.repeats)
        for name, (n, _) in workloads.items():
            seconds = results[workers][name]
            base = results[args.workers[0]][name]
            print(
                f"ray, {workers} worker process(es) {name:>3}: {n / seconds:8.0f} trials/s ({seconds:.2f} s); "
                f"x{base / seconds:.2f} against {args.workers[0]} worker(s), x{local[name] / seconds:.2f} against local"
            )
        print(f"ray, {workers} worker process(es): a {args.small_trials}-trial run takes {fixed[workers]:.2f} s")
    first = args.workers[0]
    cpu_per_trial = (results[first]["cpu"] - fixed[first]) / args.cpu_trials * first
    rows = commit_rate()
    print("model of N machines with C cores each (figures from this machine):")
    print(f"  fixed cost of a run (connect, plan, last task, compaction): {fixed[first]:.2f} s")
    print(
        f"  harness CPU per trial in a worker: {cpu_per_trial * 1e3:.2f} ms -> at most {1 / cpu_per_trial:,.0f} "
        "trials/s per core"
    )
    print(f"  an agent waiting L s per trial: at most C x {args.concurrency} / L trials/s per machine")
    print(f"  the driver commits {rows:,.0f} trial rows/s (its only per-trial work), the ceiling of the whole cluster")
    print("  run time ~ fixed + trials / min(N x C / cpu_per_trial, N x C x concurrency / L, commit rate) + one task")


if __name__ == "__main__":
    main()
