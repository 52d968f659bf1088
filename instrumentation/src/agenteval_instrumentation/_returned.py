"""Streams an ``@llm_call`` returns rather than yields: the SDK's stream object
(``client.chat.completions.create(..., stream=True)``, ``client.messages.create(..., stream=True)``, their
async twins) and its stream managers (``client.messages.stream(...)``, ``client.chat.completions.stream(...)``,
``client.responses.stream(...)``).

The call's span stays open past the return and covers the stream's consumption: the object handed back is
a proxy that records each chunk as it passes (as a yielded stream is recorded) and delegates everything else
to the SDK's object. The span ends when the stream is exhausted, when it raises, when the consumer closes it
(``close()``, leaving its ``with`` block, or stopping early and closing it), and at the latest when the proxy
is garbage collected: a stream never consumed ends its span then, marked ``agenteval.stream.closed_early``,
so no span is left open for the life of the process. Like a yielded stream's, the span is current only while
the SDK reads the next chunk, never between chunks.

Recognised by shape, without importing an SDK: a stream has ``__next__`` (or ``__anext__``), ``close`` and
the HTTP ``response`` it reads; a manager is a context manager whose class name ends in ``StreamManager``.
Another instrumentation's proxy of the stream is read through to the object it wraps, and followed as it is.
"""

from __future__ import annotations

from typing import Any

from opentelemetry import context as context_api
from opentelemetry.trace import Span

from .masking import masked_logger
from .responses import read_response

logger = masked_logger(__name__)

SNAPSHOTS = ("current_message_snapshot", "current_completion_snapshot")
"""Properties of an SDK's stream helper that hold the message accumulated so far (Anthropic, OpenAI chat)."""


def returned_stream(result: Any) -> str | None:
    """``"sync"``, ``"async"``, ``"manager"`` or ``"async_manager"`` when ``result`` is an SDK stream or
    stream manager an ``@llm_call`` should follow, else None."""
    try:
        return _stream_kind(result)
    except Exception:  # an object whose attribute lookup raises other than AttributeError (a dict whose
        return None  # ``__getattr__`` is ``__getitem__``) is no SDK stream, and is the caller's to have


def _stream_kind(result: Any) -> str | None:
    # Another instrumentation may hand back its proxy of the SDK's stream (OpenLLMetry's wrapt ObjectProxy
    # ChatStream): its class has every method, so the shape is read from the object it wraps.
    kind = type(getattr(result, "__wrapped__", result))
    if kind.__name__.endswith("StreamManager"):
        if hasattr(kind, "__enter__"):
            return "manager"
        if hasattr(kind, "__aenter__"):
            return "async_manager"
        return None
    if not hasattr(result, "response") or not hasattr(kind, "close"):
        return None
    if hasattr(kind, "__next__"):
        return "sync"
    if hasattr(kind, "__anext__"):
        return "async"
    return None


class Recorder:
    """The open span of a returned stream, what the stream has produced, and the one way it ends."""

    __slots__ = ("ctx", "done", "span", "state", "step")

    def __init__(self, span: Span, step: Any, state: Any, ctx: context_api.Context) -> None:
        self.span, self.step, self.state, self.ctx = span, step, state, ctx
        self.done = False

    def finish(self, closed_early: bool = False, source: Any = None) -> None:
        """Record what was consumed (or what ``source``'s snapshot holds) and end the span, once."""
        if self.done:
            return
        self.done = True
        try:
            snapshot = _snapshot(source)
            if snapshot is not None:
                self.state.info = read_response(snapshot)
                self.state.message.final = snapshot
            self.state.closed_early = self.state.closed_early or closed_early
            self.state.finish(self.span, self.step)
        finally:
            self.span.end()

    def fail(self, exc: BaseException) -> None:
        from ._recording import record_error

        if not self.done:
            record_error(self.span, exc)
        self.finish()


def _class_of(attribute: str) -> Any:
    """A proxy's ``__class__``: that of the SDK object it holds under ``attribute``, so that code telling a streamed
    reply by its class (``isinstance(reply, openai.Stream)``) takes the branch it takes undecorated, as with
    wrapt's proxies; ``type()`` still gives the proxy's own class."""

    def of(proxy: Any) -> type:
        held = proxy.__dict__.get(attribute)
        return type(proxy) if held is None else held.__class__

    return property(of)


def _snapshot(source: Any) -> Any:
    if source is None:
        return None
    for name in SNAPSHOTS:
        try:
            value = getattr(source, name, None)
        except Exception:  # a helper that has seen no event yet may refuse
            value = None
        if value is not None:
            return value
    return None


