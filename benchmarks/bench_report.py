"""Report latency over a large experiment: 1 million trials (3 million spans, 2 million scores).

The experiment is the one bench_rescore.py generates, scored once. The report is built once to warm
up, then timed over repeated runs in the same process; compare and gate time two such experiments.
Target: every report under 2 s warm.

    python benchmarks/bench_report.py [--trials 1000000] [--repeats 5] [--keep DIR]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from bench_rescore import EXPERIMENT, generate

from agenteval.analysis import build_report
from agenteval.render import to_html, to_markdown
from agenteval.scorers import rescore
from agenteval.store import Store


def timed(fn, repeats: int) -> float:
    fn()  # warm
    runs = []
    for _ in range(repeats):
        started = time.perf_counter()
        fn()
        runs.append(time.perf_counter() - started)
    return statistics.median(runs)


def trials(report) -> int:
    """A Report's trial count; a plain dict on baselines from before the typed Report."""
    return report["trials"] if isinstance(report, dict) else report.trials


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--keep", type=Path, default=None, help="Reuse (or create and keep) the store here.")
    options = parser.parse_args()
    root = options.keep or Path(tempfile.mkdtemp())
    store = Store(root)
    if not (root / "trials" / f"experiment_id={EXPERIMENT}").exists():
        generate(store, options.trials)
        rescore(store, EXPERIMENT)
    report = timed(lambda: build_report(store, EXPERIMENT), options.repeats)
    data = build_report(store, EXPERIMENT)
    html = timed(lambda: to_html(data), options.repeats)
    markdown = timed(lambda: to_markdown(data), options.repeats)
    print(
        f"report over {trials(data):,} trials: {report * 1000:,.0f} ms to compute, html {html * 1000:.1f} ms, "
        f"markdown {markdown * 1000:.1f} ms (median of {options.repeats}, warm); target < 2 s"
    )
    if options.keep is None:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
