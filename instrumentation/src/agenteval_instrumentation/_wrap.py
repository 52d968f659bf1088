"""Wrapping sync functions, coroutine functions, generators and async generators in spans.

Nothing heavy is imported here, nor when a function is decorated: the OpenTelemetry API, the step's
description (its signature, what it records) and the recording code (``_recording``) are loaded on
the decorated function's first call. An application that imports decorated code without calling it
(a command's ``--help``, a cold start) does not pay for them; one that traces has imported the API
with its TracerProvider already. The wrappers below use the names ``_load`` binds as globals, so a
call costs nothing for the deferral beyond one test of a closure cell.

Context rule for streams: the span is made current only while the wrapped generator's own code
runs (around each ``send``/``throw``), and detached before the chunk is handed to the consumer.
Attach and detach therefore always happen in the same frame and context, so a consumer that
stops early, or a generator finalised by the garbage collector in another context, never
triggers "Failed to detach context" nor leaves the stream's span current for the caller.
"""

from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from types import MethodType
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from opentelemetry import context as context_api
    from opentelemetry import trace

    from ._recording import (
        Stream,
        aclose_in,
        record_error,
        run_in,
        start,
        succeed,
        traced,
    )
    from ._returned import Recorder, follow, returned_stream
    from ._steps import Step

# Code flags of a function's ``__code__`` (CPython's values, as ``inspect`` has them).
_CO_GENERATOR, _CO_COROUTINE, _CO_ASYNC_GENERATOR = 0x20, 0x80, 0x200
_FUNCTION = type(lambda: None)


Decorator = tuple[Callable[..., Any], dict[str, Any]]
"""A decorator and its options (``(tool, {"name": ..., ...})``): what makes a decorated object again."""


def instrument(fn: Callable[..., Any], make_step: Callable[[], Step], decorator: Decorator) -> Callable[..., Any]:
    """A wrapper of ``fn`` of the same kind (sync, coroutine, generator, async generator) that records each
    call as the step ``make_step`` describes; ``make_step`` is called once, on the first call. ``decorator`` is
    what made it, with its options: a wrapper that is no function pickles as that decorator applied again."""
    kind = _kind(fn)
    if kind == "async generator":
        wrapper = _async_generator_wrapper(fn, make_step)
    elif kind == "generator":
        wrapper = _generator_wrapper(fn, make_step)
    elif kind == "coroutine":
        wrapper = _coroutine_wrapper(fn, make_step)
    else:
        wrapper = _sync_wrapper(fn, make_step)
    if _binds(fn):
        # Functions (and anything else that binds): a function wrapper binds as they do, and a module-level one
        # pickles by reference, as the function it replaces.
        return functools.wraps(fn)(wrapper)
    return Instrumented(fn, wrapper, decorator)


def _binds(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` binds to an instance when set on a class, so that its wrapper must too.

    A bound method (``obj.method``, ``Class.a_classmethod``) and a staticmethod's function read off its class are
    already what is called: they bind to nothing, and their function wrapper could not be pickled, since the name it
    copies (``Class.method``) finds the undecorated function, where the undecorated bound method pickles.
    """
    if isinstance(fn, MethodType):
        return False
    if type(fn) is _FUNCTION:
        return not _is_a_staticmethod_function(fn)
    return hasattr(fn, "__get__")


def _is_a_staticmethod_function(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` is the function of a staticmethod of the class its qualified name names (``Class.helper``
    read off ``Class``), not a function being decorated in its class's body (that class is not made yet)."""
    owner_name, _, name = fn.__qualname__.rpartition(".")
    if not owner_name or "<locals>" in owner_name:
        return False
    owner = _named(fn.__module__, owner_name)
    found = getattr(owner, "__dict__", {}).get(name)
    return isinstance(found, staticmethod) and found.__func__ is fn


def _named(module_name: str | None, qualname: str) -> Any:
    """What ``qualname`` names in the module ``module_name`` as pickle looks it up (None if nothing): where a
    function or class is found when pickled by reference."""
    found: Any = sys.modules.get(module_name or "")
    for part in qualname.split("."):
        try:
            found = getattr(found, part)
        except Exception:  # a lookup that fails in any way finds nothing, as for pickle
            return None
    return found


class Instrumented:
    """A decorated partial, callable object, class, builtin or bound method.

    A function wrapper of one could not be pickled (it is a local function, not found by its name), so one sent to
    a process pool failed where the undecorated object is sent; and it bound to the instance when set on a class,
    where they do not. This pickles as its decorator, with the same options, applied again to what it wraps (which
    pickles as it does undecorated), and binds to nothing. For ``inspect`` it is function-like, with the code of
    the wrapper that runs, so it answers for its kind as the function wrapper did (``iscoroutinefunction`` of a
    decorated object whose ``__call__`` is async is true); its signature is the wrapped object's.
    """

    # Function-like to inspect (as its _signature_is_functionlike reads it); the signature comes from __wrapped__.
    __defaults__ = None
    __kwdefaults__ = None

    def __init__(self, wrapped: Callable[..., Any], wrapper: Callable[..., Any], decorator: Decorator) -> None:
        target: Any = wrapped
        while isinstance(target, functools.partial):
            target = target.func
        named = target if hasattr(target, "__qualname__") else type(target)
        self.__wrapped__ = wrapped
        self.__code__ = wrapper.__code__
        self.__name__: str = named.__name__
        self.__qualname__: str = named.__qualname__
        module = getattr(named, "__module__", None)
        if isinstance(module, str):  # else this class's
            self.__module__ = module
        self.__doc__ = getattr(target, "__doc__", None)
        annotations = getattr(target, "__annotations__", None)
        self.__annotations__ = annotations if isinstance(annotations, dict) else {}
        self._wrapper = wrapper
        self._decorator = decorator

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self._wrapper(*args, **kwargs)

    def __reduce__(self) -> str | tuple[Any, ...]:
        if _named(self.__module__, self.__qualname__) is self:
            # Found at its name (``Class.helper = tool(Class.helper)``): by reference, as a function wrapper, since
            # what it wraps would find this object at that name, not itself.
            return self.__qualname__
        decorator, options = self._decorator
        return _decorated, (decorator, options, self.__wrapped__)

    def __getattr__(self, name: str) -> Any:
        # The wrapped object's own attributes (a callable object's state), as a function wrapper copied them; special
        # names are not passed on, so that pickle, copy and inspect see this object's.
        if name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.__wrapped__, name)

    def __repr__(self) -> str:
        return f"<{self._decorator[0].__name__} {self.__wrapped__!r}>"


