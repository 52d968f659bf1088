"""Running one trial: the agent answers the case (a message, written turns, or a simulated user)
inside a root span, with a timeout, waiting out rate limits; the failure, if any, is typed.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import inspect
import numbers
import threading
import time
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.trace import Status, StatusCode

from agenteval_exporters.conventions import OWN_SCOPES, derived
from agenteval_instrumentation import attributes as A
from agenteval_instrumentation import capture, error_type, record_error
from agenteval_instrumentation.messages import reply_message, text_part
from agenteval_instrumentation.responses import chunk_text, reply_text
from agenteval_instrumentation.text import storable_text

from ..agents._loading import LoadedAgent, accepts_messages, is_async
from ..dataset._cases import Case
from ._collect import TrialCollector, TrialScope, TrialTag, current_trial, trial_context
from ._failures import RATE_LIMITED, TIMEOUT, Failure, classify, mark_raised_by_simulator, provider_error, retried
from ._forks import RunProcess
from ._loop import CANCEL_GRACE_SECONDS
from ._prices import Prices, cost
from ._workers import SyncWorkers

SIMULATED_USER = A.ROLE_SIMULATED_USER
MAX_BACKOFF = 30.0
LOOP_BLOCKED = (
    "the trial ran past its timeout while the event loop was blocked, so its timer could not fire: a blocking "
    "call (time.sleep, sync I/O) inside an async agent holds up every trial; await instead, or make the agent sync"
)
LEFT_RUNNING = (
    "the trial ran past its timeout and the agent was still running {grace:g} s after it was cancelled: it catches "
    "CancelledError without raising it again (a bare except, or except BaseException), or blocks the event loop; "
    "it was left running and the run went on without it"
)

PEP_479 = frozenset(
    {
        "coroutine raised StopIteration",
        "generator raised StopIteration",
        "async generator raised StopIteration",
        "async generator raised StopAsyncIteration",
    }
)
"""Python's messages for the RuntimeError a StopIteration (a subclass's too) becomes on leaving a coroutine or
generator, or a StopAsyncIteration on leaving an async generator."""

UserSimulator = Callable[[str, list[dict[str, str]]], "str | None | Awaitable[str | None]"]
"""``simulator(goal, messages)``: ``goal`` is the case's ``simulated_user`` text and ``messages`` the
conversation so far (``{"role": "user"|"assistant", "content": ...}``). It returns the user's next
message, or None (or "") to end the conversation. Sync or async."""


class StopNow(KeyboardInterrupt):
    """A second Ctrl-C or SIGTERM: the run stops at once. Any other KeyboardInterrupt raised inside
    an agent is that trial's failure."""


class GivenUp(Exception):
    """Raised in a trial's task when its agent ends after the trial was given up on (see
    :meth:`TrialRunner.give_up_overdue`): its result was recorded already."""


@dataclasses.dataclass(frozen=True)
class TrialPlan:
    """One attempt at one case to run."""

    case: Case
    attempt: int
    trial_id: str
    supersedes: str | None = None


@dataclasses.dataclass
class TrialResult:
    """A finished trial, with its spans, before scoring."""

    plan: TrialPlan
    trace_id: str | None
    started_ns: int
    ended_ns: int
    replies: list[str]
    failure: Failure | None
    rate_limit_retries: int
    spans: list[ReadableSpan]
    # The agent's usage in the try that counts (the last, whose answer is judged), and in every try,
    # rate-limited tries that were retried included.
    input_tokens: int = 0
    output_tokens: int = 0
    cost_usd: float | None = None
    input_tokens_all_tries: int = 0
    output_tokens_all_tries: int = 0
    cost_usd_all_tries: float | None = None
    cache_hits: int = 0
    """Model calls answered from the response cache (``--cache``), the judge's and simulator's included."""


@dataclasses.dataclass
class _Running:
    """A trial in progress: what a result needs if its agent has to be left behind."""

    plan: TrialPlan
    task: asyncio.Task[Any] | None
    started_ns: int
    overdue_at: float
    scope: TrialScope | None = None
    """The trial's context value, ended with the trial."""
    root: Any = None
    trace_id: str | None = None
    replies: list[str] = dataclasses.field(default_factory=list)
    retries: int = 0
    cut_off_in_simulator: bool = False
    """The trial's time ran out (or the run stopped it) while the simulated user was writing its message."""


