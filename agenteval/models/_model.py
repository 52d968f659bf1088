"""A model to call: ``Model("openai/gpt-4o-mini")``. Each call is one ``@llm_call`` span, given the SDK's own
response object (so the instrumentation reads model, usage and finish reasons from it), with the waits on rate
limits, the retries and a cache hit recorded on it as they happen.

Calls are async (the runner is asyncio). A model keeps one SDK client per event loop, since an SDK's async HTTP
client belongs to the loop it first ran on.
"""

from __future__ import annotations

import asyncio
import dataclasses
import importlib
import json
import os
import random
import weakref
from pathlib import Path
from types import ModuleType
from typing import Any

from opentelemetry import trace

from agenteval_instrumentation import attributes as A
from agenteval_instrumentation import llm_call, set_llm_response
from agenteval_instrumentation.masking import masked_logger

from ..errors import AgentevalError
from ..run._failures import (
    RATE_LIMITED,
    RETRIED,
    RequestTimedOut,
    StreamEndedEarly,
    UnreadableResponse,
    provider_error,
)
from ..run._options import DEFAULT_MAX_RETRIES, DEFAULT_REQUEST_TIMEOUT, check_request_limits
from . import _anthropic, _openai
from ._cache import ResponseCache
from ._limiter import Limiter, limiter_for, waiting
from ._names import ModelName, effective_base_url, parse_model_name, recordable_url, without_query
from ._request import Message, ModelRequest
from ._retry import Retry, RetryPolicy
from ._types import LIMITER, RATE_LIMIT, ModelResponse, Wait

TIMEOUT_OPTION = "--request-timeout (Model(timeout=...))"
"""What a timed-out request's error names as the setting that would let it take longer."""
NO_KEY_NEEDED = "unused"
"""The key sent to a local OpenAI-compatible server when none is set: such servers ignore it, the SDK wants one."""
HTTP_CLIENT_LOGGERS = ("httpx", "httpx2")
"""The providers' SDKs' HTTP clients (httpx2 is the one the current SDKs bundle): they log each request's URL at
INFO, a base URL's ``user:password@`` and ``?api-key=`` with it; their records are masked once this is imported."""
for _name in HTTP_CLIENT_LOGGERS:
    masked_logger(_name)

MIN_MASKED_KEY = 8
"""Keys shorter than this are not looked for in errors: masking every short word of a message hides nothing."""
MASK = "***"
LIMITER_WAIT_RECORDED = 0.001
"""Waits for a place under the limiter shorter than this are not waits worth a span event."""

ADAPTERS: dict[str, ModuleType] = {"openai": _openai, "anthropic": _anthropic}


class MissingSDK(AgentevalError):
    """A provider's SDK is not installed; the message names the extra that installs it."""


class MissingAPIKey(AgentevalError):
    """No API key for a provider's own endpoint; the message names the environment variable."""


def _sdk(name: ModelName) -> ModuleType:
    try:
        return importlib.import_module(name.sdk.name)
    except ImportError as exc:
        raise MissingSDK(f"{name} needs the {name.sdk.name} SDK: pip install 'agenteval[{name.sdk.extra}]'") from exc


@dataclasses.dataclass
class _Call:
    """What one call collects while it runs (the span gets it as it happens; the response at the end)."""

    waits: list[Wait] = dataclasses.field(default_factory=list)
    retries: int = 0
    cache_hit: bool = False
    read: dict[str, Any] = dataclasses.field(default_factory=dict)
    """The answer as the adapter read it (text, tool calls, finish reason, usage), read once."""


