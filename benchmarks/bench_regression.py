"""Did a change slow the hot paths down? The exporter, harness and rescore benchmarks, run on this tree and
on a baseline revision in turns on the same machine (the machine's speed drifts by tens of percent over
minutes here, so only figures taken side by side compare), with the median of each side and their ratio.

The baseline's code is a ``git archive`` of the revision put first on ``PYTHONPATH``; both sides run this
tree's benchmark scripts, so they measure the same work.

    python benchmarks/bench_regression.py --baseline c4e2c30 [--rounds 3] [--only exporter harness rescore]
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
    "exporter": (["bench_exporter.py", "--repeats", "3"], r"ParquetSpanExporter\s+([\d,]+) spans/s", "spans/s"),
    "harness": (["bench_harness.py", "--sizes", "10000", "--repeats", "3"], r"^\s*10,000\s+([\d,]+)", "trials/s"),
    "rescore": (["bench_rescore.py", "--trials", "200000", "--repeats", "3"], r"([\d,]+) trials/s", "trials/s"),
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


def measure(name: str, tree: Path, keep: Path) -> float:
    arguments, pattern, _ = BENCHMARKS[name]
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
    parser.add_argument("--rounds", type=int, default=3, help="Turns per side (each a median of 3 runs).")
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
                    figures[side].append(measure(name, sides[side], Path(scratch) / f"{name}-{side}"))
            base, new = (statistics.median(figures[side]) for side in sides)
            unit = BENCHMARKS[name][2]
            print(
                f"{name:9} baseline {base:>10,.0f} {unit}   this tree {new:>10,.0f} {unit}   "
                f"ratio {new / base:.2f}   (rounds: {', '.join(f'{v:,.0f}' for v in figures['this tree'])} "
                f"against {', '.join(f'{v:,.0f}' for v in figures['baseline'])})"
            )


if __name__ == "__main__":
    main()