def _decorated(decorator: Callable[..., Any], options: dict[str, Any], wrapped: Callable[..., Any]) -> Any:
    """``wrapped`` decorated again, as an unpickled :class:`Instrumented`."""
    return decorator(wrapped, **options)


def _kind(fn: Callable[..., Any]) -> str:
    """What ``inspect.isasyncgenfunction``, ``isgeneratorfunction`` and ``iscoroutinefunction`` say of what a call
    of ``fn`` runs; read off the code flags of a plain function, so that decorating does not import ``inspect``."""
    if type(fn) is _FUNCTION and not hasattr(fn, "_is_coroutine_marker"):
        flags = fn.__code__.co_flags
        is_async_generator = bool(flags & _CO_ASYNC_GENERATOR)
        is_generator = bool(flags & _CO_GENERATOR)
        is_coroutine = bool(flags & _CO_COROUTINE)
    else:  # methods, partials, callable objects and functions marked as coroutines: as inspect says
        import inspect

        runs = _what_runs(fn)
        is_async_generator = inspect.isasyncgenfunction(runs)
        is_generator = inspect.isgeneratorfunction(runs)
        is_coroutine = inspect.iscoroutinefunction(runs)
    if is_async_generator:
        return "async generator"
    if is_generator:
        return "generator"
    return "coroutine" if is_coroutine else "function"


def _what_runs(fn: Callable[..., Any]) -> Callable[..., Any]:
    """What a call of ``fn`` runs, to ask inspect about: a callable object's ``__call__``, also behind a
    ``functools.partial``. inspect answers for the object itself, which is never a coroutine function, so an
    object with an ``async def __call__`` was wrapped as a sync function: its span ended when the coroutine was
    made, before any of its work. Functions, methods and partials of them are left to inspect, which sees through
    partials; so are classes (calling one makes an instance) and anything marked as a coroutine function."""
    import functools
    import inspect

    runs: Any = fn
    while isinstance(runs, functools.partial):
        runs = runs.func
    if inspect.isroutine(runs) or isinstance(runs, (type, Instrumented)) or hasattr(fn, "_is_coroutine_marker"):
        return fn
    return runs.__call__


def _first_call(make_step: Callable[[], Step]) -> Step:
    _load()
    return make_step()


def _load() -> None:
    """Bind the names the wrappers use: the OpenTelemetry API and the recording code."""
    global context_api, trace, Stream, aclose_in, record_error, run_in, start, succeed, traced
    global Recorder, follow, returned_stream
    from opentelemetry import context as context_api
    from opentelemetry import trace

    from ._recording import (
        Stream,
        aclose_in,
        record_error,
        run_in,
        start,
        succeed,
        traced,
    )
    from ._returned import Recorder, follow, returned_stream


