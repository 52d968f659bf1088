"""Scorers: judgements of trials, from 0 to 1, with a reason, computed from the trials' spans."""

from ._base import Score, Scorer, batch_scorer, scorer
from ._builtin import (
    BUILTIN_SCORERS,
    answer_match,
    must_contain,
    must_not_contain,
    reply_length,
    retrieval_recall,
    step_efficiency,
    tool_error_handling,
    tool_use,
    trajectory_order,
    unknown_answer,
)
from ._features import ToolCall, TrialFeatures
from ._loading import load_scorers
from ._rescore import RescoreResult, rescore
from ._traces import TracePolicy, TraceScorer, TraceScoreResult, score_traces, tool_errors

__all__ = [
    "BUILTIN_SCORERS",
    "RescoreResult",
    "Score",
    "Scorer",
    "TracePolicy",
    "TraceScoreResult",
    "TraceScorer",
    "ToolCall",
    "TrialFeatures",
    "answer_match",
    "batch_scorer",
    "load_scorers",
    "must_contain",
    "must_not_contain",
    "reply_length",
    "rescore",
    "retrieval_recall",
    "score_traces",
    "scorer",
    "step_efficiency",
    "tool_errors",
    "tool_error_handling",
    "tool_use",
    "trajectory_order",
    "unknown_answer",
]
