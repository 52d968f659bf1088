"""Scorers: judgements of trials, from 0 to 1, with a reason."""

from .runtime import Score, score_replies

__all__ = ["Score", "score_replies"]
