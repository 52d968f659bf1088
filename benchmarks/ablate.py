"""What a performance shortcut buys: the benchmarks' ``--ablate NAME`` measures the figure with the shortcut on
and off (``agenteval_exporters.ablation``), in turns, and prints both medians and their ratio.

The machine's speed drifts by tens of percent over minutes, so the two sides are measured back to back in each
repeat, their order alternating; the median of the paired ratios is printed with their range.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable


def in_turns(measure: Callable[[bool], float], repeats: int) -> tuple[list[float], list[float]]:
    """``measure(on)`` for each side ``repeats`` times, the sides in turns; returns (on, off)."""
    figures: dict[bool, list[float]] = {True: [], False: []}
    for repeat in range(repeats):
        for on in (True, False) if repeat % 2 == 0 else (False, True):
            figures[on].append(measure(on))
    return figures[True], figures[False]


def summary(name: str, on: list[float], off: list[float], unit: str, *, higher_is_better: bool) -> str:
    """One line: both medians, and how many times better the shortcut makes the figure."""
    better = [(a / b if higher_is_better else b / a) for a, b in zip(on, off, strict=True)]
    return (
        f"ablate {name}: on {statistics.median(on):,.1f} {unit}, off {statistics.median(off):,.1f} {unit}; "
        f"the shortcut is {statistics.median(better):.2f}x (paired, range {min(better):.2f} to {max(better):.2f}; "
        f"median of {len(on)} each)"
    )
