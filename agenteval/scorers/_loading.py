"""Choosing the scorers of a run or a rescore: the built-ins, plus users' own by name or import path.

A name is looked up among the built-ins first, then the ``agenteval.scorers`` plugins, then read as
``MODULE:ATTR``. A plugin's name never reaches past a built-in's, and a scorer reached through a plugin's
name may not be named like a built-in: replacing a built-in takes naming the scorer by ``MODULE:ATTR``.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence

from .._plugins import SCORERS, Plugin, find
from ..errors import UsageError, module_not_found
from ._base import Scorer
from ._builtin import BUILTIN_SCORERS

BUILTIN_BY_NAME = {s.name: s for s in BUILTIN_SCORERS}


def plugin_scorers(plugin: Plugin) -> list[Scorer]:
    """The scorers an ``agenteval.scorers`` plugin gives (it names a Scorer or a list or tuple of them)."""
    found = plugin.load()
    items = list(found) if isinstance(found, (list, tuple)) else [found]
    if not items or not all(isinstance(item, Scorer) for item in items):
        raise plugin.error("not a Scorer nor a list of them (make one with @agenteval.scorers.scorer)")
    for item in items:
        if item.name in BUILTIN_BY_NAME:
            raise plugin.error(
                f"its scorer {item.name} is named like a built-in, which a plugin's name never replaces",
                f"to replace the built-in, name it by its target: --scorer {plugin.target}",
            )
    return items


def _resolve(spec: str) -> list[Scorer]:
    if spec in BUILTIN_BY_NAME:
        return [BUILTIN_BY_NAME[spec]]
    plugin = find(SCORERS, spec)
    return plugin_scorers(plugin) if plugin is not None else _import(spec)


def _import(spec: str) -> list[Scorer]:
    module_name, sep, attr = spec.partition(":")
    if not sep:
        raise UsageError(
            f"--scorer {spec!r}: not a built-in scorer ({', '.join(BUILTIN_BY_NAME)}), "
            "an installed plugin's (agenteval plugins lists them) nor MODULE:ATTR"
        )
    if module_name.endswith(".py") or "/" in module_name or "\\" in module_name:  # a file, as --agent takes
        module = module_name.removesuffix(".py").replace("\\", "/").rsplit("/", 1)[-1]
        raise UsageError(
            f"--scorer {spec}: a file; --scorer takes MODULE:ATTR (a module on Python's path, so rescore can import it "
            f"again), a built-in's or a plugin's name: write {module}:{attr}, with its folder on PYTHONPATH "
            "(PYTHONPATH=. for the current one)"
        )
    try:
        found = getattr(importlib.import_module(module_name), attr)
    except ModuleNotFoundError as exc:
        raise UsageError(f"--scorer {spec}: {module_not_found(module_name, exc) or exc}") from exc
    except (ImportError, AttributeError) as exc:
        raise UsageError(f"--scorer {spec}: {exc}") from exc
    items = found if isinstance(found, (list, tuple)) else [found]
    if not all(isinstance(item, Scorer) for item in items):
        raise UsageError(f"--scorer {spec}: not a Scorer (make one with @agenteval.scorers.scorer)")
    return list(items)


def load_scorers(extra: Sequence[Scorer | str] = (), *, only: bool = False) -> list[Scorer]:
    """The built-ins plus ``extra`` (Scorer objects, built-in names, plugin names or ``MODULE:ATTR``); an
    extra Scorer object or ``MODULE:ATTR`` scorer with a built-in's name replaces it. ``only=True``: just the
    ones named in ``extra``."""
    chosen: dict[str, Scorer] = {} if only else dict(BUILTIN_BY_NAME)
    for item in extra:
        for loaded in [item] if isinstance(item, Scorer) else _resolve(item):
            chosen[loaded.name] = loaded
    return list(chosen.values())


def scorer_specs(extra: Sequence[Scorer | str]) -> list[str]:
    """How a run's extra scorers are recorded, so ``rescore`` can load them again: a Python or Arrow
    scorer made with a decorator by ``MODULE:ATTR``, anything else (a built-in's or a plugin's name) by name."""
    specs = []
    for item in extra:
        if isinstance(item, Scorer):
            function = item.fn or item.arrow
            module = getattr(function, "__module__", None)
            specs.append(f"{module}:{function.__name__}" if module and function is not None else item.name)
        else:
            specs.append(item)
    return specs
