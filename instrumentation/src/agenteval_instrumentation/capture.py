"""What content the decorators record, and how it is turned into bounded JSON text.

Content capture is on by default because scorers read it. It is switched off for the whole
process by ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT=false`` (the GenAI conventions'
variable) or :func:`configure_capture`, and per decorator with ``capture=False``.

Captured values become JSON text that stays valid however it is cut: strings, lists and nesting
are capped *before* serialising, so a limit never leaves half a JSON document behind. Secrets are
masked on the way (:mod:`.masking` finds them). An exception's message and stack trace are content
too, recorded under the same switches by :func:`error_message`, :func:`error_text` and
:func:`error_stacktrace`.
"""

from __future__ import annotations

import array
import base64
import collections
import dataclasses
import datetime
import enum
import itertools
import json
import os
import traceback
from collections.abc import Callable, Mapping, MappingView
from types import EllipsisType
from typing import Any

from .masking import MASK, is_secret_key, is_secret_pair, mask_text, might_hold_secret
from .text import ERROR_CHARS, exception_message, storable_text

ENV_CAPTURE_CONTENT = "OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT"

Redactor = Callable[[str, Any], Any]
"""A redaction hook: called with the attribute name and the Python value about to be captured;
returns the value to record instead (or the same value)."""

PLACEHOLDER = "<unserializable>"
NOT_CAPTURED = "<message not captured>"
"""An exception's message where content capture is off and no redactor is set."""
EXCEPTION_MESSAGE = "exception.message"
EXCEPTION_STACKTRACE = "exception.stacktrace"

_SCALARS = (str, int, float, bool, type(None))

# One encoder for every call: json.dumps builds a new one per call for any non-default option, which
# cost more than encoding a call's few arguments. UTF-8 kept as it is (not \u-escaped): shorter text.
_to_text = json.JSONEncoder(ensure_ascii=False).encode


def _plain(value: Any, max_string: int) -> bool:
    """A scalar JSON takes as it is: not a NaN or infinity, not a string past the cap or one that
    may hold a secret."""
    kind = type(value)
    if kind is str:
        return len(value) <= max_string and not (config.mask_secrets and might_hold_secret(value))
    if kind is float:
        return value == value and value not in (float("inf"), float("-inf"))
    return kind in _SCALARS


def _env_enabled() -> bool:
    value = os.environ.get(ENV_CAPTURE_CONTENT)
    if value is None or value.strip() == "":
        return True
    return value.strip().lower() not in ("false", "0", "no", "off")


@dataclasses.dataclass
class CaptureConfig:
    """Process-wide capture settings; change them with :func:`configure_capture`."""

    enabled: bool = True
    max_string: int = 4_000
    """Longest string kept inside a captured value; longer ones are cut with a marker."""
    max_items: int = 100
    """Most list items or mapping entries kept; the rest are summarised by a marker."""
    max_depth: int = 8
    """Deepest nesting kept; deeper values become a marker string."""
    max_length: int = 32_000
    """Longest JSON text recorded for one attribute."""
    mask_secrets: bool = True
    redactor: Redactor | None = None


config = CaptureConfig(enabled=_env_enabled())


def configure_capture(
    *,
    enabled: bool | None = None,
    max_string: int | None = None,
    max_items: int | None = None,
    max_depth: int | None = None,
    max_length: int | None = None,
    mask_secrets: bool | None = None,
    redactor: Redactor | None | EllipsisType = ...,
) -> CaptureConfig:
    """Change the process-wide capture settings; arguments left out keep their value.

    ``enabled=None`` re-reads ``OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT``.
    ``redactor=None`` removes a hook set before.
    """
    config.enabled = _env_enabled() if enabled is None else enabled
    for name, value in (
        ("max_string", max_string),
        ("max_items", max_items),
        ("max_depth", max_depth),
        ("max_length", max_length),
        ("mask_secrets", mask_secrets),
    ):
        if value is not None:
            setattr(config, name, value)
    if redactor is not ...:
        config.redactor = redactor
    return config


def to_json(attribute: str, value: Any) -> str:
    """Bounded, redacted JSON text for ``value``; never raises (a failure gives a placeholder).
    Lone surrogates become U+FFFD, so the text can be stored and parsed as JSON anywhere."""
    return storable_text(_to_json(attribute, value))


