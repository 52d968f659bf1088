"""What a scorer is: a name, a version, the case fields it needs, and either a per-trial Python function
or a SQL expression evaluated over a whole batch of trials at once."""

from __future__ import annotations

import asyncio
import dataclasses
import inspect
import math
from collections.abc import Awaitable, Callable
from typing import Any

from agenteval_instrumentation import capture
from agenteval_instrumentation.text import ERROR_CHARS, storable_text

from ..dataset._cases import FIELDS, Case, gives
from ._features import TrialFeatures

Outcome = tuple[float | None, bool | None, str, str | None]
"""A judgement without its scorer: ``(value, passed, reason, error)``."""

FAILED_REASON = "the scorer raised an error"

PASSED_ON = (KeyboardInterrupt, asyncio.CancelledError)
"""What a scorer raises that is not its own failure: a Ctrl-C (in a rescore no handler turns it into a stop) and the
run cancelling its work. Anything else it raises, even ``sys.exit()``, a ``GeneratorExit`` or a library's own
``BaseException`` subclass, is that score's error: a scorer's code is not ours, and one trial's odd case must not
end the run (as an agent's is its trial's failure, :meth:`agenteval.run._trial.TrialRunner._attempt`)."""


@dataclasses.dataclass(frozen=True)
class Score:
    """One scorer's judgement of one trial: a value in 0..1, passed or not (None for a continuous score),
    a short reason; or an error message when the scorer raised."""

    scorer: str
    version: str
    value: float | None
    passed: bool | None
    reason: str
    error: str | None = None
    continuous: bool = False


@dataclasses.dataclass(frozen=True)
class Scorer:
    """A scorer, one of four kinds. ``fn(case, features)``: per-trial Python. ``sql``: an expression
    over ``f`` (the features: ``replies``, ``tool_calls``, ``model_calls``, ``retrieved_ids``, ...)
    and ``c`` (the case: ``expected_output``, ``expected_tools``, ``must_not_contain``, ...) giving
    ``struct_pack(value := ..., passed := ..., reason := ...)``, run once for a whole batch.
    ``arrow(features, cases)``: a whole-batch computation over Arrow tables (see :func:`batch_scorer`).
    ``coroutine(case, features)``: per-trial async Python for scorers that wait on something slow (a model:
    the LLM judge); a batch's trials are judged concurrently, ``concurrency`` at a time, without blocking the
    run's event loop, and their spans are marked with ``role``."""

    name: str
    version: str = "1"
    requires: tuple[str, ...] = ()
    """Case fields the case must give for it to apply (``expected_output`` non-empty, lists given; see
    :func:`agenteval.dataset._cases.gives`)."""
    continuous: bool = False
    """Reported beside the pass rate, never folded into whether a trial passed."""
    fn: Callable[[Case, TrialFeatures], Any] | None = None
    sql: str | None = None
    arrow: Callable[[Any, Any], Any] | None = None
    coroutine: Callable[[Case, TrialFeatures], Awaitable[Any]] | None = None
    concurrency: int = 8
    """For a ``coroutine`` scorer: trials judged at once."""
    role: str = "judge"
    """For a ``coroutine`` scorer: the role its spans are marked with (so its model calls are not the agent's)."""
    close: Callable[[], Awaitable[None]] | None = None
    """For a ``coroutine`` scorer: awaited on the event loop it ran on, once it is done there (closing clients)."""
    when: Callable[[Case], bool] | None = None
    """A further condition on the case, beyond ``requires``."""
    needs_content: bool = True
    """Reads message content (replies, tool arguments or results). Such a scorer is not re-run over trials
    stored without content (capture switched off); their earlier scores stand. Tool names, counts, tokens
    and document ids are not content."""

    def __post_init__(self) -> None:
        if [self.fn, self.sql, self.arrow, self.coroutine].count(None) != 3:
            raise ValueError(f"scorer {self.name!r} needs exactly one of fn, sql, arrow or coroutine")
        # Any field a case may give: a scorer of one's own may read a rubric, a category or metadata.
        unknown = set(self.requires) - set(FIELDS)
        if unknown:
            raise ValueError(
                f"scorer {self.name!r} requires unknown case fields: {', '.join(sorted(unknown))} "
                f"(a case's fields: {', '.join(FIELDS)})"
            )

    def applies(self, case: Case) -> bool:
        return all(gives(case, f) for f in self.requires) and (self.when is None or self.when(case))

    def result(self, returned: Any) -> Score:
        """A Score from what a scorer returned: a Score, a bool, a number in 0..1, or (value, reason)."""
        return self._score(self.outcome(returned))

    def error(self, message: str) -> Score:
        """The score recorded when the scorer failed: never a silent NaN, and never a pass."""
        return self._score(self.failure(message))

    def outcome(self, returned: Any) -> Outcome:
        """What a scorer returned, as ``(value, passed, reason, error)``: the one place the
        return conventions are read (``result`` and the engine's columns both go through it)."""
        if type(returned) is tuple and len(returned) == 2 and type(returned[0]) is bool:  # the common case
            passed, reason = returned
            # A short ASCII str is stored as it is: the common case skips the call (rescoring makes 100,000s).
            text = reason if _plain_text(reason) else _reason(reason)
            return float(passed), None if self.continuous else passed, text, None
        reason = ""
        if isinstance(returned, Score):
            if returned.error is not None:
                return None, None, _reason(returned.reason), storable_text(returned.error[:ERROR_CHARS])
            value, passed, reason = returned.value, returned.passed, returned.reason
        elif isinstance(returned, dict):
            value, passed, reason = returned.get("value"), returned.get("passed"), returned.get("reason") or ""
        else:
            if isinstance(returned, tuple):
                returned, reason = returned
            value, passed = returned, None
        value, passed = _plain(value), _plain(passed)
        if isinstance(value, bool):
            passed, value = value if passed is None else passed, float(value)
        if not isinstance(value, (int, float)) or isinstance(value, bool) or math.isnan(value) or not 0 <= value <= 1:
            return self.failure(f"returned {value!r}, not a number between 0 and 1")
        if passed is not None and not isinstance(passed, bool):
            return self.failure(f"returned passed={passed!r}, not true, false or None")
        if not self.continuous and passed is None:
            passed = value >= 1.0
        text = reason if _plain_text(reason) else _reason(reason)
        return float(value), None if self.continuous else passed, text, None

    def applicability(self, case: Case) -> bool | str:
        """Whether the scorer applies to ``case``; a ``when=`` that raises gives its error as text, and
        the scorer then applies with an error score (the case is not silently left unjudged)."""
        try:
            return bool(self.applies(case))
        except PASSED_ON:
            raise
        except BaseException as exc:
            return f"its when= condition raised {capture.error_text(exc)}"

    @staticmethod
    def failure(message: str) -> Outcome:
        return None, None, FAILED_REASON, storable_text(message[:ERROR_CHARS])

    def _score(self, outcome: Outcome) -> Score:
        value, passed, reason, error = outcome
        return Score(self.name, self.version, value, passed, reason, error, self.continuous)


