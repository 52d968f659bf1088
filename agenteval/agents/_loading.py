"""Finding the agent a run names (``mock``, an ``agenteval.providers`` plugin's name, ``MODULE:ATTR``,
``FILE.py:ATTR``, looked up in that order) and its version.

The factory rule (the same for a plugin's target as for ``MODULE:ATTR``): when ``--agent-option``
values are given, ATTR is called with them as keyword arguments and must return the agent. Without
options, ATTR is the agent itself, unless it is a class, which is instantiated with no arguments. An
agent is any callable, sync or async, taking the user's message (and, if it accepts ``messages``, the
conversation so far).
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import hashlib
import importlib
import importlib.util
import inspect
import json
import re
import sys
import traceback
import types
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agenteval_instrumentation.text import exception_text

from .._plugins import PROVIDERS, Plugin, find
from ..errors import AgentevalError, AgentLoadError, UsageError, module_not_found

MOCK = "mock"


@dataclasses.dataclass
class LoadedAgent:
    """An agent ready to call, with what identifies its version."""

    fn: Callable[..., Any]
    spec: str
    name: str
    source_file: str | None
    options: dict[str, Any]
    plugin: str | None = None
    """``DISTRIBUTION VERSION`` when the agent came from a plugin."""
    imported: FileImport | None = None
    """What importing a ``FILE.py`` agent added to the interpreter, taken back by :meth:`release`."""

    def release(self) -> None:
        """Take back what loading the agent added to ``sys.path`` and ``sys.modules`` (for ``FILE.py``
        agents; nothing otherwise). The run calls it when it ends; calling it again does nothing."""
        if self.imported is not None:
            self.imported.undo()
            self.imported = None

    @property
    def source_available(self) -> bool:
        """Whether the agent's source file can be read (not so for ``python -c``, stdin or a notebook cell)."""
        return bool(self.source_file and Path(self.source_file).is_file())

    @property
    def provenance(self) -> dict[str, str]:
        """What the version was hashed from, for the experiment's record."""
        found = {"plugin": self.plugin} if self.plugin else {}
        if self.source_available:
            return {"source": str(self.source_file), "version_from": "source file", **found}
        return {"source": "unavailable", "version_from": "code", **found}

    @property
    def version(self) -> str:
        """A hash of the agent's configuration: its source file's content (or, without a readable
        file, its compiled code) and its options. Any change to either gives a new version; the folder an
        agent file is named from does not (``-a agents.py:f``, ``-a ./agents.py:f`` and its absolute path, or
        two checkouts of it, are one agent)."""
        return self._version_of(_identity(self.spec))

    def is_version(self, version: str, recorded_spec: str) -> bool:
        """Whether an experiment's recorded ``version`` is this agent's: as :attr:`version` hashes it, or as
        versions were hashed before 2026-12, from the spec as typed (``recorded_spec``, the experiment's)."""
        return version in (self.version, self._version_of(recorded_spec))

    def _version_of(self, spec: str) -> str:
        digest = hashlib.sha256()
        digest.update(spec.encode())
        if self.source_available and self.source_file:
            digest.update(Path(self.source_file).read_bytes())
        else:
            _hash_code_of(self.fn, digest, set())
        digest.update(json.dumps(self.options, sort_keys=True, default=option_text).encode())
        model_config = getattr(self.fn, "agenteval_config", None)  # a model agent's model, prompt, parameters
        if model_config is not None:
            digest.update(json.dumps(model_config, sort_keys=True, default=str).encode())
        return digest.hexdigest()[:12]


def _identity(spec: str) -> str:
    """``spec`` as the version hashes it: a ``FILE.py:ATTR`` by its file's name, without the folder."""
    module_part, sep, attr = spec.rpartition(":")
    return f"{Path(module_part).name}:{attr}" if sep and module_part.endswith(".py") else spec


@dataclasses.dataclass(frozen=True)
class FileImport:
    """An agent file imported under a generated module name, with its folder put first on ``sys.path``
    (as ``python FILE.py`` does) so its sibling modules import, for as long as the run lasts."""

    module_name: str
    folder: Path
    added_to_path: bool
    modules_before: frozenset[str]

    def undo(self) -> None:
        """Remove the generated module, the folder from ``sys.path`` and, if the folder was put there for
        the agent, the modules imported from it since: a second agent file with a sibling of the same
        name (``helpers.py``, say) in another folder must not get this one's."""
        sys.modules.pop(self.module_name, None)
        if not self.added_to_path:
            return
        with contextlib.suppress(ValueError):
            sys.path.remove(str(self.folder))
        for name in [name for name in sys.modules if name not in self.modules_before]:
            if _loaded_from(sys.modules.get(name), self.folder):
                del sys.modules[name]


