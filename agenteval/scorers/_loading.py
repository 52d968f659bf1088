"""Choosing the scorers of a run or a rescore: the built-ins, plus users' own by name or import path."""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from ..errors import UsageError
from ._base import Scorer
from ._builtin import BUILTIN_SCORERS

BUILTIN_BY_NAME = {s.name: s for s in BUILTIN_SCORERS}


def _import(spec: str) -> list[Scorer]:
    module_name, sep, attr = spec.partition(":")
    if not sep:
        raise UsageError(f"--scorer {spec!r}: not a built-in scorer ({', '.join(BUILTIN_BY_NAME)}) nor MODULE:ATTR")
    try:
        found = getattr(importlib.import_module(module_name), attr)
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"--scorer {spec}: {exc}") from exc
    items = found if isinstance(found, (list, tuple)) else [found]
    if not all(isinstance(item, Scorer) for item in items):
        raise UsageError(f"--scorer {spec}: not a Scorer (make one with @agenteval.scorers.scorer)")
    return list(items)


def load_scorers(extra: Sequence[Scorer | str] = (), *, only: bool = False) -> list[Scorer]:
    """The built-ins plus ``extra`` (Scorer objects, built-in names or ``MODULE:ATTR``); an extra scorer
    with a built-in's name replaces it. ``only=True``: just the ones named in ``extra``."""
    chosen: dict[str, Scorer] = {} if only else dict(BUILTIN_BY_NAME)
    for item in extra:
        if isinstance(item, Scorer):
            chosen[item.name] = item
        elif item in BUILTIN_BY_NAME:
            chosen[item] = BUILTIN_BY_NAME[item]
        else:
            for loaded in _import(item):
                chosen[loaded.name] = loaded
    return list(chosen.values())


def scorer_specs(extra: Sequence[Scorer | str]) -> list[str]:
    """How a run's extra scorers are recorded, so ``rescore`` can load them again: a Python or Arrow
    scorer made with a decorator by ``MODULE:ATTR``, anything else by name."""
    specs = []
    for item in extra:
        if isinstance(item, Scorer):
            function = item.fn or item.arrow
            module = getattr(function, "__module__", None)
            specs.append(f"{module}:{function.__name__}" if module and function is not None else item.name)
        else:
            specs.append(item)
    return specs