def _plain(value: Any) -> Any:
    """A NumPy scalar (or 0-d array, or any array-like scalar with ``dtype``, ``shape`` ``()`` and ``item()``) as the
    Python bool or number it holds: a similarity computed with NumPy is an ``np.float32``, and ``similarity > 0.8``
    an ``np.bool_``, which a batch scorer's NumPy array is taken as. Anything else as it is."""
    if type(value) in (bool, float, int) or value is None:
        return value
    if getattr(value, "dtype", None) is not None and getattr(value, "shape", None) == ():
        try:
            return value.item()
        except Exception:  # not NumPy's item(): the value stays as it is, and the usual checks judge it
            return value
    return value


def reason_chars() -> int:
    """Longest reason stored, the rest cut with a marker saying how much was left out: the capture limit for a string
    (``configure_capture(max_string=...)``), as an argument's text is cut. A reason is stored on every trial it
    judges, so a scorer that returned a whole document each time would make a rescore's scores as large."""
    return capture.config.max_string


def _plain_text(reason: Any) -> bool:
    """Whether ``reason`` is stored as it is: a str of ASCII (so storable) within :func:`reason_chars`."""
    return type(reason) is str and reason.isascii() and len(reason) <= reason_chars()


def _reason(reason: Any) -> str:
    """A scorer's reason as storable text, cut at :func:`reason_chars` (a reason whose ``str`` raises is not the
    trial's fault)."""
    if type(reason) is not str:
        try:
            reason = str(reason)
        except PASSED_ON:
            raise
        except BaseException as exc:
            reason = f"<the reason could not be read: {capture.error_text(exc)}>"
    return capture.capped(reason)


def scorer(
    fn: Callable[[Case, TrialFeatures], Any] | None = None,
    *,
    name: str | None = None,
    version: str = "1",
    requires: tuple[str, ...] = (),
    continuous: bool = False,
    when: Callable[[Case], bool] | None = None,
    needs_content: bool = True,
) -> Any:
    """Make a per-trial Python scorer from ``fn(case, features)``. It may return a bool, a number in 0..1,
    ``(value, reason)``, a dict with ``value``/``passed``/``reason``, or a :class:`Score`. An ``async def``
    makes a coroutine scorer: a batch's trials are then judged concurrently.

    Bump ``version`` when its logic changes, so stored scores say which logic judged them.
    """
    options = {
        "version": version,
        "requires": tuple(requires),
        "continuous": continuous,
        "when": when,
        "needs_content": needs_content,
    }
    return _decorate("fn", fn, name, options)


def batch_scorer(fn: Callable[[Any, Any], Any] | None = None, *, name: str | None = None, **options: Any) -> Any:
    """Make a vectorised scorer from ``fn(features, cases)``, called once per batch with two
    ``pyarrow.Table`` objects of the same length: the feature rows of the trials it applies to, and
    row for row their cases' fields. It returns one result per row: an array of values (numbers in
    0..1 or bools), or a table or struct array with ``value`` and optionally ``passed`` and
    ``reason``. The rules are the per-trial ones: a value outside 0..1 is an error score, and a
    raise makes every trial of the batch an error score. Options as for :func:`scorer`.
    """
    if "requires" in options:
        options["requires"] = tuple(options["requires"])
    return _decorate("arrow", fn, name, options)


def _decorate(kind: str, fn: Callable[..., Any] | None, name: str | None, options: dict[str, Any]) -> Any:
    def make(f: Callable[..., Any]) -> Scorer:
        body: dict[str, Any] = {"coroutine" if kind == "fn" and inspect.iscoroutinefunction(f) else kind: f}
        return Scorer(name or f.__name__, **options, **body)

    return make(fn) if fn is not None else make
