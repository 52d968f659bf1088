"""The built-in scorers: one for every scored field of the case format."""

from __future__ import annotations

from ..dataset._cases import UNKNOWN_ANSWER, Case, gives
from ..store._store import sql_string
from ._answer import matches_any, says_unknown
from ._base import Scorer, scorer
from ._features import TrialFeatures


def _is_unknown(case: Case) -> bool:
    return case.expected_output.strip().lower() == UNKNOWN_ANSWER


def _expects_an_answer(case: Case) -> bool:
    return (gives(case, "expected_output") or gives(case, "acceptable_outputs")) and not _is_unknown(case)


def right_answers(case: Case) -> tuple[str, ...]:
    """``expected_output`` (unless ``""``) and then each of ``acceptable_outputs``."""
    return (case.expected_output, *case.acceptable_outputs) if case.expected_output else case.acceptable_outputs


# Version 2: acceptable_outputs. A case without them is judged as version 1 judged it, reason included.
@scorer(version="2", when=_expects_an_answer)
def answer_match(case: Case, trial: TrialFeatures) -> tuple[float, str]:
    """The final reply gives the expected answer or one of the acceptable ones: normalised text on word
    boundaries, or the same number."""
    ok, reason = matches_any(right_answers(case), trial.reply)
    return float(ok), reason


@scorer(requires=("expected_output",), when=_is_unknown)
def unknown_answer(case: Case, trial: TrialFeatures) -> tuple[float, str]:
    """For ``expected_output: "unknown"``: the reply says the answer is not known instead of inventing one."""
    ok, reason = says_unknown(trial.reply)
    return float(ok), reason


@scorer(requires=("expected_trajectory",), continuous=True, needs_content=False)
def trajectory_order(case: Case, trial: TrialFeatures) -> tuple[float, str]:
    """How well the order of tool calls follows the expected one: the longest common subsequence of the
    calls and the expected trajectory, over the trajectory's length (1.0 when it is followed in order)."""
    expected, called = case.expected_trajectory or (), trial.tool_names
    common = longest_common_subsequence(expected, called)
    return common / len(expected), f"{common} of {len(expected)} expected steps in order; called {list(called)}"


def longest_common_subsequence(a: tuple[str, ...], b: tuple[str, ...]) -> int:
    previous = [0] * (len(b) + 1)
    for x in a:
        current = [0]
        for j, y in enumerate(b):
            current.append(previous[j] + 1 if x == y else max(previous[j + 1], current[j]))
        previous = current
    return previous[-1]


TOOL_NAMES = "list_transform(f.tool_calls, lambda t: t.name)"

tool_use = Scorer(
    "tool_use",
    needs_content=False,
    requires=("expected_tools",),
    sql=f"""
    struct_pack(
        value := CASE WHEN list_sort({TOOL_NAMES}) = list_sort(c.expected_tools) THEN 1.0 ELSE 0.0 END,
        passed := list_sort({TOOL_NAMES}) = list_sort(c.expected_tools),
        reason := CASE WHEN list_sort({TOOL_NAMES}) = list_sort(c.expected_tools)
                       THEN 'the tools called are the expected ones'
                       ELSE 'called [' || array_to_string({TOOL_NAMES}, ', ') || '], expected ['
                            || array_to_string(c.expected_tools, ', ') || ']' END
    )""",
)
"""The multiset of tools called equals the expected one (a name once per call); ``[]``: no tool may be called."""

ALL_REPLIES = "array_to_string(f.replies, chr(0))"
FINAL_REPLY = "coalesce(f.replies[-1], '')"


def texts_in(texts: str, reply: str, *, present: bool = True) -> str:
    """SQL: the items of the list ``texts`` that ``reply`` contains (or, ``present=False``, lacks), ignoring
    case: the one rule of ``must_contain`` and ``must_not_contain``."""
    found = f"contains(lower({reply}), lower(x))"
    return f"list_filter({texts}, lambda x: {found if present else 'NOT ' + found})"


_FORBIDDEN_FOUND = texts_in("c.must_not_contain", ALL_REPLIES)
_REQUIRED_MISSING = texts_in("c.must_contain", FINAL_REPLY, present=False)

must_contain = Scorer(
    "must_contain",
    requires=("must_contain",),
    sql=f"""
    struct_pack(
        value := CASE WHEN len({_REQUIRED_MISSING}) = 0 THEN 1.0 ELSE 0.0 END,
        passed := len({_REQUIRED_MISSING}) = 0,
        reason := CASE WHEN len({_REQUIRED_MISSING}) = 0 THEN 'the final reply contains every required text'
                       ELSE 'the final reply lacks ' || len({_REQUIRED_MISSING}) || ' of ' || len(c.must_contain)
                            || ': ' || array_to_string({_REQUIRED_MISSING}, ', ') END
    )""",
)
"""Every string appears in the final reply (case-insensitive, as text: ``"cat"`` is in ``"category"``)."""

