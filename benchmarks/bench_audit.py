"""The audit's near-duplicate search at scale, against the all-candidates search it replaced.

The dataset is what made that search quadratic: every input opens with one of three ~20-word greetings that share
most of their words ("hi there i have a question about my recent order from your online store ..."), then names 3
to 6 made-up product words (2 to 4 syllables: the short ones recur, about 150 times each in 100,000 inputs) and a
unique order number; 20 near-duplicates are planted (an input copied with one word changed). It is written as JSONL
and read with ``load_dataset``, as ``agenteval audit`` reads it; only ``near_duplicates`` (at the default 0.8) is
timed. ``--templated N`` adds the worst case of any exact search: N inputs of one template, all alike (N*(N-1)/2
pairs to count).

The baseline is ``agenteval/dataset/_audit.py`` of ``--baseline`` (git show), loaded as a module beside the
current one; it runs at ``--baseline-sizes`` only (at 100,000 cases it did not finish in 5 minutes). Where both
run, their results are checked equal. Each figure is the median of ``--repeats`` runs with its range, wall and CPU
time (CPU time moves less on a machine shared with other work).

    python benchmarks/bench_audit.py [--sizes 10000 100000] [--baseline 34e6a24] [--baseline-sizes 10000]
                                     [--templated 3000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agenteval.dataset import Case, load_dataset
from agenteval.dataset._audit import near_duplicates

ROOT = Path(__file__).resolve().parent.parent
SYLLABLES = "ka lo mi ne ru sa ti vo ze ba de fi go hu ja ke li mo nu pa qi ro su ta ve wi xo yu zo".split()
GREETINGS = [
    "hi there i have a question about my recent order from your online store and i would like some help with",
    "hello i have a question about my recent order from your store and i would really like some help with",
    "hi i have a quick question about my last order from your online store and would like some help with",
]
PLANTED = 20


def made_up_word(rng: random.Random) -> str:
    return "".join(rng.choice(SYLLABLES) for _ in range(rng.randint(2, 4)))


def inputs(count: int, seed: int = 0) -> list[str]:
    """Inputs sharing about 20 common words, with a few of their own, and :data:`PLANTED` near-duplicates."""
    rng = random.Random(seed)
    texts = []
    for i in range(count):
        own = " ".join(made_up_word(rng) for _ in range(rng.randint(3, 6)))
        texts.append(f"{rng.choice(GREETINGS)} the {own} (order {100000 + i})?")
    for _ in range(PLANTED):
        words = texts[rng.randrange(count)].split()
        words[-3] = made_up_word(rng)  # one of its own words changed
        texts[rng.randrange(count)] = " ".join(words)
    return texts


def dataset(texts: list[str], folder: Path, name: str) -> list[Case]:
    path = folder / f"{name}.jsonl"
    lines = (json.dumps({"id": f"c{i}", "input": t, "expected_output": "x"}) for i, t in enumerate(texts))
    path.write_text("\n".join(lines) + "\n")
    return load_dataset(str(path)).cases


def baseline(revision: str) -> Any:
    """The audit module of ``revision``, loaded beside the current one (its relative imports resolve to this tree)."""
    source = subprocess.run(
        ["git", "-C", str(ROOT), "show", f"{revision}:agenteval/dataset/_audit.py"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    module = types.ModuleType("agenteval.dataset._audit_baseline")
    module.__package__ = "agenteval.dataset"
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, f"{revision}:agenteval/dataset/_audit.py", "exec"), module.__dict__)
    return module


def timed(search: Callable[[], Any], repeats: int) -> tuple[list[float], list[float], Any]:
    walls, cpus, result = [], [], None
    for _ in range(repeats):
        wall, cpu = time.perf_counter(), time.process_time()
        result = search()
        walls.append(time.perf_counter() - wall)
        cpus.append(time.process_time() - cpu)
    return walls, cpus, result


def figure(seconds: list[float]) -> str:
    return f"{statistics.median(seconds):8.3f} s ({min(seconds):.3f} to {max(seconds):.3f})"


def measure(name: str, cases: list[Case], before: Any, repeats: int) -> None:
    walls, cpus, found = timed(lambda: near_duplicates(cases, 0.8), repeats)
    print(f"{name:>10} now      wall {figure(walls)}  cpu {figure(cpus)}  {found.total:,} pairs", flush=True)
    if before is None:
        return
    old_walls, old_cpus, old_found = timed(lambda: before.near_duplicates(cases, 0.8), repeats)
    assert (old_found.pairs, old_found.total, old_found.groups) == (found.pairs, found.total, found.groups)
    print(f"{name:>10} baseline wall {figure(old_walls)}  cpu {figure(old_cpus)}  (the same pairs, total, groups)")
    wall_ratio = statistics.median(old_walls) / statistics.median(walls)
    cpu_ratio = statistics.median(old_cpus) / statistics.median(cpus)
    print(f"{name:>10} baseline / now: wall {wall_ratio:.1f}x, cpu {cpu_ratio:.1f}x", flush=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", type=int, nargs="+", default=[10_000, 100_000])
    parser.add_argument("--baseline", default="34e6a24", help="The git revision to compare against.")
    parser.add_argument("--baseline-sizes", type=int, nargs="*", default=[10_000])
    parser.add_argument("--templated", type=int, default=3000, help="Inputs of one template (0: none).")
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    before = baseline(args.baseline) if args.baseline else None
    print(f"near_duplicates at similarity 0.8, {args.repeats} runs each; baseline {args.baseline}")
    with tempfile.TemporaryDirectory() as folder:
        for size in args.sizes:
            cases = dataset(inputs(size), Path(folder), f"common-{size}")
            measure(f"{size:,}", cases, before if size in args.baseline_sizes else None, args.repeats)
        if args.templated:
            texts = [f"What is the refund policy for order number {1000 + i}?" for i in range(args.templated)]
            cases = dataset(texts, Path(folder), "templated")
            measure(f"templated {args.templated:,}", cases, before, args.repeats)


if __name__ == "__main__":
    main()
