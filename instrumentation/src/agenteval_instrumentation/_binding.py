"""Binding call arguments to parameter names, cheaply, once the signature has been read."""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

_RECEIVERS = ("self", "cls")


class Binder:
    """Maps a call's positional and keyword arguments to parameter names.

    The signature is read once, at decoration; ``inspect.Signature.bind`` costs several
    microseconds a call, this a fraction of one. ``self``/``cls`` are never included.
    """

    __slots__ = ("_names", "_shadowed", "_skip", "_var_keyword", "_var_positional", "names")

    def __init__(self, fn: Callable[..., Any]) -> None:
        try:
            params = list(inspect.signature(fn).parameters.values())
        except Exception:  # builtins and some C callables have no signature; a broken __signature__ raises anything
            params = []
        positional = [p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
        self._skip = 1 if positional and positional[0] in _RECEIVERS else 0
        self._names = tuple(positional)
        self._var_positional = next((p.name for p in params if p.kind is p.VAR_POSITIONAL), "args")
        self._var_keyword = next((p.name for p in params if p.kind is p.VAR_KEYWORD), "kwargs")
        # With **kwargs, a keyword may carry the name of a positional-only parameter or of *args
        # (``f(1, a=2)`` for ``def f(a, /, **kw)``): such keywords are kept under the **kwargs name.
        self._shadowed = (
            frozenset(p.name for p in params if p.kind in (p.POSITIONAL_ONLY, p.VAR_POSITIONAL))
            if any(p.kind is p.VAR_KEYWORD for p in params)
            else frozenset()
        )
        self.names = frozenset(p.name for p in params) - set(_RECEIVERS)

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        """The call's arguments by parameter name, receiver left out, defaults not filled in."""
        names = self._names
        if self._skip:
            names, args = names[1:], args[1:]
        bound = dict(zip(names, args, strict=False))
        if len(args) > len(names):
            bound[self._var_positional] = list(args[len(names) :])
        if kwargs:
            if self._shadowed and not self._shadowed.isdisjoint(kwargs):
                return self._bind_shadowing(bound, kwargs)
            bound.update(kwargs)
        return bound

    def _bind_shadowing(self, bound: dict[str, Any], kwargs: dict[str, Any]) -> dict[str, Any]:
        shadowing = {k: v for k, v in kwargs.items() if k in bound}
        bound.update((k, v) for k, v in kwargs.items() if k not in shadowing)
        if shadowing:
            extra = bound.get(self._var_keyword)
            bound[self._var_keyword] = {**extra, **shadowing} if isinstance(extra, dict) else shadowing
        return bound
