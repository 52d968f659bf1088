"""Binding call arguments to parameter names, cheaply, once the signature has been read."""

from __future__ import annotations

import functools
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


class PartialBinder(Binder):
    """Binds a call of a ``functools.partial`` as the function it calls receives it: the partial's arguments first,
    its keywords overridden by the call's. Bound to the partial's own signature, a call recorded only the arguments
    given at the call, not those the partial holds."""

    __slots__ = ("_bound_args", "_bound_keywords")

    def __init__(self, fn: functools.partial[Any]) -> None:
        args: tuple[Any, ...] = ()
        keywords: dict[str, Any] = {}
        target: Any = fn
        while isinstance(target, functools.partial):  # a partial of a partial: the inner one's arguments come first
            args, keywords = target.args + args, {**target.keywords, **keywords}
            target = target.func
        super().__init__(target)
        self._bound_args = args
        self._bound_keywords = keywords

    def bind(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> dict[str, Any]:
        return super().bind(self._bound_args + args, {**self._bound_keywords, **kwargs})


def binder_of(fn: Callable[..., Any]) -> Binder:
    """The binder for ``fn``: a partial's binds what it holds too; any other's binds only the call."""
    return PartialBinder(fn) if isinstance(fn, functools.partial) else Binder(fn)
