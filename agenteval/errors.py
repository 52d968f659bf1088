"""The errors a user can cause: each says where (file and line, field, option, experiment) and what to do.

The command line shows an :class:`AgentevalError` as one line (an error listing several problems, a line each)
and exits with its ``exit_code``; any other exception is a bug and keeps its traceback. ``agenteval --debug`` shows
tracebacks for both.
"""

from __future__ import annotations


class AgentevalError(Exception):
    """A problem with what the user gave or has (a dataset, an option, an agent, a store); not a bug."""

    exit_code = 1

    def lines(self) -> list[str]:
        """The message's lines: one, unless the error lists several things (a dataset's problems, unreadable
        files). A line break inside a line is part of what it quotes (a file name can hold one), and the command
        line shows it as an escape, so a quoted path never prints a line of its own."""
        return [str(self)]


class SeveralProblems(AgentevalError):
    """An error made of several lines, each one problem: given as the lines, not as one text, so that a line
    break inside one of them is not taken for the end of it."""

    def __init__(self, *lines: str) -> None:
        super().__init__("\n".join(lines))
        self._lines = list(lines)

    def lines(self) -> list[str]:
        return list(self._lines)


class UsageError(AgentevalError, ValueError):
    """An option or argument that cannot work as given."""

    exit_code = 2


class ExperimentNotFound(AgentevalError, ValueError):
    """No experiment of the id given in the store (or the store holds none): a mistyped id, or another store."""


class OutputNotWritable(AgentevalError, OSError):
    """A file a command was told to write (``-o``) cannot be written: a missing folder, permissions, a full disk."""

    @classmethod
    def at(cls, option: str, path: object, error: OSError) -> OutputNotWritable:
        return cls(
            f"{option} {path}: cannot be written ({error.strerror or error}); check that its folder exists and can "
            "be written, or choose another file"
        )


class AgentLoadError(AgentevalError, ValueError):
    """The agent could not be loaded: its file, module or factory failed."""


class PluginError(AgentevalError, ValueError):
    """A plugin (an entry point of ``agenteval.scorers``, ``agenteval.providers`` or ``agenteval.failures``)
    could not be loaded or is not what its group needs; the message names its distribution."""


def module_not_found(module: str, error: ModuleNotFoundError) -> str | None:
    """What to do when ``MODULE`` of a ``MODULE:ATTR`` option is not found itself (None when the missing module is
    one it imports): the ``agenteval`` command's Python path holds installed packages, not the current folder,
    where ``python -m`` would have looked."""
    if error.name is None or not (module == error.name or module.startswith(error.name + ".")):
        return None
    return (
        f"{error}; the command imports MODULE from Python's path, which holds installed packages but not the "
        f"current folder: add the module's folder (PYTHONPATH=. for the current one), or install it"
    )