def _sync_wrapper(fn: Callable[..., Any], make_step: Callable[[], Step]) -> Callable[..., Any]:
    step: Step | None = None

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        nonlocal step
        if step is None:
            step = _first_call(make_step)
        span, capturing = start(step, args, kwargs)
        if not traced(span):
            return fn(*args, **kwargs)
        ctx = trace.set_span_in_context(span)
        token = context_api.attach(ctx)
        ends = True
        try:
            result = fn(*args, **kwargs)
        except BaseException as exc:
            record_error(span, exc)
            raise
        else:
            if step.follows_streams and (kind := returned_stream(result)) is not None:
                ends = False  # the stream's consumption ends it (see _returned)
                return follow(result, kind, Recorder(span, step, Stream(capturing), ctx))
            succeed(span, step, result, capturing)
            return result
        finally:
            context_api.detach(token)
            if ends:
                span.end()

    return wrapper


def _coroutine_wrapper(fn: Callable[..., Any], make_step: Callable[[], Step]) -> Callable[..., Any]:
    step: Step | None = None

    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        nonlocal step
        if step is None:
            step = _first_call(make_step)
        span, capturing = start(step, args, kwargs)
        if not traced(span):
            return await fn(*args, **kwargs)
        ctx = trace.set_span_in_context(span)
        token = context_api.attach(ctx)
        ends = True
        try:
            result = await fn(*args, **kwargs)
        except BaseException as exc:
            record_error(span, exc)
            raise
        else:
            if step.follows_streams and (kind := returned_stream(result)) is not None:
                ends = False
                return follow(result, kind, Recorder(span, step, Stream(capturing), ctx))
            succeed(span, step, result, capturing)
            return result
        finally:
            context_api.detach(token)
            if ends:
                span.end()

    return wrapper


def _generator_wrapper(fn: Callable[..., Any], make_step: Callable[[], Step]) -> Callable[..., Any]:
    step: Step | None = None

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        nonlocal step
        if step is None:
            step = _first_call(make_step)
        span, capturing = start(step, args, kwargs)
        if not traced(span):
            return (yield from fn(*args, **kwargs))
        ctx = trace.set_span_in_context(span)
        stream = Stream(capturing)
        try:
            generator = run_in(ctx, span, fn, args, kwargs)
            sent: Any = None
            thrown: BaseException | None = None
            while True:
                token = context_api.attach(ctx)
                pending, thrown = thrown, None
                try:
                    if pending is not None:
                        chunk = generator.throw(pending)
                    else:
                        chunk = generator.send(sent)
                except StopIteration as stop:
                    stream.finish(span, step)
                    return stop.value
                except BaseException as exc:
                    # The consumer's own exception coming back out means it abandoned the stream.
                    stream.closed_early = exc is pending
                    record_error(span, exc)
                    stream.finish(span, step)
                    raise
                finally:
                    context_api.detach(token)
                stream.add(chunk)
                try:
                    sent = yield chunk
                except GeneratorExit:
                    # As ``yield from`` does: what closing the inner generator raises replaces GeneratorExit.
                    stream.closed_early = True
                    try:
                        run_in(ctx, span, generator.close, (), {})
                    finally:
                        stream.finish(span, step)
                    raise
                except BaseException as exc:
                    thrown = exc
        finally:
            span.end()

    return wrapper


def _async_generator_wrapper(fn: Callable[..., Any], make_step: Callable[[], Step]) -> Callable[..., Any]:
    step: Step | None = None

    async def wrapper(*args: Any, **kwargs: Any) -> Any:
        nonlocal step
        if step is None:
            step = _first_call(make_step)
        span, capturing = start(step, args, kwargs)
        if not traced(span):  # no span: pass everything through, as ``yield from`` does for a generator
            inner = fn(*args, **kwargs)
            value: Any = None
            error: BaseException | None = None
            while True:
                try:
                    item = await (inner.athrow(error) if error is not None else inner.asend(value))
                except StopAsyncIteration:
                    return
                error = None
                try:
                    value = yield item
                except GeneratorExit:
                    await inner.aclose()
                    raise
                except BaseException as exc:
                    error = exc
        ctx = trace.set_span_in_context(span)
        stream = Stream(capturing)
        try:
            generator = run_in(ctx, span, fn, args, kwargs)
            sent: Any = None
            thrown: BaseException | None = None
            while True:
                token = context_api.attach(ctx)
                pending, thrown = thrown, None
                try:
                    if pending is not None:
                        chunk = await generator.athrow(pending)
                    else:
                        chunk = await generator.asend(sent)
                except StopAsyncIteration:
                    stream.finish(span, step)
                    return
                except BaseException as exc:
                    # The consumer's own exception coming back out means it abandoned the stream.
                    stream.closed_early = exc is pending
                    record_error(span, exc)
                    stream.finish(span, step)
                    raise
                finally:
                    context_api.detach(token)
                stream.add(chunk)
                try:
                    sent = yield chunk
                except GeneratorExit:
                    stream.closed_early = True
                    try:
                        await aclose_in(ctx, span, generator)
                    finally:
                        stream.finish(span, step)
                    raise
                except BaseException as exc:
                    thrown = exc
        finally:
            span.end()

    return wrapper