def _loaded_from(module: types.ModuleType | None, folder: Path) -> bool:
    file = getattr(module, "__file__", None)
    return isinstance(file, str) and Path(file).resolve().is_relative_to(folder)


def load_agent(spec: str | Callable[..., Any], options: dict[str, Any] | None = None) -> LoadedAgent:
    """The agent named by ``spec`` (or given as a callable), built with ``options`` by the factory rule."""
    options = dict(options or {})
    plugin = None
    imported: FileImport | None = None
    if callable(spec):
        target, name, source = spec, getattr(spec, "__name__", type(spec).__name__), _source_of(spec)
        spec_text = f"{getattr(spec, '__module__', '?')}:{name}"
    elif spec == MOCK:
        from ._mock import mock_agent

        target, name, source, spec_text = mock_agent, "mock", _source_of(mock_agent), MOCK
        return LoadedAgent(target(**options), spec_text, name, source, options)
    elif (plugin := find(PROVIDERS, spec)) is not None:
        target, name, spec_text = plugin_target(plugin), plugin.name, spec
        # The module's file, as for MODULE:ATTR: the version is a hash of the plugin's code.
        source = getattr(sys.modules.get(plugin.entry_point.module), "__file__", None)
    else:
        target, name, source, imported = _import(spec)
        spec_text = spec
    try:
        agent = _built(spec_text, target, options, plugin)
    except BaseException:
        if imported is not None:
            imported.undo()
        raise
    shipped = f"{plugin.distribution} {plugin.version}" if plugin is not None else None
    return LoadedAgent(agent, spec_text, name, source, options, shipped, imported)


def _built(spec_text: str, target: Any, options: dict[str, Any], plugin: Plugin | None) -> Callable[..., Any]:
    """The agent by the factory rule (see the module's documentation); ``plugin``: the one that named ``target``."""
    agent = (
        _guarded(spec_text, "building the agent", lambda: target(**options), plugin)
        if options or inspect.isclass(target)
        else target
    )
    if not callable(agent):
        if plugin is not None:  # its factory's doing, as when it raises: the error names the distribution
            problem = f"building the agent returned a {type(agent).__name__}, which is not callable (an agent)"
            raise _load_failed(spec_text, problem, plugin)
        raise UsageError(f"--agent {spec_text}: {type(agent).__name__} is not callable")
    return agent


def plugin_target(plugin: Plugin) -> Any:
    """What an ``agenteval.providers`` plugin names: an agent, or a factory of one (a callable either way)."""
    target = plugin.load()
    if not callable(target):
        raise plugin.error(f"{type(target).__name__} is not callable (an agent, or a factory of one)")
    return target


def _import(spec: str) -> tuple[Any, str, str | None, FileImport | None]:
    module_part, sep, attr = spec.rpartition(":")
    if not sep or not module_part or not attr:
        raise UsageError(
            f"--agent {spec!r}: expected mock, an installed plugin's name (agenteval plugins lists them), "
            "MODULE:ATTR or FILE.py:ATTR"
        )
    if module_part.endswith(".py"):
        path = Path(module_part).resolve()
        if not path.is_file():
            raise UsageError(f"--agent {spec}: no such file {module_part}")
        module_name = f"agenteval_user_agent_{hashlib.sha1(str(path).encode()).hexdigest()[:8]}"
        loader = importlib.util.spec_from_file_location(module_name, path)
        if loader is None or loader.loader is None:
            raise UsageError(f"--agent {spec}: cannot import {module_part}")
        module = importlib.util.module_from_spec(loader)
        module_loader = loader.loader
        folder = path.parent
        imported = FileImport(module_name, folder, str(folder) not in sys.path, frozenset(sys.modules))
        sys.modules[module_name] = module
        if imported.added_to_path:
            sys.path.insert(0, str(folder))
        try:
            _guarded(spec, f"importing {module_part}", lambda: module_loader.exec_module(module))
        except BaseException:
            imported.undo()
            raise
    else:
        imported = None
        try:
            module = _guarded(spec, f"importing {module_part}", lambda: importlib.import_module(module_part))
        except AgentLoadError as exc:
            missing = exc.__cause__
            hint = module_not_found(module_part, missing) if isinstance(missing, ModuleNotFoundError) else None
            if hint is not None:
                raise AgentLoadError(
                    f"--agent {spec}: cannot import {module_part}: {hint}; or name its file "
                    f"({module_part.replace('.', '/')}.py:{attr})"
                ) from missing
            raise
    try:
        target = getattr(module, attr)
    except AttributeError:
        if imported is not None:
            imported.undo()
        raise UsageError(f"--agent {spec}: {module_part} has no attribute {attr!r}") from None
    return target, attr, getattr(module, "__file__", None), imported


