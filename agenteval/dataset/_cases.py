"""The case format: one JSON object per line of a JSONL dataset, validated into typed ``Case``s.

Validation reports every bad line (up to :data:`MAX_PROBLEMS`), each naming the file, the line
and the field, rather than stopping at the first.
"""

from __future__ import annotations

import dataclasses
import difflib
import hashlib
import json
import math
import sys
import unicodedata
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from agenteval_instrumentation.text import storable_text

from ..errors import SeveralProblems
from ._file_kinds import NotRegularFile, open_regular

MAX_PROBLEMS = 50
DEFAULT_MAX_TURNS = 5
DIFFICULTIES = ("easy", "medium", "hard")
UNKNOWN_ANSWER = "unknown"
"""``expected_output`` meaning: the agent should say the answer is not known or not available."""
UNCATEGORIZED = "uncategorized"
"""The category reports, samples and audits give cases without one; reserved, so no case may name it."""


def reserved_category(category: str) -> bool:
    """Whether ``category`` is :data:`UNCATEGORIZED` as a reader sees it (any case, spaces at its ends): a case
    of that category was counted with the cases of none, in samples and reports, and apart from them it would
    show as a second row of the same name."""
    return category.strip().casefold() == UNCATEGORIZED


@dataclasses.dataclass(frozen=True, slots=True)
class Case:
    """One question, its expected answer and what else the evaluation should check."""

    id: str
    input: str
    expected_output: str
    """``""`` means no expected answer (exact match is skipped, unless ``acceptable_outputs`` gives some)."""
    acceptable_outputs: tuple[str, ...] = ()
    """Other right answers: the reply may give ``expected_output`` or any one of these."""
    category: str | None = None
    expected_tools: tuple[str, ...] | None = None
    """Tools the agent must call, a name once per call; ``()`` means it must call none."""
    must_contain: tuple[str, ...] = ()
    """Text the final reply must contain, every item (case-insensitive)."""
    must_not_contain: tuple[str, ...] = ()
    min_length: int | None = None
    """The fewest characters the final reply may have."""
    max_length: int | None = None
    """The most characters the final reply may have."""
    rubric: str | None = None
    """What a grader should check in the reply, in words: read by the LLM judge, not by a built-in scorer."""
    expects_tool_error: bool = False
    relevant_docs: tuple[str, ...] | None = None
    expected_trajectory: tuple[str, ...] | None = None
    max_tool_calls: int | None = None
    turns: tuple[str, ...] | None = None
    simulated_user: str | None = None
    max_turns: int = DEFAULT_MAX_TURNS
    tags: tuple[str, ...] = ()
    difficulty: str | None = None
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict, hash=False, compare=False)
    line: int = 0
    """The line of the dataset file the case came from (0 for generated cases)."""

    def to_json(self) -> str:
        """:meth:`to_dict` as one line of JSON, keys sorted: what the dataset hash and the stored
        cases table hold."""
        return json.dumps(self.to_dict(), sort_keys=True, ensure_ascii=False)

    def to_dict(self) -> dict[str, Any]:
        """The case as it would be written in a dataset (defaults left out; with turns, no input)."""
        out: dict[str, Any] = {"id": self.id, "input": self.input, "expected_output": self.expected_output}
        if self.turns is not None:
            del out["input"]  # the last turn; a line giving both is refused
        for name, default in OPTIONAL_DEFAULTS.items():
            value = getattr(self, name)
            if value != default:
                out[name] = list(value) if isinstance(value, tuple) else value
        return out


@dataclasses.dataclass(frozen=True)
class Problem:
    """One thing wrong in a dataset file."""

    path: str
    line: int
    """0 for the file as a whole (missing, empty, unreadable)."""
    field: str | None
    message: str

    def __str__(self) -> str:
        where = f"{self.path}:{self.line}" if self.line else self.path
        return f"{where}: {self.field}: {self.message}" if self.field else f"{where}: {self.message}"


class DatasetError(SeveralProblems, ValueError):
    """A dataset file has problems; ``problems`` lists them (at most :data:`MAX_PROBLEMS`), one line each."""

    def __init__(self, problems: list[Problem], more: int = 0) -> None:
        self.problems = problems
        self.more = more
        lines = [str(p) for p in problems]
        if more:
            lines.append(f"... and {more} more problem(s)")
        super().__init__(*lines)


