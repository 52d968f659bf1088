"""What a large ``--executor ray`` run costs the driver and the cluster in memory: the driver's peak RSS, the GCS
server's RSS growth, and the object store's peak use, for a mock run of ``--trials`` trivial trials.

A real cluster (tests/ray_cluster.py: a head with no CPUs for tasks and one worker node with ``--workers`` CPUs, in
a loopback-only network namespace), the driver in it too. The driver's and the GCS server's memory are read from
``/proc`` every ``--every`` seconds; the object store's from the cluster's own memory report (what ``ray memory
--stats-only`` prints), asked as often by a second process connected to the cluster.

    python benchmarks/bench_ray_memory.py [--trials 20000] [--workers 2] [--concurrency 8]
"""

from __future__ import annotations

import argparse
import json
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "tests"))

from ray_cluster import BIN, LoopbackRayCluster  # noqa: E402

OBJECT_STORE = """
import json, sys, time
from ray._private.internal_api import get_memory_info_reply, get_state_from_address
state = get_state_from_address(sys.argv[1])
peak_bytes = peak_objects = 0
deadline = time.monotonic() + float(sys.argv[3])
while time.monotonic() < deadline:
    stats = get_memory_info_reply(state).store_stats
    peak_bytes = max(peak_bytes, stats.object_store_bytes_used)
    peak_objects = max(peak_objects, stats.num_local_objects)
    print(json.dumps({"peak_bytes": peak_bytes, "peak_objects": peak_objects}), flush=True)
    time.sleep(float(sys.argv[2]))
"""
"""Prints the object store's peak use so far, a line per look, until killed (or a safety bound)."""


def rss(process: psutil.Process) -> int:
    try:
        return int(process.memory_info().rss)
    except psutil.Error:
        return 0


def main() -> None:
    signal.signal(signal.SIGTERM, lambda signum, frame: sys.exit(143))
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=20_000)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--concurrency", type=int, default=8)
    parser.add_argument("--every", type=float, default=0.1)
    args = parser.parse_args()
    with LoopbackRayCluster(head_cpus=0) as cluster:
        cluster.add_node(args.workers, 6600 + args.workers)
        (gcs,) = [p for p in cluster.processes() if "gcs_server" in " ".join(p.cmdline())]
        gcs_before = rss(gcs)
        store = Path(tempfile.mkdtemp()) / "store"
        command = [str(BIN / "agenteval"), "run", "--dataset", "arithmetic", "--agent", "mock", "--attempts", "1"]
        command += ["--cases", str(args.trials), "--concurrency", str(args.concurrency), "--store", str(store)]
        command += ["--json", "--quiet", "--executor", "ray", "--ray-address", cluster.address]
        watcher = cluster.popen(
            [sys.executable, "-c", OBJECT_STORE, cluster.address, str(args.every), "3600"],
            stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL,
        )
        watcher.stdout.readline()  # watching before the run starts
        started = time.monotonic()
        driver = cluster.popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
        process = psutil.Process(driver.pid)
        driver_peak = gcs_peak = 0
        while driver.poll() is None:
            driver_peak = max(driver_peak, rss(process))
            gcs_peak = max(gcs_peak, rss(gcs))
            time.sleep(args.every)
        out, err = driver.communicate()
        seconds = time.monotonic() - started
        watcher.kill()
        seen = watcher.communicate()[0].splitlines()
        if driver.returncode != 0:
            raise SystemExit(f"the run failed:\n{out}\n{err}")
        summary = json.loads(out)
        assert summary["trials"] == args.trials and summary["status"] == "completed", summary
        plasma = json.loads(seen[-1]) if seen else {"peak_bytes": 0, "peak_objects": 0}
        mib = 1 / 2**20
        print(
            f"{args.trials} trials on {args.workers} worker CPUs in {seconds:.1f} s, "
            f"{summary['this_run']['ray_tasks']} tasks: driver peak RSS {driver_peak * mib:.0f} MiB; "
            f"GCS RSS {gcs_before * mib:.0f} -> peak {gcs_peak * mib:.0f} MiB; object store peak "
            f"{plasma['peak_bytes'] * mib:.1f} MiB in {plasma['peak_objects']} objects"
        )


if __name__ == "__main__":
    main()
