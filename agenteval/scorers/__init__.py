"""Scorers: judgements of trials, from 0 to 1, with a reason, computed from the trials' spans."""

from .base import Score, Scorer, batch_scorer, scorer
from .builtin import (
    BUILTIN_SCORERS,
    answer_match,
    must_not_contain,
    retrieval_recall,
    step_efficiency,
    tool_error_handling,
    tool_use,
    trajectory_order,
    unknown_answer,
)
from .engine import Judgement, ScoredTrial, ScoringEngine, case_table, score_table
from .features import TrialFeatures, features_sql
from .loading import load_scorers, scorer_specs

__all__ = [
    "BUILTIN_SCORERS",
    "Judgement",
    "Score",
    "ScoredTrial",
    "Scorer",
    "ScoringEngine",
    "TrialFeatures",
    "answer_match",
    "batch_scorer",
    "case_table",
    "features_sql",
    "load_scorers",
    "score_table",
    "scorer_specs",
    "must_not_contain",
    "retrieval_recall",
    "scorer",
    "step_efficiency",
    "tool_error_handling",
    "tool_use",
    "trajectory_order",
    "unknown_answer",
]
