"""The scorers the runner applies as trials finish.

Interim: answer match and forbidden text, judged from the replies in memory. The scoring issue
replaces this with the DuckDB feature layer over spans, shared with ``rescore``.
"""

from __future__ import annotations

import dataclasses

from ..cases import UNKNOWN_ANSWER, Case
from .answer import matches, says_unknown


@dataclasses.dataclass(frozen=True)
class Score:
    """One scorer's judgement of one trial."""

    scorer: str
    version: str
    value: float | None
    passed: bool | None
    reason: str
    error: str | None = None


def score_replies(case: Case, replies: list[str]) -> list[Score]:
    """The applicable scores of a finished trial (nothing for a field the case leaves out)."""
    scores = []
    final = replies[-1] if replies else ""
    if case.expected_output.strip().lower() == UNKNOWN_ANSWER:
        ok, reason = says_unknown(final)
        scores.append(Score("unknown_answer", "1", float(ok), ok, reason))
    elif case.expected_output:
        ok, reason = matches(case.expected_output, final)
        scores.append(Score("answer_match", "1", float(ok), ok, reason))
    if case.must_not_contain:
        found = [s for s in case.must_not_contain for r in replies if s.lower() in r.lower()]
        ok = not found
        reason = "no forbidden text in any reply" if ok else f"a reply contains {found[0]!r}"
        scores.append(Score("must_not_contain", "1", float(ok), ok, reason))
    return scores