def _to_json(attribute: str, value: Any) -> str:
    try:
        if config.redactor is not None:
            value = config.redactor(attribute, value)
        if type(value) in _SCALARS and _plain(value, config.max_string):  # a string, number, bool or None
            return _to_text(value)
        if (  # the common case, a call's few plain arguments: nothing to cap, mask or convert
            type(value) is dict
            and len(value) <= config.max_items
            and all(
                type(k) is str and not (config.mask_secrets and is_secret_key(k)) and _plain(v, config.max_string)
                for k, v in value.items()
            )
        ):
            text = _to_text(value)
            if len(text) <= config.max_length:
                return text
        text = _to_text(_jsonable(value, config.max_depth, config.max_string, config.max_items))
        return text if len(text) <= config.max_length else _shrink(value)
    except Exception:  # capture must never break the decorated function
        return json.dumps(PLACEHOLDER)


def to_text(attribute: str, text: str) -> str:
    """``text`` as it may be recorded as a plain string attribute: through the redactor, secrets masked,
    cut at ``max_string``."""
    return _recordable(attribute, text, config.max_string)


def _shrink(value: Any) -> str:
    """Cap harder until the text fits ``max_length``; the result is still whole JSON."""
    max_string, max_items = config.max_string, config.max_items
    while max_string > 16 or max_items > 1:
        max_string, max_items = max(16, max_string // 4), max(1, max_items // 4)
        text = _to_text(_jsonable(value, config.max_depth, max_string, max_items))
        if len(text) <= config.max_length:
            return text
    return _to_text(_text(repr(value), max(16, config.max_length // 2)))


CUT_MARKER = "…[%d more chars]"
"""What ends a text cut short, with how many characters were left out: a ``printf`` pattern, so that SQL (a batch
scorer's reasons, cut in DuckDB) writes the same marker."""


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    return text[:limit] + CUT_MARKER % (len(text) - limit)


def capped(text: str) -> str:
    """``text`` as an id-like attribute records it (a tool call id, a response id, a model name) and a scorer's reason
    is stored: storable, cut at ``max_string`` with the marker content gets. Not masked, not redacted: ids are not
    content, and a reason is the scorer's own text."""
    return storable_text(_cut(text, config.max_string))


SECRET_OVERLAP = 256
"""How far past a cut masking looks, so a secret that straddles the cut is masked whole, not half."""


def _text(text: str, limit: int) -> str:
    """``text`` with its secrets masked (when masking is on), cut at ``limit``."""
    if not config.mask_secrets:
        return _cut(text, limit)
    if len(text) <= limit:
        return mask_text(text)
    kept = mask_text(text[: limit + SECRET_OVERLAP])[:limit]
    return kept + CUT_MARKER % (len(text) - limit)


def _jsonable(value: Any, depth: int, max_string: int, max_items: int) -> Any:
    """A JSON-ready copy of ``value`` with strings, collections and depth capped."""
    kind = type(value)
    if kind is str:
        return _text(value, max_string)
    if kind in _SCALARS:
        if kind is float and (value != value or value in (float("inf"), float("-inf"))):
            return str(value)  # JSON has no NaN or infinity
        return value
    if depth <= 0:
        return f"<max depth: {kind.__name__}>"
    try:
        if isinstance(value, Mapping):
            return _mapping(value.items(), len(value), depth, max_string, max_items)
        if isinstance(value, (list, tuple)):
            return _sequence(value, len(value), depth, max_string, max_items)
        return _other(value, depth, max_string, max_items)
    except Exception:  # one value that will not convert costs that value, not the argument or document holding it
        return PLACEHOLDER


def _mapping(items: Any, size: int, depth: int, max_string: int, max_items: int) -> dict[str, Any]:
    kept = list(itertools.islice(items, max_items + 1))  # one past the cap, to know that more were left out
    strings: set[str] | None = None  # the string keys, gathered at the first key that is not one (most have none)
    out: dict[str, Any] = {}
    for i, (key, item) in enumerate(kept):
        if i >= max_items:
            out["…"] = f"{size - max_items} more entries"
            break
        if not isinstance(key, str):
            if strings is None:
                strings = {other for other, _ in kept[:max_items] if isinstance(other, str)}
            key = _key_text(key, out, strings)
        if config.mask_secrets and is_secret_key(key):
            out[key] = MASK
        else:
            out[key] = _jsonable(item, depth - 1, max_string, max_items)
    return out


def _key_text(key: Any, taken: dict[str, Any], strings: set[str]) -> str:
    """A mapping key that is not a string as text: its ``str()``, unless the mapping has that text already (a string
    key ``"1"`` beside the key ``1``, or two keys with one text), then with its type (``"1 (int)"``), then numbered, so
    that each key keeps its value and a reader tells them apart; a key whose ``str()`` raises becomes the placeholder,
    numbered from the second on."""
    try:
        text = str(key)
    except Exception:
        text = PLACEHOLDER
    else:
        if text in taken or text in strings:
            text = f"{text} ({type(key).__name__})"
    unique, n = text, 1
    while unique in taken or unique in strings:
        n += 1
        unique = f"{text} {n}"
    return unique


def _sequence(items: Any, size: int, depth: int, max_string: int, max_items: int) -> list[Any]:
    if config.mask_secrets and is_secret_pair(items):  # ("Authorization", "Bearer ..."), a header given as a pair
        return [items[0], MASK]
    secret = _secret_fields(items) if config.mask_secrets and type(items) is not list else ()
    out = []
    for i, item in enumerate(items):
        if i >= max_items:
            out.append(f"…{size - max_items} more items")
            break
        out.append(MASK if i in secret else _jsonable(item, depth - 1, max_string, max_items))
    return out


def _secret_fields(items: Any) -> frozenset[int]:
    """The positions of a named tuple's fields named like secrets: its fields are named like a dataclass's, but it
    is kept a list, as JSON gives it."""
    fields = getattr(items, "_fields", ())
    return frozenset(i for i, name in enumerate(fields) if isinstance(name, str) and is_secret_key(name))


def _other(value: Any, depth: int, max_string: int, max_items: int) -> Any:
    """Values that are not plain JSON: models, dataclasses, numpy, bytes, sets, anything."""
    if isinstance(value, enum.Enum):
        return _jsonable(value.value, depth, max_string, max_items)
    if isinstance(value, (bytes, bytearray, memoryview)):
        raw = bytes(value[: max_string // 2])
        return {"bytes": len(value), "base64": base64.b64encode(raw).decode("ascii")}
    if isinstance(value, (set, frozenset)):
        return _set(value, depth, max_string, max_items)
    if isinstance(value, (collections.deque, array.array, MappingView, collections.UserList)):
        # Their repr, of the whole, took seconds for millions of items; a dict's keys, values or items are a list.
        return _sequence(value, len(value), depth, max_string, max_items)
    if isinstance(value, (datetime.datetime, datetime.date, datetime.time)):
        return value.isoformat()
    dump = getattr(value, "model_dump", None)  # pydantic v2
    if callable(dump):
        try:
            dumped = dump(mode="json")
        except Exception:  # a serializer or validator that raises: the model is recorded as any other object
            pass
        else:
            return _jsonable(dumped, depth, max_string, max_items)
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        fields = ((f.name, getattr(value, f.name)) for f in dataclasses.fields(value))
        return _mapping(fields, len(dataclasses.fields(value)), depth, max_string, max_items)
    item = getattr(value, "item", None)  # numpy scalars and 0-d arrays
    if callable(item) and type(value).__module__ == "numpy":
        try:
            return _jsonable(item(), depth, max_string, max_items)
        except (TypeError, ValueError):
            pass
    if callable(getattr(value, "tolist", None)) and type(value).__module__ == "numpy":  # numpy arrays
        return _array(value, depth, max_string, max_items)
    if isinstance(value, Mapping):
        return _mapping(value.items(), len(value), depth, max_string, max_items)
    try:
        text = repr(value)
    except Exception:
        return PLACEHOLDER
    return _text(text, max_string)


def _set(value: set[Any] | frozenset[Any], depth: int, max_string: int, max_items: int) -> list[Any]:
    """A set as a sorted list. Of a longer set, only the ``max_items`` items kept are taken, then sorted: sorting a
    million strings to keep a hundred of them took 0.65 s a call."""
    items = list(itertools.islice(value, max_items))
    try:
        items.sort()
    except TypeError:  # items that do not compare (1 and "a"): as the set holds them
        pass
    out = _sequence(items, len(items), depth, max_string, max_items)
    if len(value) > len(items):
        out.append(f"…{len(value) - len(items)} more items")
    return out


def _array(value: Any, depth: int, max_string: int, max_items: int) -> Any:
    """A numpy array as nested lists, cut along each axis *before* it is converted: ``tolist()`` of a whole
    2000x2000 matrix made one decorated call take a second, of a batch of images twenty. Each axis keeps at most
    ``max_items``, and fewer for many axes, so that no more than about ``max_length`` numbers are converted (no
    more could be recorded); each cut axis ends with a marker, as a cut list does."""
    shape = tuple(value.shape)
    if not shape:
        return _jsonable(value.tolist(), depth, max_string, max_items)
    per_axis = min(max_items, max(1, int(config.max_length ** (1 / len(shape)))))
    kept = value[(slice(0, per_axis),) * len(shape)].tolist()
    return _marked(_jsonable(kept, depth, max_string, max_items), shape)


def _marked(rows: Any, shape: tuple[int, ...]) -> Any:
    """``rows`` (an array's first items along each axis, made JSON-ready) with a marker ending each axis cut short."""
    if not isinstance(rows, list):  # past the depth limit: already a marker
        return rows
    if len(shape) > 1:
        rows = [_marked(row, shape[1:]) for row in rows]
    if shape[0] > len(rows):
        rows.append(f"…{shape[0] - len(rows)} more items")
    return rows


# Exceptions carry content: a message built from the user's input, a tool's argument, a key in a URL.
# They are recorded under the same rules as arguments and results.


def error_message(exc: BaseException, limit: int) -> str:
    """The message of ``exc`` as it may be recorded, cut at ``limit``: through the redactor when one is
    set, with secrets masked; with content capture off and no redactor, :data:`NOT_CAPTURED`."""
    if not config.enabled and config.redactor is None:
        return NOT_CAPTURED
    return _recordable(EXCEPTION_MESSAGE, exception_message(exc), limit)


def error_text(exc: BaseException, limit: int = ERROR_CHARS) -> str:
    """``Type: message`` for a record of ``exc``, the message as :func:`error_message` allows."""
    return f"{type(exc).__name__}: {error_message(exc, limit)}"[:limit]


def error_stacktrace(exc: BaseException, message: str) -> str:
    """The stack trace to record for ``exc`` whose recordable message is ``message``.

    With content capture on: Python's whole traceback, through the redactor, secrets masked. With it
    off: only each frame's file, line and function, then ``Type: message``; source lines and chained
    exceptions are left out, as they can quote content.
    """
    if config.enabled:
        try:
            return _recordable(EXCEPTION_STACKTRACE, "".join(traceback.format_exception(exc)), config.max_length)
        except Exception:
            pass  # an exception traceback cannot format: the frames alone still say where
    frames = "".join(
        f'  File "{frame.filename}", line {frame.lineno}, in {frame.name}\n'
        for frame in traceback.extract_tb(exc.__traceback__)
    )
    return storable_text(f"Traceback (most recent call last):\n{frames}{type(exc).__name__}: {message}\n")


def _recordable(attribute: str, text: str, limit: int) -> str:
    """``text`` through the redactor, masked and cut; a redactor that fails or returns None hides it."""
    redacted = _redacted(attribute, text)
    return NOT_CAPTURED if redacted is None else storable_text(_text(redacted, limit))


def whole_text(attribute: str, text: str) -> str | None:
    """``text`` as it may be stored whole (a trial's reply): through the redactor, secrets masked, never cut; None
    where the redactor hides it (it returns None or raises)."""
    redacted = _redacted(attribute, text)
    return None if redacted is None else storable_text(_text(redacted, len(redacted)))


def _redacted(attribute: str, text: str) -> str | None:
    if config.redactor is None:
        return text
    try:
        redacted = config.redactor(attribute, text)
    except Exception:
        return None
    return None if redacted is None else redacted if isinstance(redacted, str) else str(redacted)
