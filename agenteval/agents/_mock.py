"""The mock agent: answers arithmetic through a simulated model call and a real calculator tool call.

Its rates of wrong answers, failures and its latency are options, so the harness and its
statistics can be checked against a known truth. It is deterministic: the same seed, question
and attempt number give the same behaviour.
"""

from __future__ import annotations

import asyncio
import dataclasses
import random
import re
import threading
from typing import Any

from agenteval_instrumentation import llm_call, tool

from ..errors import UsageError
from ..tools._calculator import calculator, evaluate

FAILURES = ("llm_error", "tool_error", "rate_limit", "quota_exhausted", "empty_output", "hang")
"""What a failing call does: a provider 5xx from the model call, an exception from the tool, an HTTP 429,
a 429 with ``insufficient_quota``, an empty reply, or waiting far past any timeout."""

NOT_ARITHMETIC = "I can only answer arithmetic questions, so I don't know."
_QUESTION = re.compile(r"(-?\d+(?:\.\d+)?)\s*([-+*/×÷x])\s*(-?\d+(?:\.\d+)?)")


class MockProviderError(Exception):
    """An error shaped like the OpenAI SDK's ``APIStatusError``: ``status_code``, ``code``, ``headers``."""

    def __init__(self, message: str, status_code: int, code: str | None = None, retry_after: float | None = None):
        super().__init__(message)
        self.status_code = status_code
        self.code = code
        self.headers = {"retry-after": str(retry_after)} if retry_after is not None else {}


class MockToolError(RuntimeError):
    """The mock's tool step failed."""


@dataclasses.dataclass
class MockAgent:
    """Call with the user's message (awaitable); returns the reply text."""

    wrong_rate: float = 0.0
    """Share of answers that are off by a small amount."""
    fail_rate: float = 0.0
    """Share of calls that fail the way ``failure`` says."""
    failure: str = "llm_error"
    latency: float = 0.0
    """Seconds each simulated model call takes."""
    jitter: float = 0.0
    """Up to this many seconds more, drawn uniformly."""
    seed: int = 0
    model: str = "mock-model"
    _calls: dict[str, int] = dataclasses.field(default_factory=dict, init=False, repr=False)
    _lock: threading.Lock = dataclasses.field(default_factory=threading.Lock, init=False, repr=False)

    def __post_init__(self) -> None:
        if self.failure not in FAILURES:
            raise UsageError(f"failure must be one of {', '.join(FAILURES)}, not {self.failure!r}")
        for name in ("wrong_rate", "fail_rate"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise UsageError(f"{name} must be between 0 and 1")

    def _rng(self, message: str) -> random.Random:
        with self._lock:
            attempt = self._calls.get(message, 0)
            self._calls[message] = attempt + 1
        return random.Random(f"{self.seed}:{attempt}:{message}")

    async def __call__(self, message: str) -> str:
        rng = self._rng(message)
        failing = rng.random() < self.fail_rate
        wrong = rng.random() < self.wrong_rate
        delay = self.latency + rng.uniform(0.0, self.jitter) if self.jitter else self.latency
        response = await _plan(message, model=self.model, delay=delay, failure=self.failure if failing else None)
        plan = response["expression"]
        if plan is None:
            return NOT_ARITHMETIC
        if failing and self.failure == "tool_error":
            _failing_tool(plan)
        if failing and self.failure == "empty_output":
            return ""
        value = calculator(plan)
        if wrong:
            value = value + rng.choice((-3, -2, -1, 1, 2, 3))
        return f"The answer is {_format(value)}."


def _format(value: float | int) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


@llm_call(provider="mock")
async def _plan(message: str, *, model: str, delay: float, failure: str | None) -> dict[str, Any]:
    """The simulated model call: reads the arithmetic out of the question, answers like an OpenAI
    chat completion asking for a calculator call, with token counts."""
    if delay:
        await asyncio.sleep(delay)
    if failure == "hang":
        await asyncio.sleep(3600)
    if failure == "llm_error":
        raise MockProviderError("The server had an error while processing your request.", 500)
    if failure == "rate_limit":
        raise MockProviderError("Rate limit reached for requests", 429, "rate_limit_exceeded", retry_after=1.0)
    if failure == "quota_exhausted":
        raise MockProviderError("You exceeded your current quota.", 429, "insufficient_quota")
    match = _QUESTION.search(message)
    expression = None
    if match:
        left, op, right = match.groups()
        expression = f"{left} {'*' if op in 'x×' else '/' if op == '÷' else op} {right}"
    return {
        "id": "mock-completion",
        "model": model,
        "usage": {"prompt_tokens": 24 + len(message.split()), "completion_tokens": 9 if expression else 14},
        "choices": [
            {
                "finish_reason": "tool_calls" if expression else "stop",
                "message": {"role": "assistant", "content": expression or NOT_ARITHMETIC},
            }
        ],
        "expression": expression,
    }


@tool(name="calculator")
def _failing_tool(expression: str) -> None:
    """The calculator given a malformed call, as a confused model might make. The error escapes the tool's own
    span, so a run types the trial ``tool_error``, as a real tool's would be."""
    try:
        evaluate(expression + " +")
    except ValueError as exc:
        raise MockToolError(f"calculator rejected the call: {exc}") from exc


def mock_agent(**options: Any) -> MockAgent:
    """The factory ``--agent mock`` uses: options arrive as strings and are converted by field type."""
    fields = {f.name: f for f in dataclasses.fields(MockAgent) if f.init}
    converted: dict[str, Any] = {}
    for key, value in options.items():
        if key not in fields:
            raise UsageError(f"unknown mock agent option {key!r}; options: {', '.join(fields)}")
        kind = {"float": float, "int": int, "str": str}[str(fields[key].type)]
        try:
            converted[key] = kind(value)
        except ValueError as exc:
            raise UsageError(f"mock agent option {key}: {value!r} is not a {kind.__name__}") from exc
    return MockAgent(**converted)
