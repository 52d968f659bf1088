"""Time windows over production traces: ``--since`` (a day, an instant or an age) and ``--older-than`` (an age)."""

from __future__ import annotations

import datetime
import re

from ..errors import UsageError

_UNITS = {"m": "minutes", "h": "hours", "d": "days", "w": "weeks"}
_AGE = re.compile(r"^\s*(\d+(?:\.\d+)?)\s*([mhdw])\s*$", re.ASCII)  # ASCII: \d is 0-9, not also ٣
AGE_HINT = "an age such as 30d, 12h, 90m or 2w"


def parse_age(text: str, option: str) -> datetime.timedelta:
    """``30d``, ``12h``, ``90m``, ``2w`` as a duration; a :class:`UsageError` naming ``option`` otherwise."""
    found = _AGE.match(text)
    if not found:
        raise UsageError(f"{option} {text!r}: give {AGE_HINT}")
    try:
        return datetime.timedelta(**{_UNITS[found.group(2)]: float(found.group(1))})
    except OverflowError:  # past a timedelta's 999,999,999 days
        raise UsageError(f"{option} {text!r}: longer than any date reaches; give {AGE_HINT}") from None


EPOCH = datetime.datetime(1970, 1, 1, tzinfo=datetime.UTC)
"""Where span times start: OpenTelemetry counts them in nanoseconds from it, so no span is older."""


def ago(age: datetime.timedelta, now: datetime.datetime | None = None) -> datetime.datetime:
    """The instant ``age`` before ``now`` (UTC), but never before :data:`EPOCH`: an age reaching past it
    (``--older-than 99999999d``) ended in a traceback, or in a time DuckDB's nanosecond timestamps cannot hold."""
    now = now or datetime.datetime.now(datetime.UTC)
    try:
        return max(now - age, EPOCH)
    except OverflowError:
        return EPOCH


def parse_since(text: str, option: str = "--since", now: datetime.datetime | None = None) -> datetime.datetime:
    """A start in UTC: an age back from now (``7d``), a day (``2026-12-01``, its UTC midnight) or an ISO 8601
    instant (``2026-12-01T09:30``, UTC unless it gives an offset)."""
    if _AGE.match(text):
        return ago(parse_age(text, option), now)
    try:
        when = datetime.datetime.fromisoformat(text.strip())
    except ValueError:
        raise UsageError(f"{option} {text!r}: give a day (2026-12-01), an ISO 8601 time or {AGE_HINT}") from None
    return when.replace(tzinfo=datetime.UTC) if when.tzinfo is None else when.astimezone(datetime.UTC)
