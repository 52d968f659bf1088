"""Counts with their noun, singular for one: "1 case", "3 cases"."""

from __future__ import annotations


def counted(count: int, noun: str, nouns: str | None = None) -> str:
    """``count`` then ``noun``, or ``nouns`` (default: ``noun`` + "s") unless the count is 1."""
    return f"{count} {noun if count == 1 else nouns or noun + 's'}"