class TrialRunner:
    """Runs trials of one agent in one experiment."""

    def __init__(
        self,
        agent: LoadedAgent,
        experiment_id: str,
        collector: TrialCollector,
        *,
        timeout: float,
        prices: Prices,
        user_simulator: UserSimulator | None = None,
        on_rate_limit: Callable[[int], None] = lambda change: None,
    ) -> None:
        self.agent = agent
        self.experiment_id = experiment_id
        self.collector = collector
        self.timeout = timeout
        self.prices = prices
        self.user_simulator = user_simulator
        self.on_rate_limit = on_rate_limit
        self.tracer = trace.get_tracer(A.RUNNER_SCOPE)
        self._with_messages = accepts_messages(agent.fn)
        self._async = is_async(agent.fn)
        self._workers = None if self._async else SyncWorkers()
        self.grace = min(CANCEL_GRACE_SECONDS, timeout)
        """How long an agent cancelled at its timeout may take to end before its trial is given up on."""
        self._running: dict[str, _Running] = {}
        self._process = RunProcess()
        """The run's process: the agent's code coming back in any other (a fork's child) ends it (see _forks)."""
        self.cancelling_trials = False
        """Set by whoever cancels the trials' tasks (a stop, the end of the run): a cancellation then goes on,
        where any other is the agent's failure."""

    def close(self) -> None:
        """Let the sync agent's worker threads end (a hung call's worker ends when the call returns)."""
        if self._workers is not None:
            self._workers.close()

    def end_if_forked(self) -> None:
        """End this process at once if it is not the run's: a child an agent forked, whose event loop went on."""
        self._process.end_if_forked()

    async def run(self, plan: TrialPlan) -> TrialResult:
        self.end_if_forked()  # never a trial started by an agent's child
        tag = TrialTag(self.experiment_id, plan.case.id, plan.trial_id, plan.attempt)
        token = trial_context(tag)
        deadline = time.monotonic() + self.timeout
        running = _Running(plan, asyncio.current_task(), time.time_ns(), deadline + self.grace, current_trial.get())
        self._running[plan.trial_id] = running
        exc: BaseException | None
        timed_out: bool | str
        exc, timed_out = None, False
        try:
            while True:
                root = self.tracer.start_span(f"invoke_agent {self.agent.name}", attributes=self._root_attributes(plan))
                running.root, running.trace_id = root, format(root.get_span_context().trace_id, "032x")
                users: list[str] = []
                running.replies = []
                exc, timed_out = await self._attempt(plan.case, root, deadline, users, running.replies)
                if self._running.get(plan.trial_id) is not running:  # given up on meanwhile: its result is out
                    raise GivenUp(plan.trial_id)
                # The user's side is new information only when a simulator wrote it: a case's own input and
                # turns are in its snapshot already (and encoding them on every trial's root costs the harness).
                self._end_root(root, users if plan.case.simulated_user else [], running.replies, exc, timed_out)
                found = provider_error(exc) if exc is not None else None
                # A rate limit the model layer already waited out as far as it may is not retried again here.
                if found is None or found.type != RATE_LIMITED or (exc is not None and retried(exc)):
                    break
                running.retries += 1
                backoff = min(2 ** (running.retries - 1), MAX_BACKOFF)
                wait = min(found.retry_after or backoff, deadline - time.monotonic())
                if wait <= 0:
                    timed_out = True
                    break
                self.on_rate_limit(+1)
                try:
                    await asyncio.sleep(wait)
                finally:
                    self.on_rate_limit(-1)
        finally:
            current_trial.reset(token)
            if self._running.get(plan.trial_id) is running:
                del self._running[plan.trial_id]
        return self._finished(running, exc, timed_out)

    def give_up_overdue(self, now: float) -> list[tuple[TrialResult, asyncio.Task[Any] | None]]:
        """The trials whose agent is still running :attr:`grace` seconds past their timeout, cancelled and not
        ending (it swallows its cancellation): each one's result, a timeout, and the task still running it, for the
        caller to leave behind. Whatever that agent does later changes nothing recorded."""
        overdue = [running for running in self._running.values() if running.overdue_at <= now]
        message = LEFT_RUNNING.format(grace=self.grace)
        for running in overdue:
            del self._running[running.plan.trial_id]
            if running.root is not None:
                self._end_root(running.root, [], running.replies, None, message)
        return [(self._finished(running, None, message), running.task) for running in overdue]

    def _finished(self, running: _Running, exc: BaseException | None, timed_out: bool | str) -> TrialResult:
        """The result of a trial that is over (or given up on), with the spans gathered for it."""
        if running.scope is not None:
            running.scope.ended = True  # what its threads start from now on is no trial's
        spans = self.collector.take(self.experiment_id, running.plan.trial_id)
        return self._result(running, exc, timed_out, spans)

    def _root_attributes(self, plan: TrialPlan) -> dict[str, Any]:
        attributes: dict[str, Any] = {
            A.GEN_AI_OPERATION_NAME: A.OPERATION_INVOKE_AGENT,
            A.GEN_AI_AGENT_NAME: self.agent.name,
        }
        if capture.config.enabled:
            turns = plan.case.turns or (plan.case.input,)
            messages = [{"role": "user", "parts": [text_part(t)]} for t in turns]
            attributes[A.GEN_AI_INPUT_MESSAGES] = capture.to_json(A.GEN_AI_INPUT_MESSAGES, messages)
        return attributes

    async def _attempt(
        self, case: Case, root: Any, deadline: float, users: list[str], replies: list[str]
    ) -> tuple[BaseException | None, bool | str]:
        """The exception raised, and whether the trial timed out (or why, as text); ``replies`` fills with the
        agent's replies, ``users`` with the user's messages, simulated ones included."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            return None, True
        with trace.use_span(root, end_on_exit=False, record_exception=False, set_status_on_exception=False):
            timer = asyncio.timeout(remaining)
            try:
                async with timer:
                    await self._converse(case, replies, users)
            except TimeoutError as error:
                if timer.expired():
                    return None, True
                return error, False
            except StopNow:
                raise
            except asyncio.CancelledError as error:
                # The run cancelling its trials (stopping, or its loop closing) goes on. Any other cancellation is the
                # agent's doing: a CancelledError it raised, or a cancel of its own task (which is the worker's, so
                # it is taken back): its failure like any other.
                task = asyncio.current_task()
                if task is None or self.cancelling_trials:
                    raise
                while task.cancelling():
                    task.uncancel()
                return error, False
            # The agent's failure is data here, not a crash: even sys.exit(), a KeyboardInterrupt, GeneratorExit
            # or its own BaseException subclass costs that trial only (a real second Ctrl-C arrives as StopNow).
            except BaseException as error:
                return _as_raised(error), False
        # An agent that swallowed its cancellation, or that held the event loop past the deadline (so the
        # timer could not fire), returned an answer; but a trial that ran past its timeout is a timeout.
        if timer.expired():
            return None, True
        if time.monotonic() > deadline:
            return None, LOOP_BLOCKED
        return None, False

    async def _converse(self, case: Case, replies: list[str], user_turns: list[str]) -> None:
        """The agent answers each user message in turn; ``replies`` and ``user_turns`` fill as it goes."""
        messages: list[dict[str, str]] = []
        user_turns.extend(case.turns if case.turns else [case.input])
        for text in list(user_turns):
            messages.append({"role": "user", "content": text})
            replies.append(await self._ask(messages))
            messages.append({"role": "assistant", "content": replies[-1]})
        if case.simulated_user and self.user_simulator is not None:
            while len(user_turns) < case.max_turns:
                following = await self._simulate(case.simulated_user, messages)
                if not following:
                    break
                user_turns.append(following)
                messages.append({"role": "user", "content": following})
                replies.append(await self._ask(messages))
                messages.append({"role": "assistant", "content": replies[-1]})

    async def _ask(self, messages: list[dict[str, str]]) -> str:
        args = (messages[-1]["content"],)
        kwargs = {"messages": [dict(m) for m in messages]} if self._with_messages else {}
        with self._process:
            if self._async:
                result = await self.agent.fn(*args, **kwargs)
            else:
                assert self._workers is not None
                given_up = threading.Event()
                try:
                    result = await self._workers.call(_drained, self._process, given_up, self.agent.fn, *args, **kwargs)
                finally:  # a timeout or a stop: the worker stops reading a stream it is still reading
                    given_up.set()
                # A sync callable wrapping an async agent (a lambda, a plain decorator) hands back its coroutine:
                # the answer is what that returns, as for the user simulator, never the coroutine's repr.
                if inspect.isawaitable(result):
                    result = await result
            if inspect.isasyncgen(result):  # an async generator streams its reply: its chunks' text, joined
                result = await _joined(result)
        return storable_text(_reply(result))

    async def _simulate(self, goal: str, messages: list[dict[str, str]]) -> str | None:
        current = current_trial.get()
        assert current is not None and self.user_simulator is not None
        # The simulator's spans are marked, so its calls never count as the agent's tokens or cost; its scope ends
        # with the trial's, so a worker it starts and keeps lends no later trial this one's ids.
        token = current_trial.set(current.side(dataclasses.replace(current.tag, role=SIMULATED_USER)))
        try:
            with (
                self.tracer.start_as_current_span("simulated_user", attributes={A.ROLE: SIMULATED_USER}),
                self._process,
            ):
                result = self.user_simulator(goal, [dict(m) for m in messages])
                if inspect.isawaitable(result):
                    result = await result
                if result is not None and not isinstance(result, str):  # would end the conversation unsaid
                    raise TypeError(
                        f"the user simulator returned {type(result).__name__}, not the next message (a str) or None"
                    )
        except Exception as exc:  # not a cancellation (the trial's timeout, a stop): those are BaseExceptions
            mark_raised_by_simulator(exc)
            raise
        except asyncio.CancelledError:
            running = self._running.get(current.tag.trial_id)
            if running is not None:
                running.cut_off_in_simulator = True
            raise
        finally:
            current_trial.reset(token)
        # A str subclass as the plain text it holds: its own methods are the simulator's code, not the harness's.
        return str.__str__(result).strip() if isinstance(result, str) else None

    def _end_root(
        self, root: Any, users: list[str], replies: list[str], exc: BaseException | None, timed_out: bool | str
    ) -> None:
        if capture.config.enabled and users:  # the conversation: every user message, simulated ones included
            asked = [{"role": "user", "parts": [{"type": "text", "content": u}]} for u in users]
            root.set_attribute(A.GEN_AI_INPUT_MESSAGES, capture.to_json(A.GEN_AI_INPUT_MESSAGES, asked))
        if capture.config.enabled and replies:
            messages = [reply_message(r) for r in replies]
            root.set_attribute(A.GEN_AI_OUTPUT_MESSAGES, capture.to_json(A.GEN_AI_OUTPUT_MESSAGES, messages))
        if exc is not None:
            record_error(root, exc)
        elif timed_out:
            root.set_attribute(A.ERROR_TYPE, "timeout")
            root.set_status(Status(StatusCode.ERROR, "the trial ran past its timeout"))
        root.end()

    def _result(
        self, running: _Running, exc: BaseException | None, timed_out: bool | str, spans: list[ReadableSpan]
    ) -> TrialResult:
        trace_id, replies, retries = running.trace_id, running.replies, running.retries
        final_try = [s for s in spans if trace_id and format(s.context.trace_id, "032x") == trace_id]
        last_finish_reason, waits = _model_calls(final_try)
        failure = classify(
            exc,
            raised_in=_raised_in(final_try, exc),
            timed_out=bool(timed_out),
            timed_out_in_simulator=running.cut_off_in_simulator,
            # Waits inside the agent's model calls count as the trial's own rate-limited retries do.
            rate_limit_retries=retries + waits,
            last_finish_reason=last_finish_reason,
            reply=replies[-1] if replies else None,
        )
        if isinstance(timed_out, str) and failure is not None and failure.type == TIMEOUT:
            failure = dataclasses.replace(failure, message=timed_out)
        ended = time.time_ns()
        result = TrialResult(running.plan, trace_id, running.started_ns, ended, replies, failure, retries, spans)
        self._add_usage(result)
        return result

    def _add_usage(self, result: TrialResult) -> None:
        """The agent's own tokens and cost, in the try that counts and over every try; the simulated
        user's and judge's are left out, and so is a model call that wraps another (counted once)."""
        for span in result.spans:
            attributes = genai_attributes(span)
            if attributes.get(A.GEN_AI_OPERATION_NAME) != A.OPERATION_CHAT:
                continue
            if attributes.get(A.CACHE_HIT) is True:
                result.cache_hits += 1
            if attributes.get(A.ROLE) or attributes.get(A.WRAPS_MODEL_CALL):
                continue
            tokens_in: int = attributes.get(A.GEN_AI_USAGE_INPUT_TOKENS) or 0
            tokens_out: int = attributes.get(A.GEN_AI_USAGE_OUTPUT_TOKENS) or 0
            model = attributes.get(A.GEN_AI_RESPONSE_MODEL) or attributes.get(A.GEN_AI_REQUEST_MODEL)
            spent = cost(self.prices, model, tokens_in, tokens_out)
            result.input_tokens_all_tries += tokens_in
            result.output_tokens_all_tries += tokens_out
            result.cost_usd_all_tries = _plus(result.cost_usd_all_tries, spent)
            if format(span.context.trace_id, "032x") == result.trace_id:
                result.input_tokens += tokens_in
                result.output_tokens += tokens_out
                result.cost_usd = _plus(result.cost_usd, spent)


def genai_attributes(span: ReadableSpan) -> Mapping[str, Any]:
    """A span's attributes as the store reads them: other instrumentations' names derived (see
    ``agenteval_exporters.conventions``). Any: they hold what the instrumentation wrote, read as written."""
    attributes: Mapping[str, Any] = span.attributes or {}
    scope = span.instrumentation_scope
    return attributes if scope is not None and scope.name in OWN_SCOPES else derived(attributes)


def _plus(total: float | None, spent: float | None) -> float | None:
    """A cost so far plus one call's; None while no call had a known price."""
    return total if spent is None else (total or 0.0) + spent