def _guarded(spec: str, doing: str, step: Callable[[], Any], plugin: Plugin | None = None) -> Any:
    """``step()``; whatever the user's code raises, even ``sys.exit()`` or its own ``BaseException`` subclass,
    becomes one line naming the file and line where it was raised. A KeyboardInterrupt goes on: it may be
    the user's Ctrl-C during a slow import."""
    try:
        return step()
    except KeyboardInterrupt:
        raise
    except BaseException as exc:
        raise _load_failed(spec, _problem(doing, exc), plugin) from exc


def _problem(doing: str, exc: BaseException) -> str:
    if isinstance(exc, SyntaxError):
        return f"{exc.filename}:{exc.lineno}: syntax error: {exc.msg}"
    return f"{doing} raised {exception_text(exc)}{_where(exc)}"


def _load_failed(spec: str, problem: str, plugin: Plugin | None) -> AgentevalError:
    if plugin is None:
        return AgentLoadError(f"--agent {spec}: {problem}")
    # As the other plugin errors: the name alone says neither which package registered it nor what to do.
    remedy = f"check its --agent-option values, or fix or uninstall {plugin.distribution}"
    return plugin.error(problem, remedy, kind=AgentLoadError)


def _where(exc: BaseException) -> str:
    """`` (at FILE:LINE)``: the innermost frame of the user's code (not the import machinery)."""
    machinery = (Path(__file__).resolve(), Path(importlib.__file__).resolve().parent)
    own = [
        f
        for f in traceback.extract_tb(exc.__traceback__)
        if not f.filename.startswith("<frozen")
        and not Path(f.filename).resolve().is_relative_to(machinery[1])
        and Path(f.filename).resolve() != machinery[0]
    ]
    return f" (at {own[-1].filename}:{own[-1].lineno})" if own else ""


def _source_of(obj: Any) -> str | None:
    try:
        return inspect.getsourcefile(inspect.unwrap(obj) if callable(obj) else type(obj))
    except TypeError:
        return None


_PLAIN = (type(None), bool, int, float, complex, str, bytes, type(Ellipsis))


def code_digest(obj: Any) -> str:
    """A short hash of what defines the callable ``obj`` (:func:`_hash_code_of`: its compiled code, defaults,
    closure values and plain globals), the same in every process: two lambdas of one function differ in it though
    they share a qualified name. Compiled code is the interpreter's, so another Python version may change it."""
    digest = hashlib.sha256()
    _hash_code_of(obj, digest, set())
    return digest.hexdigest()[:12]


CODE_MARK = "#"
"""Between a callable's name and the hash of its code in :func:`callable_name`."""


def callable_name(value: Any) -> str:
    """``MODULE:QUALNAME#HASH`` of a function, method, partial's function or (for a callable object) its class,
    ``HASH`` its :func:`code_digest`: the same for the same code in every process, another for another lambda of the
    same name. Never code or a secret."""
    named = value
    while isinstance(named, functools.partial):
        named = named.func
    named = named if hasattr(named, "__qualname__") else type(named)
    return f"{getattr(named, '__module__', None) or '?'}:{named.__qualname__}{CODE_MARK}{code_digest(value)}"


_MEMORY_ADDRESS = re.compile(r" at 0x[0-9A-Fa-f]+")
"""What the default text of a function, method or object ends with: another address in every process."""


def option_text(value: Any) -> str:
    """An agent option that is not JSON as the version and the run's record give it: its ``str``, unless that names
    a memory address (a function, a lambda, a partial, an object without a ``__repr__`` of its own), another in every
    process: a callable is then named by its :func:`callable_name`. A callable object whose text says how it is set
    (``Threshold(0.5)``) keeps it: its callable name is its class's, the same for every setting."""
    text = str(value)
    if callable(value) and not isinstance(value, type) and _MEMORY_ADDRESS.search(text):
        return callable_name(value)
    return text


