"""Agents whose attempts at one case answer differently, on a schedule the case's input spells out."""

from __future__ import annotations

import threading
from collections.abc import Callable


def answering_by_attempt(answer: Callable[[str, int], str]) -> Callable[[str], str]:
    """A sync agent that answers the n-th attempt at a message (counted from 0) with ``answer(message, n)``; counted
    under a lock, as trials run at once."""
    calls: dict[str, int] = {}
    lock = threading.Lock()

    def agent(message: str) -> str:
        with lock:
            attempt = calls.get(message, 0)
            calls[message] = attempt + 1
        return answer(message, attempt)

    return agent