def _raised_in(spans: list[ReadableSpan], exc: BaseException | None) -> str | None:
    """The operation of the innermost span that recorded ``exc``'s type."""
    if exc is None:
        return None
    wanted = error_type(exc)
    raising = [
        s
        for s in spans
        if (s.attributes or {}).get(A.ERROR_TYPE) == wanted
        and not (s.attributes or {}).get(A.ROLE)
        and (s.instrumentation_scope is None or s.instrumentation_scope.name != A.RUNNER_SCOPE)
    ]
    if not raising:
        return None
    innermost = max(raising, key=lambda s: s.start_time or 0)
    attributes: Mapping[str, Any] = innermost.attributes or {}  # the operation name is a str where it is set
    return attributes.get(A.GEN_AI_OPERATION_NAME)


def _model_calls(spans: list[ReadableSpan]) -> tuple[str | None, int]:
    """The agent's last model call's first finish reason (a wrapper's and its request's agree), and the waits
    on rate limits inside its model calls (recorded as they happen, so a call the timeout cut off counts too);
    one pass over the spans, other instrumentations' names read as the store reads them."""
    last: Mapping[str, Any] | None = None
    last_end = -1
    waits = 0
    for span in spans:
        attributes = genai_attributes(span)
        if attributes.get(A.GEN_AI_OPERATION_NAME) != A.OPERATION_CHAT or attributes.get(A.ROLE):
            continue
        waits += attributes.get(A.RATE_LIMIT_WAITS) or 0
        if (span.end_time or 0) > last_end:
            last, last_end = attributes, span.end_time or 0
    reasons = last.get(A.GEN_AI_RESPONSE_FINISH_REASONS) if last is not None else None
    return (reasons[0] if reasons else None), waits