class Model:
    """A model named ``PROVIDER/MODEL``, called through its provider's official SDK.

    ``base_url`` points at any OpenAI-compatible server (or a gateway); without it the SDK's environment
    variable (``OPENAI_BASE_URL``, ``ANTHROPIC_BASE_URL``) or the provider's own endpoint is used. The API key
    is ``api_key`` or the SDK's variable (``OPENAI_API_KEY``, ``ANTHROPIC_API_KEY``); it is never recorded.
    ``temperature``, ``max_tokens`` and further ``params`` go with every request unless a call overrides them.
    ``cache`` (a folder or a :class:`ResponseCache`) answers repeated requests from disk; ``role`` marks the
    calls' spans (``judge``, ``simulated_user``) when it is not the agent calling.
    """

    def __init__(
        self,
        name: str | ModelName,
        *,
        base_url: str | None = None,
        api_key: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        timeout: float = DEFAULT_REQUEST_TIMEOUT,
        retry: RetryPolicy | None = None,
        stream: bool = False,
        cache: ResponseCache | str | os.PathLike[str] | None = None,
        limiter: Limiter | None = None,
        params: dict[str, Any] | None = None,
    ) -> None:
        self.name = name if isinstance(name, ModelName) else parse_model_name(name)
        self._sdk = _sdk(self.name)
        self.adapter = ADAPTERS[self.name.provider]
        self.base_url = effective_base_url(self.name, base_url)
        self.recorded_base_url = recordable_url(self.base_url)
        """The base URL as :meth:`settings` records it: :func:`recordable_url`'s, or a resumed run's older form of
        it (``agenteval.models._names.as_stored``), so the agent's version is hashed as the run hashed it."""
        self._api_key = self._key(api_key)
        self.temperature = temperature
        self.max_tokens = max_tokens
        self.timeout = timeout
        self.retry = retry or RetryPolicy()
        self.stream = stream
        self.cache = cache if isinstance(cache, ResponseCache) or cache is None else ResponseCache(Path(cache))
        self.params = dict(params or {})
        self.limiter = limiter or limiter_for(f"{self.name.provider}|{recordable_url(self.base_url)}|{self.name.model}")
        self._clients: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, Any] = weakref.WeakKeyDictionary()
        self._rng = random.Random()

    def _key(self, given: str | None) -> str:
        key = given or os.environ.get(self.name.sdk.api_key_env)
        if key:
            return key
        if self.base_url:
            return NO_KEY_NEEDED
        raise MissingAPIKey(
            f"{self.name} needs an API key: set {self.name.sdk.api_key_env} "
            "(or give --base-url for a local OpenAI-compatible server)"
        )

    def __repr__(self) -> str:  # never the key
        return f"Model({str(self.name)!r}, base_url={recordable_url(self.base_url)!r})"

    def settings(self) -> dict[str, Any]:
        """What identifies this model's answers, as recorded with an experiment: never the API key."""
        return {
            "model": str(self.name),
            "base_url": self.recorded_base_url,
            "temperature": self.temperature,
            "max_tokens": self.max_tokens,
            "params": self.params,
        }

    def _client(self) -> Any:
        loop = asyncio.get_running_loop()
        found = self._clients.get(loop)
        if found is None:
            base_url, query = without_query(self.base_url)  # the query goes with each request (Azure's api-version)
            found = self._clients[loop] = self.adapter.client(self._sdk, base_url, query, self._api_key, self.timeout)
        return found

    async def aclose(self) -> None:
        """Close this event loop's SDK client (its connections)."""
        found = self._clients.pop(asyncio.get_running_loop(), None)
        if found is not None:
            await found.close()

    async def complete(
        self,
        messages: list[Message],
        *,
        tools: list[dict[str, Any]] | None = None,
        tool_choice: str | None = None,
        temperature: float | None = None,
        max_tokens: int | None = None,
        **params: Any,
    ) -> ModelResponse:
        """One model call (retried as :class:`RetryPolicy` says), as a :class:`ModelResponse`."""
        request = ModelRequest(
            model=self.name.model,
            messages=messages,
            tools=tools or None,
            tool_choice=tool_choice,
            temperature=self.temperature if temperature is None else temperature,
            max_tokens=self.max_tokens if max_tokens is None else max_tokens,
            stream=self.stream,
            params={**self.params, **params},
        )
        call = _Call()
        raw = await _chat(messages, model=self.name.model, owner=self, request=request, call=call)
        return ModelResponse(
            **call.read, cache_hit=call.cache_hit, waits=tuple(call.waits), retries=call.retries, raw=raw
        )

    async def _send(self, request: ModelRequest, call: _Call) -> Any:
        """The request, retried; the SDK's response. Runs inside the call's span."""
        span = trace.get_current_span()
        span.set_attribute(A.GEN_AI_PROVIDER_NAME, self.name.provider)
        cached = self._cached(request)
        if cached is not None:
            call.cache_hit = True
            span.set_attribute(A.CACHE_HIT, True)
            set_llm_response(input_tokens=0, output_tokens=0)  # nothing was spent
            raw, call.read = cached
            return raw
        while True:
            sent = await self._attempt(request, call, span)
            if not isinstance(sent, Retry):
                raw = sent
                break
            call.retries += 1
            span.set_attribute(A.MODEL_RETRIES, call.retries)
            _record_wait(span, call, Wait(sent.seconds, sent.reason, sent.status, sent.retry_after))
            waiting(+1)
            try:
                await asyncio.sleep(sent.seconds)
            finally:
                waiting(-1)
        if self.cache is not None:
            self.cache.put(cached_key(self, request), {"provider": self.name.provider, "response": _dump(raw)})
        return raw

    async def _attempt(self, request: ModelRequest, call: _Call, span: Any) -> Any:
        """One request under the limiter: the SDK's response, or the :class:`Retry` to wait before the next;
        raises what is not retried (marked when retries were spent on it)."""
        generation, queued = await self.limiter.acquire()
        if queued >= LIMITER_WAIT_RECORDED:
            _record_wait(span, call, Wait(queued, LIMITER))
        outcome = "other"
        try:
            raw = await self._sent(request)
            read = self._read(raw)
            if read is None:
                if request.stream:
                    raise StreamEndedEarly(f"{self.name}: the reply ended before the model finished it")
                raise UnreadableResponse(
                    f"{self.name}: the answer holds no finished reply (no choices or no stop reason)"
                )
            outcome = "ok"
            call.read = read
            return raw
        except Exception as exc:
            _mask_key(exc, self._api_key)
            found = provider_error(exc)
            if found is not None and found.type == RATE_LIMITED:
                outcome = "throttled"
            retry = self.retry.decide(exc, call.retries, self._rng)
            if retry is None:
                if call.retries:
                    setattr(exc, RETRIED, True)
                raise
            return retry
        finally:
            self.limiter.release(generation, outcome)

    def _read(self, raw: Any) -> dict[str, Any] | None:
        """``raw`` as the adapter reads it, or None when it holds no finished reply; raises
        :class:`UnreadableResponse` when its parts are of another shape than the API's (a broken gateway's
        ``choices: ["4"]`` or ``usage: "lots"``), so that it is retried and typed as the provider's failure, not
        raised later from :meth:`complete` as the agent's own bug."""
        try:
            return self.adapter.read(raw) if self.adapter.finished(raw) else None
        except (AttributeError, TypeError, ValueError, IndexError, KeyError) as exc:
            raise UnreadableResponse(
                f"{self.name}: the answer is not of the API's shape ({type(exc).__name__}: {exc})"
            ) from exc

    async def _sent(self, request: ModelRequest) -> Any:
        """One request to the SDK. The SDK's timeout bounds each wait on the connection, so a body sent a few
        bytes at a time, or a stream of keep-alives (SSE comments the SDK reads and drops), would never time out
        there: an answer not streamed is bounded as a whole, a streamed one from each of its events to the next
        (and from the request to its first). A trial's timeout bounds a call too, but a judge's has none."""
        bound = asyncio.timeout(self.timeout)

        def heard() -> None:  # an event of the stream: its silence starts again
            bound.reschedule(asyncio.get_running_loop().time() + self.timeout)

        try:
            try:
                async with bound:
                    return await self.adapter.send(self._client(), request, heard)
            except TimeoutError as exc:
                if not bound.expired():
                    raise
                raise RequestTimedOut(self._timed_out(request)) from exc
        except json.JSONDecodeError as exc:
            raise UnreadableResponse(f"{self.name}: the provider's answer is not JSON ({exc})") from exc

    def _timed_out(self, request: ModelRequest) -> str:
        if request.stream:
            return (
                f"{self.name}: the stream sent no event for {self.timeout:g} s (nothing, or only keep-alives); "
                f"{TIMEOUT_OPTION} sets how long a streamed answer may be silent"
            )
        return f"{self.name}: no whole answer within {self.timeout:g} s; {TIMEOUT_OPTION} sets how long it may take"

    def _cached(self, request: ModelRequest) -> tuple[Any, dict[str, Any]] | None:
        """The cached SDK response and its reading, or None (a miss) when the cache holds no usable answer."""
        if self.cache is None:
            return None
        found = self._usable(self.cache.get(cached_key(self, request)))
        self.cache.counted(found is not None)
        return found

    def _usable(self, data: dict[str, Any] | None) -> tuple[Any, dict[str, Any]] | None:
        """A cached answer revived and read as a fresh one is (:meth:`_read`); None for one of another provider, of
        another SDK version's shape, or with no finished reply (an edited file): it is answered anew, never given
        as an empty reply no model made."""
        if data is None or data.get("provider") != self.name.provider:
            return None
        try:
            raw = self.adapter.revive(self._sdk, data["response"])
            read = self._read(raw)
        except Exception:
            return None
        return None if read is None else (raw, read)


