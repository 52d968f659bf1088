"""Reports and comparisons at scale: two experiments of N trials each, scored at run time and rescored once.

The experiments are those bench_rescore.py generates (3 spans a trial, 1,000 cases), each with two passes
of two pass/fail scorers written straight into the store: the run's, and a rescore a second later that
changes one answer in seven, so the current score has to be picked from two (the costly case). Each
measurement runs in a fresh process and prints its wall time and peak RSS (``VmHWM``):

- ``report (no snapshot)``: a report with no saved figures to read: every figure computed from the stored
  trials and scores (what every report paid before snapshots, and what one pays while a writer that saves
  none, such as a run still going, changes the experiment);
- ``save figures``: what the end of a run, ``rescore`` and ``compact`` add to save them;
- ``report``: the report with the figures saved (what a user sees after a run or a rescore);
- ``compare``: the two experiments compared, both with their figures saved.

Targets, warm, on this machine class: report <= 1 s and compare <= 1.5 s at 1M trials; both <= 5 s and
<= 1 GB at 10M trials. ``--baseline REV`` measures a git revision's code on the same store in turns
(see bench_regression.py), with the ratio of the medians.

    python benchmarks/bench_report.py [--trials 1000000] [--repeats 3] [--keep DIR] [--baseline REV]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb
from bench_regression import baseline_tree, python_path
from bench_rescore import EXPERIMENT, generate

from agenteval.store import Store

SECOND = "20261130-000000-bench1"
RUN_PASS, RESCORE_PASS = "runpass00000", "rescore00000"
SCORERS = ("answer_match", "tool_use")


def write_scores(root: Path, experiment: str, trials: int) -> None:
    """Two passes of two pass/fail scorers; the rescore flips one trial in seven of ``answer_match``."""
    folder = root / "scores" / f"experiment_id={experiment}"
    folder.mkdir(parents=True, exist_ok=True)
    for number, pass_id in enumerate((RUN_PASS, RESCORE_PASS)):
        flip = "i % 7 = 3" if number else "false"
        duckdb.execute(f"""
            COPY (SELECT '{experiment}' AS experiment_id, printf('%016x', i) || 'abcdef01' AS trial_id,
                         'arithmetic-' || (i % 1000) AS case_id, s.scorer, '1' AS scorer_version,
                         '{pass_id}' AS pass_id,
                         CASE WHEN s.scorer = 'answer_match' AND (i % 10 = 0) <> ({flip}) THEN 0.0 ELSE 1.0 END
                           AS value,
                         CASE WHEN s.scorer = 'answer_match' AND (i % 10 = 0) <> ({flip}) THEN false ELSE true END
                           AS passed,
                         NULL::VARCHAR AS reason, NULL::VARCHAR AS error, false AS continuous,
                         make_timestamp(1764460800000000 + {number} * 1000000 + i)::TIMESTAMPTZ AS scored_at
                  FROM range({trials}) r(i), (SELECT unnest({list(SCORERS)}) AS scorer) s)
            TO '{folder}/part-{number}.parquet' (FORMAT parquet, COMPRESSION zstd)""")


def copy_experiment(root: Path, source: str, target: str) -> None:
    """The same rows under another experiment id (a second experiment to compare with)."""
    for table in ("experiments", "cases", "trials", "spans", "scores"):
        for path in sorted((root / table / f"experiment_id={source}").glob("*.parquet")):
            folder = root / table / f"experiment_id={target}"
            folder.mkdir(parents=True, exist_ok=True)
            duckdb.execute(f"""
                COPY (SELECT * REPLACE ('{target}' AS experiment_id) FROM read_parquet('{path}'))
                TO '{folder / path.name}' (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 100000)""")


def build(root: Path, trials: int) -> None:
    store = Store(root)
    generate(store, trials)
    write_scores(root, EXPERIMENT, trials)
    copy_experiment(root, EXPERIMENT, SECOND)


def forget_snapshots(root: Path) -> None:
    shutil.rmtree(root / ".snapshots", ignore_errors=True)


ONE_RUN = """
import json, sys, time
from agenteval.store import Store
try:
    from agenteval.analysis import build_report, compare
except ImportError:  # a baseline from before the packages
    from agenteval.report import build_report
    from agenteval.compare import compare
