"""Package namespaces whose names are imported on first use (PEP 562), for this distribution and agenteval's,
and module constants that are built on first use (:func:`built_on_first_use`).

Importing a package runs its ``__init__`` before any of its modules, so an ``__init__`` that re-exports
eagerly makes every light module of the package cost what the heaviest costs: ``agenteval --help`` paid for
DuckDB and pyarrow, and a module that wanted one text helper from here paid for the OpenTelemetry API. A
package lists its exports once for :func:`lazy_exports` and once under ``TYPE_CHECKING`` for type checkers
and editors; a test checks that the two lists agree.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping
from typing import Any


def lazy_exports(
    package: str, exports: Mapping[str, tuple[str, ...]]
) -> tuple[list[str], Callable[[str], Any], Callable[[], list[str]]]:
    """``__all__``, ``__getattr__`` and ``__dir__`` for ``package``, given its exports by module.

    A module is named relative to the package (``"._runner"``) or absolutely; a name may be given as
    ``"PUBLIC=private"`` to export a module's ``private`` under another name.
    """
    where: dict[str, tuple[str, str]] = {}
    for module, names in exports.items():
        for entry in names:
            public, _, private = entry.partition("=")
            where[public] = (module, private or public)

    def __getattr__(name: str) -> Any:
        try:
            module, attribute = where[name]
        except KeyError:
            raise AttributeError(f"module {package!r} has no attribute {name!r}") from None
        value = getattr(importlib.import_module(module, package), attribute)
        setattr(sys.modules[package], name, value)  # later lookups find it without this function
        return value

    def __dir__() -> list[str]:
        return sorted(set(vars(sys.modules[package])) | set(where))

    return sorted(where), __getattr__, __dir__


def built_on_first_use(
    module: str, build: Callable[[], Mapping[str, Any]], names: tuple[str, ...]
) -> Callable[[str], Any]:
    """A module's ``__getattr__`` for constants costly to make (Arrow schemas need pyarrow): the first use of any
    of ``names`` calls ``build`` once, which returns all of them, and they become the module's attributes. The
    module declares them under ``TYPE_CHECKING`` as well, for type checkers."""
    wanted = frozenset(names)

    def __getattr__(name: str) -> Any:
        if name not in wanted:
            raise AttributeError(f"module {module!r} has no attribute {name!r}")
        values = build()
        if set(values) != wanted:
            raise AssertionError(f"{module} built {sorted(values)}, not the names it lists, {sorted(wanted)}")
        vars(sys.modules[module]).update(values)  # later uses find them without this function
        return values[name]

    return __getattr__