def _as_raised(error: BaseException) -> BaseException:
    """The exception the agent raised: a StopIteration (or StopAsyncIteration) that left a coroutine or generator
    comes out as Python's ``RuntimeError: coroutine raised StopIteration`` (PEP 479), whatever the agent's own type and
    message were; a sync agent's always does, the run's coroutines carrying its call. Its cause is the original."""
    cause = error.__cause__
    if type(error) is RuntimeError and isinstance(cause, (StopIteration, StopAsyncIteration)) and str(error) in PEP_479:
        return cause
    return error


def _reply(result: Any) -> str:
    """The text of what the agent returned, never a Python repr that a scorer could find the answer in: a string; a
    dict's or object's ``content`` (a string, or the text parts of a list, as :func:`reply_text` reads it; bytes as
    UTF-8); nothing (``""``, so ``empty_output``) for None or a ``content`` of None, as an SDK message that only calls
    tools has; a number, or an object with a text form of its own (its ``__str__``), as ``str()``. Anything else (a
    dict without a ``content``, a list, an object whose only text is its repr, a pydantic model without a ``content``,
    whose ``str`` lists its fields) raises TypeError: that trial's ``agent_error``. A ``str`` subclass comes back as
    the plain ``str`` it holds, so the harness never calls the agent's own methods on it."""
    text = reply_text(result)
    if text is None:
        content = result.get("content", result) if isinstance(result, dict) else getattr(result, "content", result)
        if content is None:
            return ""
        if isinstance(content, (bytes, bytearray)):
            return bytes(content).decode("utf-8", "replace")
        if _only_text_is_repr(content):
            raise TypeError(
                f"{_returned(result, content)}, not its reply's text: return a str, or a dict or object with a "
                f"content string{_factory_hint(content)}"
            )
        text = str(content)
    return str.__str__(text)


