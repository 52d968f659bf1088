"""Plugins: third-party scorers, agents and failure matchers, found through entry points.

A plugin is an ordinary distribution declaring entry points in the groups below; the entry point's
name is the name users type (``--scorer NAME``, ``--agent NAME``). Entry points are read once per
process and each is imported only when first used, so a plugin that fails to import costs nothing
until it is named, and then is one line naming its distribution, entry point and error.
"""

from __future__ import annotations

import dataclasses
import functools
from importlib import metadata
from typing import Any

from agenteval_instrumentation.text import exception_text

from .errors import AgentevalError, PluginError

SCORERS = "agenteval.scorers"
"""A :class:`~agenteval.scorers.Scorer` or a list or tuple of them, chosen by ``--scorer NAME``."""
PROVIDERS = "agenteval.providers"
"""An agent, or a factory of one (called with the ``--agent-option`` values), chosen by ``--agent NAME``."""
FAILURES = "agenteval.failures"
"""A failure matcher, as for :func:`agenteval.run.register_matcher`; every run registers them all."""
GROUPS = (SCORERS, PROVIDERS, FAILURES)


@dataclasses.dataclass(frozen=True, eq=False)
class Plugin:
    """One entry point of one of the :data:`GROUPS`: what it is called, where it points, who ships it."""

    group: str
    name: str
    target: str
    """The entry point's ``MODULE:ATTR``."""
    distribution: str
    version: str
    entry_point: metadata.EntryPoint = dataclasses.field(repr=False)

    def describe(self) -> str:
        """``NAME (GROUP, from DISTRIBUTION VERSION, TARGET)``, for messages."""
        return f"plugin {self.name} ({self.group}, from {self.distribution} {self.version}, {self.target})"

    def load(self) -> Any:
        """The object the entry point names, imported on first use (and once per process); a plugin
        that fails to import raises :class:`PluginError` every time it is used."""
        return _load(self)

    def error(
        self, problem: str, remedy: str | None = None, kind: type[AgentevalError] = PluginError
    ) -> AgentevalError:
        """A one-line error about this plugin that says what to do; ``kind`` for an error that has a class of its
        own whatever gave the failing code (an agent's factory: :class:`AgentLoadError`)."""
        return kind(f"{self.describe()}: {problem}; {remedy or f'fix or uninstall {self.distribution}'}")


@functools.cache
def discover() -> tuple[Plugin, ...]:
    """Every plugin installed, by group and name; read once per process."""
    found = []
    installed = metadata.entry_points()  # one scan of the installed distributions (tens of ms), not one per group
    for group in GROUPS:
        for entry in installed.select(group=group):
            dist = entry.dist
            found.append(
                Plugin(
                    group,
                    entry.name,
                    entry.value,
                    dist.name if dist is not None else "?",
                    dist.version if dist is not None else "?",
                    entry,
                )
            )
    return tuple(sorted(found, key=lambda p: (GROUPS.index(p.group), p.name, p.distribution)))


def plugins(group: str) -> list[Plugin]:
    """The plugins of one group."""
    return [p for p in discover() if p.group == group]


def find(group: str, name: str) -> Plugin | None:
    """The plugin called ``name`` in ``group``; two distributions giving the same name is an error, as
    neither can be said to be meant."""
    matches = [p for p in plugins(group) if p.name == name]
    if len(matches) > 1:
        shippers = " and ".join(f"{p.distribution} ({p.target})" for p in matches)
        raise PluginError(f"plugin {name}: {shippers} both provide it in {group}; name the one you mean by its target")
    return matches[0] if matches else None


_outcomes: dict[Plugin, tuple[bool, Any]] = {}


def _load(plugin: Plugin) -> Any:
    if plugin not in _outcomes:
        try:
            _outcomes[plugin] = (True, plugin.entry_point.load())
        except KeyboardInterrupt:  # the user's Ctrl-C during a slow import: it goes on
            raise
        except BaseException as exc:  # a plugin's import-time code is not ours: whatever it raises, even its own
            _outcomes[plugin] = (False, exc)  # BaseException subclass or a GeneratorExit
    loaded, value = _outcomes[plugin]
    if not loaded:
        # One line, whatever the plugin's message holds.
        raise plugin.error(f"cannot be loaded: {' '.join(exception_text(value).split())}") from value
    return value


@dataclasses.dataclass(frozen=True)
class PluginStatus:
    """A row of ``agenteval plugins``: a plugin, whether it loads as its group requires, and a note
    (why it does not load, or why its name does not reach it)."""

    group: str
    name: str
    distribution: str
    version: str
    target: str
    loads: bool
    note: str | None


def check_plugins() -> list[PluginStatus]:
    """Every plugin, loaded and checked as its group's users would (a scorer is a Scorer, an agent or a
    matcher is callable)."""
    from .agents._loading import MOCK, plugin_target
    from .run._failures import plugin_matcher
    from .scorers._loading import BUILTIN_BY_NAME, plugin_scorers

    checks = {SCORERS: plugin_scorers, PROVIDERS: plugin_target, FAILURES: plugin_matcher}
    builtins = {SCORERS: set(BUILTIN_BY_NAME), PROVIDERS: {MOCK}, FAILURES: set()}
    option = {SCORERS: "--scorer", PROVIDERS: "--agent"}
    rows = []
    for plugin in discover():
        notes = []
        try:
            checks[plugin.group](plugin)
            loads = True
        except PluginError as exc:
            loads = False
            notes.append(str(exc))
        if plugin.name in builtins[plugin.group]:
            notes.append(f"the built-in {plugin.name} comes first: use {option[plugin.group]} {plugin.target}")
        elif plugin.group in option and sum(p.name == plugin.name for p in plugins(plugin.group)) > 1:
            notes.append(f"another distribution has this name too: use {option[plugin.group]} {plugin.target}")
        fields = (plugin.group, plugin.name, plugin.distribution, plugin.version, plugin.target)
        rows.append(PluginStatus(*fields, loads, "; ".join(notes) or None))
    return rows