def _hash_code_of(obj: Any, digest: Any, seen: set[int]) -> None:
    """Feed ``digest`` what defines ``obj`` without its source: a function's compiled code, defaults,
    closure values and the plain-valued globals it names; a class's methods; an instance's class.
    Only what is the same in every process goes in (no addresses, no set order)."""
    if id(obj) in seen:  # a recursive function, or a method calling another
        return
    seen.add(id(obj))
    if isinstance(obj, types.MethodType):
        _hash_code_of(obj.__func__, digest, seen)
    elif isinstance(obj, functools.partial):
        _hash_code_of(obj.func, digest, seen)
        digest.update(_plain_text((obj.args, tuple(sorted(obj.keywords.items())))).encode())
    elif isinstance(obj, types.FunctionType):
        _hash_function(obj, digest, seen)
    elif inspect.isclass(obj):
        for cls in obj.__mro__:
            if cls.__module__ == "builtins":
                continue
            for attribute, value in sorted(vars(cls).items()):
                if isinstance(value, (staticmethod, classmethod)):
                    value = value.__func__
                if isinstance(value, types.FunctionType):
                    digest.update(attribute.encode())
                    _hash_code_of(value, digest, seen)
    else:  # a callable instance: its class's methods, and what it wraps (a decorated partial or callable object)
        _hash_code_of(type(obj), digest, seen)
        wrapped = getattr(obj, "__wrapped__", None)
        if wrapped is not None:
            _hash_value(wrapped, digest, seen)


def _hash_function(fn: types.FunctionType, digest: Any, seen: set[int]) -> None:
    _hash_code_object(fn.__code__, digest)
    digest.update(_plain_text((fn.__defaults__, sorted((fn.__kwdefaults__ or {}).items()))).encode())
    for cell in fn.__closure__ or ():
        try:
            value = cell.cell_contents
        except ValueError:  # a cell not filled yet
            continue
        _hash_value(value, digest, seen)
    for global_name in fn.__code__.co_names:
        if global_name in fn.__globals__:
            value = fn.__globals__[global_name]
            # A helper defined beside the agent counts; a library's function is versioned by its package.
            helper = isinstance(value, types.FunctionType) and value.__module__ == fn.__module__
            if _is_plain(value) or helper:
                digest.update(global_name.encode())
                _hash_value(value, digest, seen)


def _hash_value(value: Any, digest: Any, seen: set[int]) -> None:
    if _is_plain(value):
        digest.update(_plain_text(value).encode())
    elif callable(value):
        _hash_code_of(value, digest, seen)
    else:  # an object we cannot fingerprint stably: its type at least
        digest.update(type(value).__qualname__.encode())


def _hash_code_object(code: types.CodeType, digest: Any) -> None:
    digest.update(code.co_code)
    digest.update(repr((code.co_names, code.co_varnames, code.co_freevars)).encode())
    for constant in code.co_consts:
        if isinstance(constant, types.CodeType):  # a nested function, lambda or comprehension
            _hash_code_object(constant, digest)
        else:
            digest.update(_plain_text(constant).encode())


def _is_plain(value: Any) -> bool:
    if isinstance(value, (tuple, list, frozenset, set)):
        return all(_is_plain(item) for item in value)
    if isinstance(value, dict):
        return all(_is_plain(key) and _is_plain(item) for key, item in value.items())
    return isinstance(value, _PLAIN)


def _plain_text(value: Any) -> str:
    """``repr`` with sets in sorted order (their iteration order changes with the process's hash seed)."""
    if isinstance(value, (frozenset, set)):
        return f"{type(value).__name__}({sorted(_plain_text(item) for item in value)})"
    if isinstance(value, (tuple, list)):
        return f"{type(value).__name__}({[_plain_text(item) for item in value]})"
    if isinstance(value, dict):
        return f"dict({sorted((_plain_text(k), _plain_text(v)) for k, v in value.items())})"
    if isinstance(value, _PLAIN):
        return repr(value)
    return type(value).__qualname__


def accepts_messages(fn: Callable[..., Any]) -> bool:
    """Whether the agent takes the conversation as a ``messages`` argument."""
    try:
        parameters = inspect.signature(fn).parameters
    except (TypeError, ValueError):
        return False
    return "messages" in parameters or any(p.kind is p.VAR_KEYWORD for p in parameters.values())


def is_async(fn: Callable[..., Any]) -> bool:
    # An instance whose __call__ is a coroutine function (the mock agent) is async too.
    return inspect.iscoroutinefunction(fn) or inspect.iscoroutinefunction(type(fn).__call__)