# pydantic's own __str__ methods (v2's BaseModel, v1's and pydantic.v1's Representation): a listing of the model's
# fields (answer='4'), a repr by another name. Known by where they are defined, so pydantic is never imported here.
_PYDANTIC_FIELD_LISTINGS = frozenset(
    {
        ("pydantic.main", "BaseModel.__str__"),
        ("pydantic.utils", "Representation.__str__"),
        ("pydantic.v1.utils", "Representation.__str__"),
    }
)


def _only_text_is_repr(value: object) -> bool:
    """Whether ``str(value)`` would be its Python repr (a container's, a dataclass's, a plain object's) or a pydantic
    model's field listing; a number's ``str`` is its text, though numbers share ``object.__str__`` too."""
    text_form = type(value).__str__
    if text_form is object.__str__:
        return not isinstance(value, numbers.Number)
    defined_at = (getattr(text_form, "__module__", None), getattr(text_form, "__qualname__", None))
    return defined_at in _PYDANTIC_FIELD_LISTINGS


def _factory_hint(content: object) -> str:
    """For a reply that is itself a function: the likely cause. A factory of agents whose options all have defaults,
    named with no ``--agent-option``, is taken as the agent itself (the factory rule), and every trial returned the
    agent it built."""
    if not callable(content) or inspect.isclass(content):
        return ""
    return (
        ". If what was named as the agent builds it, it was called as the agent: named without --agent-option, "
        "a function is the agent itself, so give an --agent-option (or name a class, which is instantiated)"
    )


