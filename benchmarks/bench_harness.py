"""The whole harness: the arithmetic dataset, the mock agent at zero latency, end to end (spans, scoring,
Parquet, compaction), in trials per second and peak memory, each size in a fresh process.

Targets on the project's 2-core machine class: at least 2,000 trials/s, and memory flat as trials grow
(100,000 trials under 500 MB peak RSS). Reference: Inspect AI ran 1,000 samples against its mock model
at about 40 samples/s on the same machine class.

    python benchmarks/bench_harness.py [--sizes 1000 10000 100000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile

ONE_RUN = """
import json, resource, shutil, sys, tempfile, time
from agenteval import evaluate
trials = int(sys.argv[1])
store = tempfile.mkdtemp()
started = time.perf_counter()
experiment = evaluate("mock", "arithmetic", cases=trials, attempts=1, store=store, progress="none", concurrency=8)
elapsed = time.perf_counter() - started
summary = experiment.summary  # a dict on a baseline from before typed summaries
assert (summary["trials"] if isinstance(summary, dict) else summary.trials) == trials, summary
peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
shutil.rmtree(store)
print(json.dumps({"trials": trials, "seconds": elapsed, "peak_mb": peak_mb}))
"""


def run_once(trials: int) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", ONE_RUN, str(trials)],
        capture_output=True,
        text=True,
        check=True,
        cwd=tempfile.gettempdir(),
    )
    return json.loads(done.stdout)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--repeats", type=int, default=3)
    options = parser.parse_args()
    print(f"{'trials':>8} {'trials/s':>10} {'seconds':>9} {'peak RSS':>10}   (median of {options.repeats} runs)")
    for size in options.sizes:
        runs = [run_once(size) for _ in range(options.repeats)]
        seconds = statistics.median(r["seconds"] for r in runs)
        peak = statistics.median(r["peak_mb"] for r in runs)
        print(f"{size:>8,} {size / seconds:>10,.0f} {seconds:>9.2f} {peak:>8.0f} MB")
    print("targets: >= 2,000 trials/s; 100,000 trials under 500 MB peak RSS; Inspect AI's mock: ~40 samples/s")


if __name__ == "__main__":
    main()