def named_model(
    name: str,
    option: str,
    *,
    base_url: str | None = None,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    max_retries: int = DEFAULT_MAX_RETRIES,
    **settings: Any,
) -> Model:
    """The model ``PROVIDER/MODEL`` a command's ``option`` names (``--judge``: a bad name is said as that option's),
    each request given up after ``request_timeout`` seconds and a transient failure sent again at most
    ``max_retries`` times (``--request-timeout``, ``--max-retries``). ``settings``: :class:`Model`'s others."""
    check_request_limits(request_timeout, max_retries)
    retry = RetryPolicy(max_retries=max_retries)
    return Model(parse_model_name(name, option), base_url=base_url, timeout=request_timeout, retry=retry, **settings)


def _mask_key(exc: BaseException, key: str) -> None:
    """``exc`` and the exceptions chained to it with ``key`` masked in their messages and error bodies: a server
    or gateway that quotes the key it refused would otherwise have it recorded (span, trial, log) verbatim, as a
    key that does not look like one (a gateway's own) escapes the masking of secret-looking text."""
    if key == NO_KEY_NEEDED or len(key) < MIN_MASKED_KEY:
        return

    def masked(value: Any) -> Any:
        if isinstance(value, str):
            return value.replace(key, MASK)
        if isinstance(value, dict):
            return {k: masked(v) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(masked(v) for v in value)
        return value

    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        current.args = masked(current.args)
        for name in ("message", "body"):
            value = getattr(current, name, None)
            if isinstance(value, (str, dict, list)):
                try:
                    setattr(current, name, masked(value))
                except AttributeError:
                    pass
        current = current.__cause__ or current.__context__


def cached_key(model: Model, request: ModelRequest) -> str:
    assert model.cache is not None
    return model.cache.key(model.name.provider, recordable_url(model.base_url), request)


def _dump(raw: Any) -> dict[str, Any]:
    dumped: dict[str, Any] = raw.model_dump(mode="json")
    return dumped


def _record_wait(span: Any, call: _Call, wait: Wait) -> None:
    """On the span as it happens: a call the trial's timeout cuts off keeps what it waited."""
    call.waits.append(wait)
    span.add_event(
        A.MODEL_WAIT_EVENT,
        {
            A.WAIT_REASON: wait.reason,
            A.WAIT_SECONDS: wait.seconds,
            A.WAIT_RETRY_AFTER: wait.retry_after,
            **({A.HTTP_RESPONSE_STATUS_CODE: wait.status} if wait.status is not None else {}),
        },
    )
    rate_limited = [w for w in call.waits if w.reason in (RATE_LIMIT, LIMITER)]
    if wait.reason in (RATE_LIMIT, LIMITER):
        span.set_attribute(A.RATE_LIMIT_WAITS, len(rate_limited))
        span.set_attribute(A.RATE_LIMIT_WAIT_MS, sum(w.seconds for w in rate_limited) * 1000)


@llm_call
async def _chat(messages: list[Message], *, model: str, owner: Model, request: ModelRequest, call: _Call) -> Any:
    """One model call's span: the messages are its input, the SDK's response its output."""
    return await owner._send(request, call)