def _returned(result: object, content: object) -> str:
    """What the agent returned, for the message of a reply that has no text."""
    returned = f"the agent returned a {type(result).__name__}"
    return returned if content is result else f"{returned} whose content is a {type(content).__name__}"


def _drained(run: RunProcess, given_up: threading.Event, fn: Callable[..., Any], /, *args: Any, **kwargs: Any) -> Any:
    """``fn(*args, **kwargs)``, on a sync agent's worker; a generator it returns (a reply streamed in chunks:
    text, or an SDK's deltas) is read to its end there, and the reply is its chunks' text joined, never the
    generator's repr. A fork's child coming back out of it ends there, the only thread it has (see _forks).

    Reading stops, and the generator is closed, once the trial gave up on the call (``given_up``): an endless
    stream read on would grow the run's memory for as long as the run lasts."""
    with run:
        try:
            result = fn(*args, **kwargs)
        except Exception as exc:
            _read_its_text_here(exc)
            raise
        if not inspect.isgenerator(result):
            return result
        parts = []
        with contextlib.closing(result):
            for chunk in result:
                if given_up.is_set():
                    return None  # discarded: the trial has its outcome already
                parts.append(chunk_text(chunk) or "")
        return "".join(parts)


def _read_its_text_here(exc: BaseException) -> None:
    """Read ``exc``'s text (and its causes') once on the agent's worker, before it reaches the event loop, where the
    trial's error is recorded: an exception whose ``__str__`` never returns froze the whole run there, Ctrl-C
    included. Here it holds up only this worker, which the trial's timeout gives up on. What the text raises is
    left to the recording, which says so."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen and len(seen) < 16:  # a chain may loop
        seen.add(id(current))
        for describe in (str, repr):
            with contextlib.suppress(Exception):
                describe(current)
        current = current.__cause__ or current.__context__


YIELD_EVERY_CHUNKS = 256
"""An async stream is read giving the event loop a turn this often, so a stream that never awaits still lets its
trial's timeout (and the rest of the run) through."""


async def _joined(stream: Any) -> str:
    """The text of an async generator's chunks, joined; its trial's timeout cancels the reading even when the
    generator itself never awaits (as it cancels an agent that awaits)."""
    parts = []
    async for chunk in stream:
        parts.append(chunk_text(chunk) or "")
        if len(parts) % YIELD_EVERY_CHUNKS == 0:
            await asyncio.sleep(0)
    return "".join(parts)
