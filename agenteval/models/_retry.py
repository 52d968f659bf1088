"""When a model call is sent again: after a 429 (honouring ``Retry-After``), a 5xx or 529, or a failed connection;
never after an exhausted quota or a bad request; at most ``max_retries`` times, with jittered exponential backoff."""

from __future__ import annotations

import dataclasses
import random

from ..run._failures import LLM_ERROR, QUOTA_EXHAUSTED, RATE_LIMITED, ProviderError, failure_status, provider_error
from ..run._options import DEFAULT_MAX_RETRIES
from ._types import CONNECTION, RATE_LIMIT, SERVER_ERROR

DEFAULT_BASE_DELAY = 0.5
DEFAULT_MAX_DELAY = 30.0
"""The longest backoff, and the longest ``Retry-After`` honoured: a provider asking for more is waited this long."""


@dataclasses.dataclass(frozen=True)
class RetryPolicy:
    """Bounded retries with backoff: ``base_delay * 2**n`` with full jitter, capped at ``max_delay``."""

    max_retries: int = DEFAULT_MAX_RETRIES
    base_delay: float = DEFAULT_BASE_DELAY
    max_delay: float = DEFAULT_MAX_DELAY

    def decide(self, exc: BaseException, retries: int, rng: random.Random) -> Retry | None:
        """How long to wait before sending again, and why; None when ``exc`` is not retried (or no longer)."""
        found = provider_error(exc)
        if found is None or not _transient(found) or retries >= self.max_retries:
            return None
        # An error sent inside a stream is waited on as the status it stands for (a stream's overloaded_error as a
        # 529), not as the 200 the stream began with or as a failed connection.
        status = failure_status(exc)
        reason = RATE_LIMIT if found.type == RATE_LIMITED else SERVER_ERROR if status else CONNECTION
        if found.retry_after is not None:
            # The provider's own figure, with a little jitter so that callers told the same do not return at once.
            seconds = min(found.retry_after, self.max_delay) * (1 + 0.1 * rng.random())
            return Retry(seconds, reason, status, True)
        backoff = min(self.max_delay, self.base_delay * 2**retries)
        return Retry(backoff * (0.5 + 0.5 * rng.random()), reason, status, False)


@dataclasses.dataclass(frozen=True)
class Retry:
    seconds: float
    reason: str
    status: int | None
    retry_after: bool


def _transient(found: ProviderError) -> bool:
    if found.type == QUOTA_EXHAUSTED:
        return False  # never retried: waiting does not bring credit back
    return found.type == RATE_LIMITED or (found.type == LLM_ERROR and found.infrastructure)