store, what = Store(sys.argv[1]), sys.argv[2]
started = time.perf_counter()
if what == "compare":
    result = compare(store, sys.argv[3], sys.argv[4])
elif what == "save":
    from agenteval.store._snapshots import save_figures
    save_figures(store, sys.argv[3])
else:
    result = build_report(store, sys.argv[3])
seconds = time.perf_counter() - started
# VmHWM, not ru_maxrss: a child's ru_maxrss starts from its parent's (this script's, large after generating).
peak_kb = next(int(line.split()[1]) for line in open("/proc/self/status") if line.startswith("VmHWM:"))
print(json.dumps({"seconds": seconds, "peak_mb": peak_kb / 1024}))
"""


def measure(root: Path, what: str, code: Path | None, experiment: str = EXPERIMENT) -> dict[str, float]:
    arguments = [SECOND, EXPERIMENT] if what == "compare" else [experiment]
    environment = dict(os.environ)
    if code is not None:
        environment["PYTHONPATH"] = python_path(code)
    done = subprocess.run(
        [sys.executable, "-c", ONE_RUN, str(root), what, *arguments],
        capture_output=True,
        text=True,
        env=environment,
        cwd=code,  # python -c puts the working directory first on sys.path: a baseline's own tree, then
        check=False,
    )
    if done.returncode:
        raise SystemExit(f"{what} failed:\n{done.stderr}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def rounds(root: Path, code: Path | None, repeats: int) -> dict[str, list[dict[str, float]]]:
    """Each measurement ``repeats`` times; cold ones after removing the snapshots."""
    runs: dict[str, list[dict[str, float]]] = {
        "report (no snapshot)": [],
        "save figures": [],
        "report": [],
        "compare": [],
    }
    snapshots = code is None or (code / "agenteval" / "store" / "_snapshots.py").exists()
    for _ in range(repeats):
        forget_snapshots(root)
        runs["report (no snapshot)"].append(measure(root, "report", code))
        if snapshots:
            runs["save figures"].append(measure(root, "save", code))
        runs["report"].append(measure(root, "report", code))
    if snapshots:
        measure(root, "save", code, SECOND)
    for _ in range(repeats):
        runs["compare"].append(measure(root, "compare", code))
    return runs


def summary(runs: list[dict[str, float]]) -> str:
    seconds = [r["seconds"] for r in runs]
    memory = [r["peak_mb"] for r in runs]
    return (
        f"{statistics.median(seconds) * 1000:8,.0f} ms (range {min(seconds) * 1000:,.0f}-{max(seconds) * 1000:,.0f})"
        f"   peak RSS {statistics.median(memory):6,.0f} MB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=1_000_000, help="Trials per experiment.")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keep", type=Path, default=None, help="Reuse (or create and keep) the store here.")
    parser.add_argument("--baseline", default=None, help="A git revision to measure on the same store too.")
    options = parser.parse_args()
    root = options.keep or Path(tempfile.mkdtemp())
    if not (root / "scores" / f"experiment_id={SECOND}").exists():
        started = time.perf_counter()
        build(root, options.trials)
        print(f"generated 2 experiments of {options.trials:,} trials in {time.perf_counter() - started:.0f} s")
    sides: dict[str, Path | None] = {"this tree": None}
    with tempfile.TemporaryDirectory() as scratch:
        if options.baseline:
            sides[f"baseline {options.baseline}"] = baseline_tree(options.baseline, Path(scratch))
        results = {name: rounds(root, tree, options.repeats) for name, tree in sides.items()}
    print(
        f"{options.trials:,} trials per experiment, 2 passes of 2 scorers, median of {options.repeats} fresh processes"
    )
    for name, runs in results.items():
        for what, measured in runs.items():
            if measured:
                print(f"  {name:22s} {what:14s} {summary(measured)}")
    if options.baseline:
        for what in ("report", "compare"):
            new = statistics.median(r["seconds"] for r in results["this tree"][what])
            old = statistics.median(r["seconds"] for r in results[f"baseline {options.baseline}"][what])
            print(f"  {what}: {old / new:.1f}x faster than {options.baseline}")
    print("targets: report <= 1 s, compare <= 1.5 s at 1M trials; <= 5 s and <= 1 GB at 10M")
    forget_snapshots(root)
    if options.keep is None:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