class StreamProxy:
    """A returned sync stream: iterate it as the SDK's; the span ends as the module says."""

    __class__ = _class_of("_stream")

    def __init__(self, stream: Any, recorder: Recorder, helper: Any = None) -> None:
        self._stream = stream
        self._recorder = recorder
        self._helper = helper  # a manager's stream, whose snapshot says what was streamed

    def __iter__(self) -> StreamProxy:
        return self

    def __next__(self) -> Any:
        recorder = self._recorder
        token = context_api.attach(recorder.ctx)
        try:
            chunk = next(self._stream)
        except StopIteration:
            recorder.finish(source=self._helper)
            raise
        except BaseException as exc:
            recorder.fail(exc)
            raise
        finally:
            context_api.detach(token)
        recorder.state.add(chunk)
        return chunk

    def close(self) -> None:
        try:
            self._stream.close()
        finally:
            self._recorder.finish(closed_early=True, source=self._helper)

    def __enter__(self) -> StreamProxy:
        return self

    def __exit__(self, *exc_info: Any) -> None:
        self.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def __del__(self) -> None:
        recorder = self.__dict__.get("_recorder")
        if recorder is not None and not recorder.done:
            recorder.finish(closed_early=True, source=self.__dict__.get("_helper"))


class AsyncStreamProxy:
    """A returned async stream: ``async for`` it as the SDK's; the span ends as the module says."""

    __class__ = _class_of("_stream")

    def __init__(self, stream: Any, recorder: Recorder, helper: Any = None) -> None:
        self._stream = stream
        self._recorder = recorder
        self._helper = helper

    def __aiter__(self) -> AsyncStreamProxy:
        return self

    async def __anext__(self) -> Any:
        recorder = self._recorder
        token = context_api.attach(recorder.ctx)
        try:
            chunk = await self._stream.__anext__()
        except StopAsyncIteration:
            recorder.finish(source=self._helper)
            raise
        except BaseException as exc:
            recorder.fail(exc)
            raise
        finally:
            context_api.detach(token)
        recorder.state.add(chunk)
        return chunk

    async def close(self) -> None:
        try:
            await self._stream.close()
        finally:
            self._recorder.finish(closed_early=True, source=self._helper)

    async def __aenter__(self) -> AsyncStreamProxy:
        return self

    async def __aexit__(self, *exc_info: Any) -> None:
        await self.close()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)

    def __del__(self) -> None:
        recorder = self.__dict__.get("_recorder")
        if recorder is not None and not recorder.done:
            recorder.finish(closed_early=True, source=self.__dict__.get("_helper"))


class ManagerProxy:
    """A returned stream manager (``with client.messages.stream(...) as stream``): the stream it opens is
    followed; leaving the block ends the span with the SDK's accumulated message."""

    __class__ = _class_of("_manager")

    def __init__(self, manager: Any, recorder: Recorder) -> None:
        self._manager = manager
        self._recorder = recorder
        self._stream: Any = None

    def __enter__(self) -> Any:
        recorder = self._recorder
        token = context_api.attach(recorder.ctx)
        try:
            self._stream = self._manager.__enter__()
        except BaseException as exc:
            recorder.fail(exc)
            raise
        finally:
            context_api.detach(token)
        return StreamProxy(self._stream, recorder, helper=self._stream)

    def __exit__(self, *exc_info: Any) -> Any:
        try:
            return self._manager.__exit__(*exc_info)
        finally:
            if exc_info[1] is not None:
                self._recorder.fail(exc_info[1])
            self._recorder.finish(closed_early=exc_info[1] is not None, source=self._stream)

    async def __aenter__(self) -> Any:
        recorder = self._recorder
        token = context_api.attach(recorder.ctx)
        try:
            self._stream = await self._manager.__aenter__()
        except BaseException as exc:
            recorder.fail(exc)
            raise
        finally:
            context_api.detach(token)
        return AsyncStreamProxy(self._stream, recorder, helper=self._stream)

    async def __aexit__(self, *exc_info: Any) -> Any:
        try:
            return await self._manager.__aexit__(*exc_info)
        finally:
            if exc_info[1] is not None:
                self._recorder.fail(exc_info[1])
            self._recorder.finish(closed_early=exc_info[1] is not None, source=self._stream)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._manager, name)

    def __del__(self) -> None:
        recorder = self.__dict__.get("_recorder")
        if recorder is not None and not recorder.done:
            recorder.finish(closed_early=True, source=self.__dict__.get("_stream"))


def follow(result: Any, kind: str, recorder: Recorder) -> Any:
    """The proxy of a returned stream or manager of ``kind`` (see :func:`returned_stream`)."""
    if kind == "sync":
        return StreamProxy(result, recorder)
    if kind == "async":
        return AsyncStreamProxy(result, recorder)
    return ManagerProxy(result, recorder)