must_not_contain = Scorer(
    "must_not_contain",
    requires=("must_not_contain",),
    sql=f"""
    struct_pack(
        value := CASE WHEN len({_FORBIDDEN_FOUND}) = 0 THEN 1.0 ELSE 0.0 END,
        passed := len({_FORBIDDEN_FOUND}) = 0,
        reason := CASE WHEN len({_FORBIDDEN_FOUND}) = 0 THEN 'no forbidden text in any reply'
                       ELSE 'a reply contains ' || array_to_string({_FORBIDDEN_FOUND}, ', ') END
    )""",
)
"""None of the strings appears in any reply (case-insensitive)."""

_LENGTH = "coalesce(f.reply_length, 0)"  # the whole reply, in code points (as Python's len counts)
_TOO_SHORT = f"coalesce({_LENGTH} < c.min_length, false)"
_TOO_LONG = f"coalesce({_LENGTH} > c.max_length, false)"
_BOUNDS = """CASE WHEN c.max_length IS NULL THEN 'at least ' || c.min_length
                  WHEN c.min_length IS NULL THEN 'at most ' || c.max_length
                  ELSE 'within ' || c.min_length || ' to ' || c.max_length END"""

reply_length = Scorer(
    "reply_length",
    when=lambda case: gives(case, "min_length") or gives(case, "max_length"),
    sql=f"""
    struct_pack(
        value := CASE WHEN {_TOO_SHORT} OR {_TOO_LONG} THEN 0.0 ELSE 1.0 END,
        passed := NOT ({_TOO_SHORT} OR {_TOO_LONG}),
        reason := {_LENGTH} || ' characters, ' || CASE WHEN {_TOO_SHORT} THEN 'fewer than ' || c.min_length
                                                      WHEN {_TOO_LONG} THEN 'more than ' || c.max_length
                                                      ELSE {_BOUNDS} END
    )""",
)
"""The final reply has from ``min_length`` to ``max_length`` characters (either bound may be left out)."""

ACKNOWLEDGES_FAILURE = (
    r"unavailable|not available|error|fail|could ?n[o']t|can ?n[o']t|cannot|unable|not able|is down|"
    r"try again|went wrong|problem|issue|no response|not respond|outage"
)
INVENTED_VALUE = r"[$€£¥]\s?\d|\d+\.\d{2}\b"

_TOOL_FAILED = "list_bool_or(list_transform(f.tool_calls, lambda t: t.error))"
_ACKNOWLEDGED = f"regexp_matches(lower(coalesce(f.replies[-1], '')), {sql_string(ACKNOWLEDGES_FAILURE)})"
_INVENTED = f"regexp_matches(coalesce(f.replies[-1], ''), {sql_string(INVENTED_VALUE)})"
_HANDLED = f"coalesce({_TOOL_FAILED}, false) AND {_ACKNOWLEDGED} AND NOT {_INVENTED}"

tool_error_handling = Scorer(
    "tool_error_handling",
    requires=("expects_tool_error",),
    sql=f"""
    struct_pack(
        value := CASE WHEN {_HANDLED} THEN 1.0 ELSE 0.0 END,
        passed := {_HANDLED},
        reason := CASE WHEN NOT coalesce({_TOOL_FAILED}, false) THEN 'no tool failed, though one was meant to'
                       WHEN {_INVENTED} THEN 'a tool failed but the reply states a value it could not have'
                       WHEN NOT {_ACKNOWLEDGED} THEN 'a tool failed and the reply does not say so'
                       ELSE 'a tool failed and the reply acknowledges it' END
    )""",
)
"""A tool did fail, and the final reply says so rather than stating a value it could not have got."""

_RELEVANT = "len(list_distinct(c.relevant_docs))"
_RECALLED = "len(list_filter(list_distinct(c.relevant_docs), lambda d: list_contains(f.retrieved_ids, d)))"

retrieval_recall = Scorer(
    "retrieval_recall",
    needs_content=False,
    requires=("relevant_docs",),
    continuous=True,
    sql=f"""
    struct_pack(
        value := {_RECALLED} / {_RELEVANT},
        passed := NULL::BOOLEAN,
        reason := {_RECALLED} || ' of ' || {_RELEVANT} || ' relevant documents retrieved'
    )""",
)
"""The share of the relevant documents that a retrieval span returned (``[]``: nothing to retrieve, not scored)."""

step_efficiency = Scorer(
    "step_efficiency",
    needs_content=False,
    requires=("max_tool_calls",),
    continuous=True,
    sql="""
    struct_pack(
        value := CASE WHEN len(f.tool_calls) <= c.max_tool_calls THEN 1.0
                      ELSE c.max_tool_calls / len(f.tool_calls) END,
        passed := NULL::BOOLEAN,
        reason := len(f.tool_calls) || ' tool calls for a budget of ' || c.max_tool_calls
    )""",
)
"""1.0 within the budget of tool calls, then budget / calls as calls exceed it."""

BUILTIN_SCORERS: tuple[Scorer, ...] = (
    answer_match,
    unknown_answer,
    tool_use,
    must_contain,
    must_not_contain,
    reply_length,
    tool_error_handling,
    retrieval_recall,
    trajectory_order,
    step_efficiency,
)
"""Every built-in scorer, in the order of the case format's fields."""
