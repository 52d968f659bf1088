"""Plugins: third-party scorers, agents and failure matchers, declared as entry points in the groups
``agenteval.scorers``, ``agenteval.providers`` and ``agenteval.failures`` (see the README's "Plugins")."""

from ._plugins import FAILURES, GROUPS, PROVIDERS, SCORERS, Plugin, PluginStatus, check_plugins, discover
from .errors import PluginError

__all__ = [
    "FAILURES",
    "GROUPS",
    "PROVIDERS",
    "SCORERS",
    "Plugin",
    "PluginError",
    "PluginStatus",
    "check_plugins",
    "discover",
]
