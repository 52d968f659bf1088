"""Switches that turn a performance shortcut off, for benchmarks only.

Each shortcut has a slower, plainer path that gives the same result. ``AGENTEVAL_ABLATE`` (a comma-separated
list of the names below, read once at import) forces the plain path, so a benchmark can show what the shortcut
buys (``python benchmarks/bench_exporter.py --ablate slots``). Nothing else should set it.

A shortcut may also fall back to its plain path by itself (a span made by something other than the SDK's
tracer has no private slots); :data:`FALLBACKS` counts those, and a test asserts that the real SDK's spans never
cause one, so an SDK release that breaks a shortcut fails the suite instead of slowing runs down unnoticed.
"""

from __future__ import annotations

import importlib
import os
import warnings
from collections import Counter
from dataclasses import dataclass
from types import ModuleType

ENVIRONMENT_VARIABLE = "AGENTEVAL_ABLATE"


@dataclass(frozen=True)
class Shortcut:
    """A shortcut and the module-level flag that holds whether it is on."""

    flag: str
    """``module:ATTRIBUTE``, set once at import from :data:`ENVIRONMENT_VARIABLE`."""
    what: str


SHORTCUTS = {
    "slots": Shortcut(
        "agenteval_exporters.encode:READ_PRIVATE_SLOTS",
        "the exporter reads SDK spans' private slots, not their public properties",
    ),
    "typed_struct": Shortcut(
        "agenteval_exporters.encode:TYPED_STRUCT",
        "the exporter builds the typed attribute columns in one Arrow struct conversion, not one column at a time",
    ),
    "orjson": Shortcut(
        "agenteval_exporters.encode:ORJSON",
        "the exporter writes attribute, event and resource JSON with orjson, not the standard library's json",
    ),
    "warm_up": Shortcut(
        "agenteval_exporters.exporter:WARM_UP",
        "a new exporter does the first export's one-time work at once, not while the first spans wait",
    ),
    "gc_freeze": Shortcut(
        "agenteval.run._runner:FREEZE_LONG_LIVED_OBJECTS",
        "a run freezes what outlives its trials out of the garbage collector's full passes",
    ),
}
"""Every shortcut that can be switched off, by name."""

FALLBACKS: Counter[str] = Counter()
"""How many times each shortcut fell back to its plain path by itself in this process (not when ablated)."""


def _ablated_from_environment() -> frozenset[str]:
    names = {name.strip() for name in os.environ.get(ENVIRONMENT_VARIABLE, "").split(",") if name.strip()}
    unknown = sorted(names - SHORTCUTS.keys())
    if unknown:
        warnings.warn(
            f"{ENVIRONMENT_VARIABLE}: unknown shortcut {', '.join(unknown)} ignored; known: {', '.join(SHORTCUTS)}",
            stacklevel=2,
        )
    return frozenset(names & SHORTCUTS.keys())


ABLATED = _ablated_from_environment()
"""The shortcuts switched off for this process."""


def enabled(shortcut: str) -> bool:
    """Whether ``shortcut`` is on: the module that owns it reads this once, into a flag benchmarks may flip."""
    if shortcut not in SHORTCUTS:
        raise KeyError(f"no shortcut named {shortcut!r}; known: {', '.join(SHORTCUTS)}")
    return shortcut not in ABLATED


def flag(shortcut: str) -> tuple[ModuleType, str]:
    """The module and attribute name of ``shortcut``'s flag, for a benchmark to flip it in a running process."""
    module, attribute = SHORTCUTS[shortcut].flag.split(":")
    return importlib.import_module(module), attribute
