"""Choosing the scorers of a run or a rescore: the built-ins, plus users' own by name or import path.

A name is looked up among the built-ins first, then the ``agenteval.scorers`` plugins, then read as
``MODULE:ATTR``. A plugin's name never reaches past a built-in's, and a scorer reached through a plugin's
name may not be named like a built-in: replacing a built-in takes naming the scorer by ``MODULE:ATTR``.

A run records its own scorers (:func:`scorer_specs`) so ``rescore`` and ``--resume`` load them again: by a name, or,
for a ``Scorer(sql=...)``, which has no function to import, by its definition (:data:`SQL_SCORER_FIELDS`).
"""

from __future__ import annotations

import hashlib
import importlib
import json
from collections.abc import Sequence
from typing import Any

from .._plugins import SCORERS, Plugin, find
from ..errors import UsageError, module_not_found
from ._base import Scorer
from ._builtin import BUILTIN_SCORERS

BUILTIN_BY_NAME = {s.name: s for s in BUILTIN_SCORERS}

ScorerSpec = str | dict[str, Any]
"""A scorer as a run records it: a name (a built-in's, a plugin's, ``MODULE:ATTR``) or a SQL scorer's definition."""
SQL_SCORER_FIELDS: dict[str, type] = {
    "name": str,
    "sql": str,
    "version": str,
    "requires": list,
    "continuous": bool,
    "needs_content": bool,
}
"""The fields, and their types as recorded, that define a ``Scorer(sql=...)`` without a ``when=`` (the others are for
coroutine scorers): data alone, recorded as it is, so a later process rebuilds it and a changed SQL is another
scorer."""


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


def load_scorers(extra: Sequence[Scorer | ScorerSpec] = (), *, only: bool = False) -> list[Scorer]:
    """The built-ins plus ``extra`` (Scorer objects, built-in names, plugin names, ``MODULE:ATTR`` or a recorded
    SQL scorer's definition); an extra Scorer object or ``MODULE:ATTR`` scorer with a built-in's name replaces it.
    ``only=True``: just the ones named in ``extra``."""
    chosen: dict[str, Scorer] = {} if only else dict(BUILTIN_BY_NAME)
    given: dict[str, tuple[Scorer, Scorer | ScorerSpec]] = {}
    for item in extra:
        if isinstance(item, Scorer):
            found = [item]
        else:
            found = [sql_scorer(item)] if isinstance(item, dict) else _resolve(item)
        for loaded in found:
            _check_unique(given, loaded, item)
            chosen[loaded.name] = loaded
    return list(chosen.values())


def _check_unique(
    given: dict[str, tuple[Scorer, Scorer | ScorerSpec]], loaded: Scorer, item: Scorer | ScorerSpec
) -> None:
    """Refuse a second scorer of a name already given (the same one given twice is only listed twice): one would
    silently replace the other, and scores are stored by name. A built-in's name is not taken this way: a scorer of
    one's own named like it replaces it."""
    earlier = given.setdefault(loaded.name, (loaded, item))
    if earlier[0] != loaded:
        first, second = (_given_as(scorer, spec) for scorer, spec in (earlier, (loaded, item)))
        raise UsageError(
            f"two scorers are named {loaded.name}: {first} and {second}; scores are stored by a scorer's name, so "
            "give each its own (name= in @scorer or Scorer(...)) or leave one out"
        )


def _given_as(loaded: Scorer, item: Scorer | ScorerSpec) -> str:
    """How a scorer was given, as a message names it: as given (``MODULE:ATTR``, a plugin's name) or recorded, and
    where its function is (two lambdas of one script are both ``__main__:<lambda>``)."""
    label = spec_label(scorer_spec(item))
    code = getattr(loaded.fn or loaded.arrow or loaded.coroutine, "__code__", None)
    return label if code is None else f"{label} ({code.co_filename}, line {code.co_firstlineno})"


def sql_scorer(spec: dict[str, Any]) -> Scorer:
    """The SQL scorer a run recorded by its definition (:func:`scorer_spec`); a record that is not one (another
    field, a field of another type: a damaged or hand-edited store) is a :class:`UsageError` naming what is wrong."""
    wrong = [
        field
        for field in sorted(set(spec) | {"name", "sql"})
        if not isinstance(spec.get(field), SQL_SCORER_FIELDS.get(field, ()))
    ]
    try:
        if not wrong:
            return Scorer(**{**spec, "requires": tuple(spec.get("requires") or ())})
    except (ValueError, TypeError) as exc:  # requires a field a case does not give, or not a name
        wrong = [str(exc)]
    raise UsageError(f"the recorded SQL scorer {spec_label(spec)} is not one agenteval can load: {', '.join(wrong)}")


def scorer_spec(item: Scorer | ScorerSpec) -> ScorerSpec:
    """How a run records one of its extra scorers, so ``rescore`` and a resume can load it again: a Python or
    Arrow scorer made with a decorator by ``MODULE:ATTR``; a SQL scorer without a ``when=`` (a function) by its
    definition; anything else (a built-in's or a plugin's name, a ``Scorer(...)`` of a function) by name."""
    if not isinstance(item, Scorer):
        return item
    if item.sql is not None and item.when is None:
        # The version as text, as the scores store it: a Scorer(version=2) is loaded again with "2".
        fields = {field: getattr(item, field) for field in SQL_SCORER_FIELDS}
        return fields | {"requires": list(item.requires), "version": str(item.version)}
    function = item.fn or item.arrow
    module = getattr(function, "__module__", None)
    return f"{module}:{function.__name__}" if module and function is not None else item.name


def scorer_specs(extra: Sequence[Scorer | ScorerSpec]) -> list[ScorerSpec]:
    """How a run records its extra scorers (:func:`scorer_spec`)."""
    return [scorer_spec(item) for item in extra]


def spec_label(spec: ScorerSpec) -> str:
    """A recorded scorer as a message names it: a SQL scorer by its name and a digest of its definition, so two
    of one name with other SQL are told apart."""
    if isinstance(spec, str):
        return spec
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True, default=str).encode()).hexdigest()[:8]
    return f"{spec.get('name')} (SQL #{digest})"


def same_specs(given: Sequence[ScorerSpec], recorded: Sequence[ScorerSpec]) -> bool:
    """Whether the scorers ``given`` to a resume are those a run ``recorded``. A SQL scorer recorded by its bare name
    (by a run before SQL scorers were recorded by their definition, or one with a ``when=``) is matched by name."""
    names = {spec for spec in recorded if isinstance(spec, str)}
    keys = [
        spec["name"] if isinstance(spec, dict) and spec.get("name") in names else spec_label(spec) for spec in given
    ]
    return sorted(keys) == sorted(spec_label(spec) for spec in recorded)
