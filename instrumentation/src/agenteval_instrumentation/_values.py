"""Values an application hands the helpers (``set_llm_response``, ``set_retrieved_documents``,
``use_tool_call_id``), made recordable.

Whatever the application passes, a helper never raises into it: a value of the wrong kind costs that
value only. Text-like values are taken as text (a number as its ``str``, bytes decoded); a value with no text
(its ``str`` raises) is dropped. Counts that are
not whole numbers are dropped: a count read from text would be a guess.
"""

from __future__ import annotations

import itertools
import math
import numbers
from collections.abc import Iterable, Mapping
from typing import Any

from .text import storable_text

MAX_FINISH_REASONS = 100
"""Most finish reasons kept (a model call has one per choice); an endless iterator is not read to its end."""


def as_text(value: Any) -> str | None:
    """``value`` as text that can be stored (a number as its ``str``, bytes decoded), or None when it has none.
    Not cut: where it is recorded as an id, :func:`capture.capped` cuts it."""
    if value is None:
        return None
    if isinstance(value, (bytes, bytearray)):
        return bytes(value).decode("utf-8", "replace")
    try:
        text = value if isinstance(value, str) else str(value)
    except Exception:  # an object whose str raises has no text to record
        return None
    # A str subclass (numpy's str_, as an array of ids gives) as the plain str it holds: older OpenTelemetry APIs
    # (1.27, the oldest agenteval takes) drop an attribute whose sequence holds any other type, ids and all.
    return storable_text(str.__str__(text)) if isinstance(text, str) else None


def count(value: Any) -> int | None:
    """A token count: a whole number (not a bool), else None."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def finish_reasons(value: Any) -> list[str]:
    """Finish reasons as a list of text: a single value (text, a number, a mapping) is one reason, an iterable
    gives one per item; None and items with no text are left out."""
    if value is None:
        return []
    if isinstance(value, (str, bytes, bytearray, Mapping)) or not isinstance(value, Iterable):
        items: Iterable[Any] = [value]
    else:
        items = value
    try:
        kept = list(itertools.islice(items, MAX_FINISH_REASONS))
    except Exception:  # an iterator that raises: the reasons it gave before are not worth a partial list
        return []
    return [text for item in kept if (text := as_text(item)) is not None]


def listed(value: Any) -> list[Any]:
    """The items of a sequence or iterable; None gives none, a lone value (text, bytes, a number) is one item."""
    if value is None:
        return []
    if isinstance(value, (str, bytes, bytearray)) or not isinstance(value, Iterable):
        return [value]
    try:
        return list(value)
    except Exception:
        return []


def score(value: Any) -> float | None:
    """A document's score: a finite real number of any type (numpy's float32, which vector search gives and which
    is no ``float``, a ``Fraction``), else None; a bool (Python's or numpy's) is no score."""
    if isinstance(value, bool) or not isinstance(value, (int, float, numbers.Real)):
        return None
    try:
        number = float(value)
    except (OverflowError, TypeError, ValueError):  # an int past a float's range; a Real whose float() fails
        return None
    return number if math.isfinite(number) else None
