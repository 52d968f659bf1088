"""Numbers read from environment variables: the one reader for every ``AGENTEVAL_*`` number setting."""

from __future__ import annotations

import os

from agenteval_instrumentation.masking import masked_logger

logger = masked_logger(__name__)


def env_number(name: str, default: float, kind: type = float) -> float:
    """The number in environment variable ``name`` (as ``kind``), or ``default`` when it is unset, empty, or not a
    number (then said once in the log, rather than failing the application that set it)."""
    raw = os.environ.get(name)
    if not raw:
        return default
    try:
        return kind(raw)
    except ValueError:
        logger.warning("agenteval: ignoring %s=%r, not a number; using %s", name, raw, default)
        return default
