"""Did a change slow the hot paths down? The exporter, harness and rescore benchmarks, run on this tree and
on a baseline revision in turns on the same machine (the machine's speed drifts by tens of percent over
minutes here, so only figures taken side by side compare), with the median of each side and their ratio.

The baseline's code is a ``git archive`` of the revision put first on ``PYTHONPATH``; both sides run this
tree's benchmark scripts, so they measure the same work.

    python benchmarks/bench_regression.py --baseline c4e2c30 [--rounds 3] [--repeats 3]
        [--only exporter harness rescore]

Each round measures both sides back to back (their order alternating), so the ratio of a round's two
figures is taken under one state of the machine; the median of those paired ratios, with their range,
is the figure to read. The two sides' medians are shown as well.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import tarfile
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent

BENCHMARKS = {
    # name: (script and arguments, the figure's pattern in its output, unit)
    "exporter": (["bench_exporter.py"], r"ParquetSpanExporter\s+([\d,]+) spans/s", "spans/s"),
    "harness": (["bench_harness.py", "--sizes", "10000"], r"^\s*10,000\s+([\d,]+)", "trials/s"),
    "rescore": (["bench_rescore.py", "--trials", "200000"], r"([\d,]+) trials/s", "trials/s"),
}


def baseline_tree(revision: str, into: Path) -> Path:
    """The baseline's source, extracted from git."""
    archive = into / "baseline.tar"
    with open(archive, "wb") as out:
        subprocess.run(["git", "-C", str(ROOT), "archive", revision], stdout=out, check=True)
    with tarfile.open(archive) as tar:
        tar.extractall(into / "tree", filter="data")
    return into / "tree"


def python_path(tree: Path) -> str:
    return os.pathsep.join(str(tree / part) for part in (".", "instrumentation/src", "exporters/src"))


def measure(name: str, tree: Path, keep: Path, repeats: int) -> float:
    arguments, pattern, _ = BENCHMARKS[name]
    arguments = [*arguments, "--repeats", str(repeats)]
    if name == "rescore":  # each side rescores its own store, made once by its own code
        arguments = [*arguments, "--keep", str(keep)]
    env = {**os.environ, "PYTHONPATH": python_path(tree)}
    done = subprocess.run(
        [sys.executable, str(HERE / arguments[0]), *arguments[1:]],
        capture_output=True,
        text=True,
        env=env,
        cwd=tempfile.gettempdir(),
        check=True,
    )
    found = re.search(pattern, done.stdout, re.MULTILINE)
    if found is None:
        raise RuntimeError(f"{name}: no figure in its output:\n{done.stdout}\n{done.stderr}")
    return float(found.group(1).replace(",", ""))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--baseline", required=True, help="The git revision to compare against.")
    parser.add_argument("--rounds", type=int, default=3, help="Turns per side.")
    parser.add_argument("--repeats", type=int, default=3, help="Runs in each turn (the turn's figure is their median).")
    parser.add_argument("--only", nargs="+", choices=list(BENCHMARKS), default=list(BENCHMARKS))
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        sides = {"baseline": baseline_tree(options.baseline, Path(scratch)), "this tree": ROOT}
        print(f"baseline {options.baseline} against this tree; {options.rounds} rounds, sides in turns")
        for name in options.only:
            figures: dict[str, list[float]] = {side: [] for side in sides}
            for round_ in range(options.rounds):
                order = list(sides) if round_ % 2 == 0 else list(reversed(sides))
                for side in order:
                    keep = Path(scratch) / f"{name}-{side}"
                    figures[side].append(measure(name, sides[side], keep, options.repeats))
            base, new = (statistics.median(figures[side]) for side in sides)
            paired = [n / b for n, b in zip(figures["this tree"], figures["baseline"], strict=True)]
            faster = sum(r > 1 for r in paired)
            unit = BENCHMARKS[name][2]
            print(
                f"{name:9} paired ratio {statistics.median(paired):.2f} (range {min(paired):.2f} to {max(paired):.2f}, "
                f"this tree faster in {faster} of {len(paired)} rounds)   medians: baseline {base:,.0f} {unit}, "
                f"this tree {new:,.0f} {unit}   (rounds: {', '.join(f'{v:,.0f}' for v in figures['this tree'])} "
                f"against {', '.join(f'{v:,.0f}' for v in figures['baseline'])})"
            )


if __name__ == "__main__":
    main()