@dataclasses.dataclass
class Dataset:
    """A loaded dataset: its name, where it came from, a hash of its content, and its cases."""

    name: str
    path: str
    hash: str
    cases: list[Case]

    def __iter__(self) -> Iterator[Case]:
        return iter(self.cases)

    def __len__(self) -> int:
        return len(self.cases)

    def categories(self) -> dict[str, int]:
        """Cases per category (:data:`UNCATEGORIZED` for cases without one), largest first."""
        counts: dict[str, int] = {}
        for case in self.cases:
            key = case.category or UNCATEGORIZED
            counts[key] = counts.get(key, 0) + 1
        return dict(sorted(counts.items(), key=lambda kv: (-kv[1], kv[0])))


# --- field rules ---------------------------------------------------------------------------


class DuplicateKey(Exception):
    def __init__(self, key: str) -> None:
        self.key = key


def object_without_duplicate_keys(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """A JSON object, refusing a key given twice (``json`` would silently keep the last)."""
    record = dict(pairs)
    if len(record) < len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise DuplicateKey(key)
            seen.add(key)
    return record


class NonFinite:
    """A ``NaN``, ``Infinity`` or a number too large for a float, as the line wrote it. JSON has no such numbers,
    but Python's ``json`` reads them (and ``json.dumps`` writes a missing float as ``NaN``): kept as this marker so
    the line is refused naming the field, rather than the case expecting the text "NaN" or the store holding JSON
    that strict readers cannot parse."""

    def __init__(self, text: str) -> None:
        self.text = text


def non_finite_at(value: Any, field: str = "") -> tuple[str, str] | None:
    """The first field (named as for a lone surrogate) holding a :class:`NonFinite`, and the text written there."""
    if isinstance(value, NonFinite):
        return field, value.text
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        inner = key if isinstance(key, str) and not field else field if isinstance(key, int) else f"{field}.{key}"
        found = non_finite_at(item, inner)
        if found is not None:
            return found
    return None


_STAND_INS: tuple[tuple[str, Any], ...] = (
    ("null", None),
    ("a finite number", 1.5),
    ("an integer", 1),
    ("a string", "1"),
    ("a boolean", True),
)
"""A value of each kind a field may take, tried in place of a NaN or infinity to say what to write instead."""


def _finite_advice(record: dict[str, Any], field: str, line: int) -> str:
    """What to write instead of the NaN or infinity at ``field``: the kinds of value :func:`parse_case` takes there,
    found by parsing the line with each in its place, so the advice never names a kind that is then refused."""
    top = field.split(".")[0]
    taken = [kind for kind, stand_in in _STAND_INS if _takes(record, top, _replaced(record, stand_in), line)]
    if "a finite number" in taken:
        taken.remove("an integer")  # said already
    if "a boolean" in taken and ("a string" in taken or "a finite number" in taken):
        taken.remove("a boolean")  # metadata takes anything; nobody writes a boolean for a number
    if not taken:  # the field refuses every stand-in for another reason, said once the number is fixed
        return "write the value the field takes"
    return "write " + (" or ".join(taken) if len(taken) < 3 else f"{', '.join(taken[:-1])} or {taken[-1]}")


def _takes(record: dict[str, Any], field: str, candidate: Any, line: int) -> bool:
    """Whether the line ``candidate`` (``record`` with a stand-in for its NaN) passes, or fails only elsewhere."""
    try:
        parse_case(candidate, line)
    except _Invalid as exc:
        return exc.field != field
    return True


def _replaced(value: Any, stand_in: Any) -> Any:
    """``value`` with every :class:`NonFinite` in it replaced by ``stand_in``."""
    if isinstance(value, NonFinite):
        return stand_in
    if isinstance(value, dict):
        return {key: _replaced(item, stand_in) for key, item in value.items()}
    if isinstance(value, list):
        return [_replaced(item, stand_in) for item in value]
    return value


TOO_LONG_NUMBER = (
    f"a whole number of more than {sys.get_int_max_str_digits():,} digits, more than Python reads; write it as a string"
)
"""The problem of JSON holding an integer too long for ``int`` (json raises ValueError, not a JSON error)."""


MAX_NESTING = 100
"""The most levels a line's JSON may nest (lists in objects in lists, in ``metadata``): far beyond any real case.
Python reads about 1,000 levels, fewer the deeper in a program it reads them, so without a limit of its own a line
``validate`` accepted could be refused by ``run``, or read back from the store by neither."""


class RefusedJson(ValueError):
    """JSON that Python reads but the case format refuses: a key given twice, an integer too long for Python, nesting
    past :data:`MAX_NESTING`, or (``non_finite`` set, with the ``record`` read) a NaN, an infinity or a number too
    large for a float. ``field`` is where (None for the whole text)."""

    def __init__(self, field: str | None, message: str, *, non_finite: str | None = None, record: Any = None) -> None:
        super().__init__(message)
        self.field = field
        self.message = message
        self.non_finite = non_finite
        self.record = record


def strict_json(text: str) -> Any:
    """``text`` read as JSON by the case format's rules, which a dataset's lines and a dataset's card share.
    ``json.JSONDecodeError`` for text that is not JSON; :class:`RefusedJson` for what JSON or Python allows and the
    format does not (json would keep the last of two keys, and read NaN back as a float it later writes as NaN)."""
    markers: list[NonFinite] = []  # made by the hooks below; a text without any is not walked for them

    def constant(written: str) -> NonFinite:
        markers.append(NonFinite(written))
        return markers[-1]

    def finite_float(written: str) -> float | NonFinite:
        value = float(written)
        return value if math.isfinite(value) else constant(written)

    try:
        record = json.loads(
            text, object_pairs_hook=object_without_duplicate_keys, parse_constant=constant, parse_float=finite_float
        )
    except json.JSONDecodeError:
        raise
    except ValueError:  # not a JSON error: Python's own limit on the digits of an integer
        raise RefusedJson(None, TOO_LONG_NUMBER) from None
    except DuplicateKey as exc:
        message = "is given twice in one object; JSON keeps only the last, so say it once"
        raise RefusedJson(exc.key, message) from None
    except RecursionError:
        raise RefusedJson(None, _TOO_DEEP) from None
    deep = too_deep(record)
    if deep is not None:
        raise RefusedJson(deep or None, _TOO_DEEP)
    found = non_finite_at(record) if markers else None
    if found is not None:
        field, written = found
        message = f"{written} is not a number JSON allows"
        raise RefusedJson(field or None, message, non_finite=written, record=record)
    return record


_TOO_DEEP = f"JSON nested too deeply (more than {MAX_NESTING} levels); flatten it"


def too_deep(record: Any) -> str | None:
    """The field (``""`` for the line itself) holding JSON nested more than :data:`MAX_NESTING` levels, or None.
    A loop, not recursion: the depth is what is in question."""
    fields = record.items() if isinstance(record, dict) else [("", record)]
    for field, value in fields:
        level: list[Any] = [value]
        for _ in range(MAX_NESTING):
            level = [
                item
                for container in level
                if isinstance(container, (dict, list))
                for item in (container.values() if isinstance(container, dict) else container)
            ]
            if not level:
                break
        else:
            if any(isinstance(item, (dict, list)) for item in level):
                return field
    return None


class _Invalid(Exception):
    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.message = message


def _string(field: str, value: Any, *, allow_empty: bool = True) -> str:
    if not isinstance(value, str):
        raise _Invalid(field, f"must be a string, not {_json_type(value)}")
    if not allow_empty and not value.strip():
        raise _Invalid(field, "must not be empty")
    return value


def _answer(value: Any) -> str:
    # Numbers are the common slip ("expected_output": 42); they mean their text.
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return json.dumps(value)
    return _string("expected_output", value)


def _strings(field: str, value: Any, *, allow_empty_list: bool = True) -> tuple[str, ...]:
    if isinstance(value, str):
        raise _Invalid(field, f'must be a list of strings, e.g. ["{value}"]')
    if not isinstance(value, list):
        raise _Invalid(field, f"must be a list of strings, not {_json_type(value)}")
    for i, item in enumerate(value):
        if not isinstance(item, str):
            raise _Invalid(field, f"item {i} must be a string, not {_json_type(item)}")
        if not item.strip():
            raise _Invalid(field, f"item {i} must not be empty")
    if not value and not allow_empty_list:
        raise _Invalid(field, "must not be empty")
    return tuple(value)


MAX_INTEGER = 1_000_000
"""The largest count a case may give (``max_tool_calls``, ``max_turns``): far beyond any real budget,
and well inside the 64-bit integers the store holds."""


def _integer(field: str, value: Any, minimum: int) -> int:
    if not isinstance(value, int) or isinstance(value, bool):
        raise _Invalid(field, f"must be an integer, not {_json_type(value)}")
    if value < minimum:
        raise _Invalid(field, f"must be at least {minimum}")
    if value > MAX_INTEGER:
        raise _Invalid(field, f"must be at most {MAX_INTEGER:,}, not {_large(value)}")
    return value


def _large(value: int) -> str:
    """A too-large integer as its writer would know it: 2,000,000 in full, 10**400 (JSON allows it) by its order of
    magnitude: a float cannot hold it, and a terminal would scroll past its digits."""
    return f"{value:,}" if value < 10**18 else f"a number of about 10^{int(value.bit_length() * math.log10(2))}"


def _boolean(field: str, value: Any) -> bool:
    if not isinstance(value, bool):
        raise _Invalid(field, f"must be true or false, not {_json_type(value)}")
    return value


def _json_type(value: Any) -> str:
    return {
        str: "a string",
        bool: "a boolean",
        int: "a number",
        float: "a number",
        list: "a list",
        dict: "an object",
        type(None): "null",
    }.get(type(value), type(value).__name__)


OPTIONAL_DEFAULTS: dict[str, Any] = {
    f.name: f.default_factory() if callable(f.default_factory) else f.default
    for f in dataclasses.fields(Case)
    if f.name not in ("id", "input", "expected_output", "line")
}
"""Each optional field a dataset line may carry, with its default (read only)."""

FIELDS = ("input", "expected_output", "id", *OPTIONAL_DEFAULTS)
"""Every field a case may have."""

SCORED_FIELDS = (
    "expected_output",
    "acceptable_outputs",
    "expected_tools",
    "must_contain",
    "must_not_contain",
    "min_length",
    "max_length",
    "expects_tool_error",
    "relevant_docs",
    "expected_trajectory",
    "max_tool_calls",
)
"""The fields scorers judge a trial by: a built-in scorer each, except that ``answer_match`` reads
``acceptable_outputs`` beside ``expected_output`` and ``reply_length`` reads both lengths."""

_GIVEN_WHEN_EMPTY = frozenset({"expected_tools", "max_tool_calls", "min_length", "max_length"})


def gives(case: Case, field: str) -> bool:
    """Whether ``case`` gives ``field``, so that the scorers needing it apply: ``expected_tools: []``
    does (no tool may be called), and so does a count or length of 0; an empty ``expected_output``
    or list does not (nothing to check)."""
    value = getattr(case, field)
    return value is not None if field in _GIVEN_WHEN_EMPTY else bool(value)


def _unknown_field_hint(key: str) -> str:
    """A misspelt field gets its likely name; any other is a curator's own (notes, an owner), which ``metadata``
    carries untouched, so the hint says to move it there."""
    close = difflib.get_close_matches(key, FIELDS, n=1, cutoff=0.6)
    if close:
        return f"; did you mean {close[0]!r}?"
    moved = f'"metadata": {{{json.dumps(key)}: ...}}'
    return f"; known fields: {', '.join(FIELDS)}; if it is data of your own, put it in metadata instead: {moved}"


def parse_case(record: Any, line: int) -> Case:
    """A validated :class:`Case` from one decoded JSON line; raises ``_Invalid`` on the first bad field."""
    if not isinstance(record, dict):
        raise _Invalid("", f"each line must be a JSON object, not {_json_type(record)}")
    for key in record:
        if key not in FIELDS:
            raise _Invalid(key, f"unknown field{_unknown_field_hint(key)}")
    unstorable = _lone_surrogate_field(record)
    if unstorable is not None:
        raise _Invalid(
            unstorable,
            "holds a lone surrogate (a \\ud800-\\udfff escape without its pair), which cannot be "
            "stored as UTF-8; fix the escape or remove it",
        )
    values: dict[str, Any] = {"line": line}
    turns = record.get("turns")
    if turns is not None:
        values["turns"] = _strings("turns", turns, allow_empty_list=False)
    if "input" in record and turns is not None:
        raise _Invalid("input", "give input or turns, not both: with turns, the last turn is the input")
    if "input" in record:
        values["input"] = _string("input", record["input"], allow_empty=False)
    elif turns is not None:
        values["input"] = values["turns"][-1]
    else:
        raise _Invalid("input", "is required (or give the conversation as turns)")
    if "expected_output" not in record:
        raise _Invalid("expected_output", 'is required; use "" when there is no expected answer')
    values["expected_output"] = _answer(record["expected_output"])
    case_id = record.get("id", line)
    if isinstance(case_id, int) and not isinstance(case_id, bool):
        case_id = str(case_id)
    values["id"] = _string("id", case_id, allow_empty=False)
    _optional_fields(record, values)
    return Case(**values)


def case_from_snapshot(record: dict[str, Any], line: int) -> Case:
    """A case read back from :meth:`Case.to_json` text (the store's cases table). Snapshots written before
    ``to_dict`` left ``input`` out of a conversation carry both; the input is its last turn, so it goes."""
    if record.get("turns") is not None and "input" in record:
        record = {key: value for key, value in record.items() if key != "input"}
    category = record.get("category")
    if isinstance(category, str) and reserved_category(category):
        # Stored before the name was reserved: its experiment is read back as it ran, not refused.
        without = {key: value for key, value in record.items() if key != "category"}
        return dataclasses.replace(parse_case(without, line), category=category)
    return parse_case(record, line)


def _lone_surrogate_field(value: Any, field: str = "") -> str | None:
    """The first field (``metadata.key``, ``turns``) whose text holds a lone surrogate, or None."""
    if isinstance(value, str):
        return field if storable_text(value) != value else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for key, item in items:
        inner = key if isinstance(key, str) and not field else field if isinstance(key, int) else f"{field}.{key}"
        if isinstance(key, str) and storable_text(key) != key:
            return inner
        found = _lone_surrogate_field(item, inner)
        if found is not None:
            return found
    return None


def _optional_fields(record: dict[str, Any], values: dict[str, Any]) -> None:
    if record.get("category") is not None:
        values["category"] = _category(record["category"])
    for field in ("expected_tools", "relevant_docs"):
        if record.get(field) is not None:
            values[field] = _strings(field, record[field])
    for field in ("must_not_contain", "tags"):
        if record.get(field) is not None:
            values[field] = _strings(field, record[field])
    if record.get("expected_trajectory") is not None:
        values["expected_trajectory"] = _strings("expected_trajectory", record["expected_trajectory"])
    if record.get("expects_tool_error") is not None:
        values["expects_tool_error"] = _boolean("expects_tool_error", record["expects_tool_error"])
    if record.get("max_tool_calls") is not None:
        values["max_tool_calls"] = _integer("max_tool_calls", record["max_tool_calls"], 0)
    if record.get("simulated_user") is not None:
        if record.get("turns") is not None:
            raise _Invalid("simulated_user", "cannot be combined with turns: choose written turns or a simulated user")
        values["simulated_user"] = _string("simulated_user", record["simulated_user"], allow_empty=False)
    if record.get("max_turns") is not None:
        values["max_turns"] = _integer("max_turns", record["max_turns"], 1)
    if record.get("difficulty") is not None:
        difficulty = _string("difficulty", record["difficulty"])
        if difficulty not in DIFFICULTIES:
            raise _Invalid("difficulty", f"must be one of {', '.join(DIFFICULTIES)}, not {difficulty!r}")
        values["difficulty"] = difficulty
    if record.get("metadata") is not None:
        if not isinstance(record["metadata"], dict):
            raise _Invalid("metadata", f"must be an object, not {_json_type(record['metadata'])}")
        values["metadata"] = record["metadata"]
    _criteria(record, values)


def _category(value: Any) -> str:
    category = _string("category", value, allow_empty=False)
    if reserved_category(category):
        reads = "" if category == UNCATEGORIZED else f" reads as {UNCATEGORIZED!r}, which"
        raise _Invalid(
            "category",
            f"{category!r}{reads} is reserved: it is the name reports give cases without a category, so these "
            "would be taken for them; leave category out for that, or choose another name",
        )
    return category


def _criteria(record: dict[str, Any], values: dict[str, Any]) -> None:
    """The criteria for open-ended answers, and the combinations no reply could ever pass."""
    if record.get("acceptable_outputs") is not None:
        values["acceptable_outputs"] = _acceptable_outputs(record["acceptable_outputs"], values["expected_output"])
    if record.get("must_contain") is not None:
        required = _strings("must_contain", record["must_contain"])
        values["must_contain"] = _distinct("must_contain", required, str.lower)
    if record.get("min_length") is not None:
        values["min_length"] = _integer("min_length", record["min_length"], 0)
    if record.get("max_length") is not None:
        # An empty reply is an empty_output failure, so a reply of at most 0 characters never passes.
        values["max_length"] = _integer("max_length", record["max_length"], 1)
    if record.get("rubric") is not None:
        values["rubric"] = _string("rubric", record["rubric"], allow_empty=False)
    shortest, longest = values.get("min_length"), values.get("max_length")
    if shortest is not None and longest is not None and shortest > longest:
        raise _Invalid(
            "min_length", f"is {shortest}, more than max_length ({longest}): no reply can pass; swap or fix them"
        )
    required = values.get("must_contain", ())
    for i, item in enumerate(required):
        for forbidden in values.get("must_not_contain", ()):
            if forbidden.lower() in item.lower():
                clash = "is also in" if forbidden.lower() == item.lower() else f"contains {forbidden!r}, forbidden by"
                raise _Invalid(
                    "must_contain", f"item {i} ({item!r}) {clash} must_not_contain: no reply can pass; remove one"
                )
        if longest is not None and len(item) > longest:
            raise _Invalid(
                "max_length",
                f"is {longest}, shorter than must_contain item {i} ({len(item)} characters): no reply can pass; "
                "raise max_length or shorten the item",
            )


def _acceptable_outputs(value: Any, expected: str) -> tuple[str, ...]:
    field = "acceptable_outputs"
    if isinstance(value, list):  # numbers mean their text, as in expected_output
        value = [json.dumps(v) if isinstance(v, (int, float)) and not isinstance(v, bool) else v for v in value]
    answers = _distinct(field, _strings(field, value), _answer_key)
    if _answer_key(expected) == UNKNOWN_ANSWER:
        raise _Invalid(
            field,
            'cannot be combined with expected_output "unknown", which asks for a reply that says it does not '
            'know; give the right answers in expected_output and acceptable_outputs, or only "unknown"',
        )
    for i, answer in enumerate(answers):
        if _answer_key(answer) == UNKNOWN_ANSWER:
            raise _Invalid(field, f'item {i} is "unknown"; to expect a reply that says so, use expected_output')
        if _answer_key(answer) == _answer_key(expected):
            raise _Invalid(field, f"item {i} ({answer!r}) repeats expected_output; remove it")
    return answers


def _answer_key(answer: str) -> str:
    """An answer as far as telling two apart goes: lower case, whitespace collapsed (matching
    normalises more, so answers equal here always match the same replies)."""
    return " ".join(answer.lower().split())


def _distinct(field: str, items: tuple[str, ...], key: Callable[[str], str]) -> tuple[str, ...]:
    """``items``, refusing one that repeats another (compared by ``key``)."""
    first: dict[str, int] = {}
    for i, item in enumerate(items):
        seen = first.setdefault(key(item), i)
        if seen != i:
            raise _Invalid(field, f"item {i} ({item!r}) repeats item {seen}; give it once")
    return items


_UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff", b"\x00\x00\xfe\xff")
"""How UTF-16 (little- and big-endian) and UTF-32 (little-endian starts as UTF-16's; big-endian) files start."""


class NotUtf8(ValueError):
    """Bytes that are not UTF-8; the message says why and to save the file as UTF-8. ``whole_file``: the file
    is UTF-16 or UTF-32, so every line of it is wrong the same way."""

    def __init__(self, message: str, *, whole_file: bool) -> None:
        super().__init__(message)
        self.whole_file = whole_file


def utf8_text(data: bytes, *, file_start: bool) -> str:
    """``data`` decoded as UTF-8 (a UTF-8 byte order mark is kept), or :class:`NotUtf8`: a UTF-16 or UTF-32 byte
    order mark, or a NUL byte in the first four (UTF-16 or UTF-32 of ASCII text without the mark), when ``data``
    starts the file (a line: any up to the first with content), else the first byte that is not UTF-8, counted from
    1 within ``data``. What the dataset loader (``data`` a line) and ``generate`` (a whole document) both say."""
    if file_start and data.startswith(_UTF16_BOMS):
        # Windows PowerShell's `>` writes UTF-16, and Notepad's "Unicode"; read as UTF-8 it fails at byte 1.
        raise NotUtf8(
            "the file is UTF-16 or UTF-32 (it starts with their byte order mark); save it as UTF-8", whole_file=True
        )
    if file_start and b"\x00" in data[:4]:
        # The same without the mark (.NET's UnicodeEncoding(false, ...), iconv -t UTF-16LE): its NUL bytes are valid
        # UTF-8, so every line was "invalid JSON at column 1", one problem per line and none saying why.
        raise NotUtf8(
            "the file is UTF-16 or UTF-32 without a byte order mark (it starts with NUL bytes, which UTF-8 text "
            "does not); save it as UTF-8",
            whole_file=True,
        )
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise NotUtf8(f"not valid UTF-8 at byte {exc.start + 1}; save the file as UTF-8", whole_file=False) from None


CR_LINE_ENDS = (
    "; the file's lines end with a CR alone (old Mac line ends), so it reads as one line: convert them to LF, "
    "e.g. tr '\\r' '\\n' < FILE > FIXED.jsonl"
)


def _cr_line_ends(text: str, error: json.JSONDecodeError) -> str:
    """The hint for a line holding a whole JSON value, then a carriage return, then more: lines split on LF alone,
    so a file whose lines end with a CR alone is one line, whose second record is "Extra data". (A CR that JSON
    reads as whitespace fails nothing, and one inside a string fails as a control character: no hint for those.)"""
    return CR_LINE_ENDS if error.msg == "Extra data" and "\r" in text[: error.pos] else ""


def id_key(case_id: str) -> str:
    """A case id as a reader tells ids apart: Unicode-normalised (NFC), without spaces at its ends. Ids that differ
    only there show alike in every report and table, so one dataset may not hold two of them."""
    return unicodedata.normalize("NFC", case_id).strip()


NUMBERED = "has no id, so its line number is its id"
"""Why a line's id is a number it never wrote: the id it defaults to."""


def _numbered_note(numbered: bool, first_line: int, first_numbered: bool) -> str:
    """Which of two clashing lines took its line number as its id: without it, '{"id": "1"}' on line 3 clashed
    with line 1 "first used on line 1", where no id is written."""
    notes = [f"this line {NUMBERED}"] if numbered else []
    notes += [f"line {first_line} {NUMBERED}"] if first_numbered else []
    return f" ({'; '.join(notes)})" if notes else ""


def _duplicate_id(
    case_id: str, first_id: str, first_line: int, *, numbered: bool = False, first_numbered: bool = False
) -> str:
    """The problem of a case whose id (``numbered``: its line number, for want of one) clashes with line
    ``first_line``'s (``first_numbered``: the same there)."""
    note = _numbered_note(numbered, first_line, first_numbered)
    if case_id == first_id:
        give = "; give one of them an id of its own" if note else ""
        return f"duplicate id {case_id!r}, first used on line {first_line}{note}{give}"
    ways = []
    if case_id.strip() != first_id.strip():
        ways.append("Unicode normalisation (an accented letter written as one character, or as a letter and a mark)")
    if unicodedata.normalize("NFC", case_id) != unicodedata.normalize("NFC", first_id):
        ways.append("spaces at their ends")
    how = " and in ".join(ways)
    return (
        f"id {case_id!r} looks the same as {first_id!r} on line {first_line}{note}: they differ only in {how}, so no "
        "report could tell their cases apart; give one a distinct id"
    )


_ESCAPES = {"\t": "\\t", "\n": "\\n", "\r": "\\r", "\b": "\\b", "\f": "\\f"}
"""JSON's short escapes for the control characters that have one."""


def _json_error(text: str, error: json.JSONDecodeError) -> str:
    """What is wrong with a line that is not JSON, with a hint where one helps. ``json`` says "Invalid control
    character at" for a tab or other control character typed into a string (a pasted tab is the usual one), ending
    at "at" and naming neither the character nor the escape to write instead."""
    if error.msg == "Invalid control character at" and error.pos < len(text):
        char = text[error.pos]
        escape = _ESCAPES.get(char, f"\\u{ord(char):04x}")
        return f"Invalid control character U+{ord(char):04X} inside a string; write it as {escape}"
    return error.msg + _stray_control(text, error) + _cr_line_ends(text, error)


def _stray_control(text: str, error: json.JSONDecodeError) -> str:
    """The hint for a control character where JSON expects a value or punctuation (outside any string): json said
    only "Expecting value", and the character does not show in an editor. A NUL byte is the usual one (a file a
    crash left padded with them, or text pasted from a binary)."""
    char = text[error.pos] if error.pos < len(text) else ""
    if char == "\x00":
        return (
            "; the line holds a NUL byte (U+0000) outside any string, which JSON never allows: delete it "
            "(tr -d '\\000' < FILE > FIXED.jsonl deletes every one)"
        )
    if char and unicodedata.category(char) == "Cc" and char not in " \t\r\n":
        return f"; the line holds the control character U+{ord(char):04X} outside any string: delete it"
    return ""


NO_CASES = (
    "has no cases: nothing to run (the file is empty or holds only blank lines); write one case a line, "
    'each a JSON object such as {"input": "...", "expected_output": "..."}'
)
"""The problem of a file without a single case (reported on line 0, the file itself)."""


def read_cases(lines: Iterable[str | bytes], path: str) -> list[Case]:
    """Validate every line; raise :class:`DatasetError` listing the problems if there are any.

    Blank lines are skipped but still counted, so line numbers match an editor's. A file without a case (empty,
    or only blank lines) is a problem: there is nothing to run.
    """
    cases: list[Case] = []
    problems: list[Problem] = []
    more = 0
    first_line_of: dict[str, tuple[int, str, bool]] = {}  # by id_key: the line, the id, whether it is the line's

    def report(line: int, field: str | None, message: str) -> None:
        nonlocal more
        if len(problems) < MAX_PROBLEMS:
            problems.append(Problem(path, line, field or None, message))
        else:
            more += 1

    started = False  # a line with content seen: the lines before it start the file as far as its encoding goes
    for number, text in enumerate(lines, start=1):
        if isinstance(text, bytes):
            try:
                # Not just line 1: UTF-16LE's blank first line is "\n\x00", so its NUL bytes begin line 2.
                text = utf8_text(text, file_start=not started)
            except NotUtf8 as exc:
                report(number, None, str(exc))
                if exc.whole_file:
                    # One problem saying what to do, not one per line each saying "invalid JSON at column 1".
                    break
                continue
        text = text.rstrip("\r\n")
        if number == 1:
            text = text.removeprefix("\ufeff")
        if not text.strip():
            continue
        started = True
        try:
            record = strict_json(text)
        except json.JSONDecodeError as exc:
            report(number, None, f"invalid JSON at column {exc.colno}: {_json_error(text, exc)}")
            continue
        except RefusedJson as exc:
            advice = "" if exc.non_finite is None else f"; {_finite_advice(exc.record, exc.field or '', number)}"
            report(number, exc.field, exc.message + advice)
            continue
        try:
            case = parse_case(record, number)
        except _Invalid as exc:
            report(number, exc.field, exc.message)
            continue
        key = id_key(case.id)
        numbered = "id" not in record
        if key in first_line_of:
            first_line, first_id, first_numbered = first_line_of[key]
            clash = _duplicate_id(case.id, first_id, first_line, numbered=numbered, first_numbered=first_numbered)
            report(number, "id", clash)
            continue
        first_line_of[key] = (number, case.id, numbered)
        cases.append(case)
    if not cases and not problems:
        # `run` refuses a dataset without cases; `validate` passing it said the file was fine when it was not.
        report(0, None, NO_CASES)
    if problems:
        raise DatasetError(problems, more)
    return cases


def load_file(path: str | Path, name: str | None = None) -> Dataset:
    """Load and validate a JSONL dataset file (UTF-8, an optional BOM, LF or CRLF line ends)."""
    path = Path(path)
    digest = hashlib.sha256()

    def lines() -> Iterator[bytes]:
        with open_regular(path) as handle:
            for raw in handle:
                digest.update(raw)
                yield raw

    try:
        cases = read_cases(lines(), str(path))
    except FileNotFoundError:
        raise DatasetError([Problem(str(path), 0, None, "no such file")]) from None
    except IsADirectoryError:
        raise DatasetError([Problem(str(path), 0, None, "is a folder; give the path of a JSONL file")]) from None
    except PermissionError:
        raise DatasetError([Problem(str(path), 0, None, "cannot be read (permission denied)")]) from None
    except NotRegularFile as exc:
        raise DatasetError([Problem(str(path), 0, None, f"{exc.strerror}; give the path of a JSONL file")]) from None
    except OSError as exc:  # a link to itself, an I/O error: one line naming the file, never a traceback
        raise DatasetError([Problem(str(path), 0, None, f"cannot be read ({exc.strerror or exc})")]) from None
    return Dataset(name or path.stem, str(path), digest.hexdigest(), cases)


def dataset_hash(cases: Iterable[Case]) -> str:
    """A content hash of cases that were not read from a file (generated datasets)."""
    digest = hashlib.sha256()
    for case in cases:
        digest.update(case.to_json().encode())
        digest.update(b"\n")
    return digest.hexdigest()
