"""A real `agenteval dashboard` process on loopback, for the dashboard's HTTP and browser tests, and the store
they read: real runs of the mock agent, and a run whose replies and case ids carry script and markup payloads."""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

from agenteval.run import evaluate

PAYLOAD = '<script>window.__pwned = 1</script><img src=x onerror="window.__pwned = 2">'
"""What the injected agent says, and what its cases' ids and questions carry: none of it may run."""

INJECTED_AGENT = f"""
from agenteval import tool


@tool
def fetch_review(product: str) -> str:
    return {PAYLOAD!r} + " Rating: 4 out of 5"


async def answer(question: str) -> str:
    fetch_review(question)
    return {PAYLOAD!r} + " 4"
"""

START_WAIT_SECONDS = 60.0
"""How long the server may take to say where it listens (a bound on a wait, not an assertion on speed)."""


def make_store(root: Path) -> dict[str, str]:
    """A store with two runs of the mock agent on one dataset (to compare) and one injected run; their ids."""
    store = root / "store"

    def mock(seed: int, wrong_rate: float, fail_rate: float = 0.0) -> str:
        options = {"wrong_rate": str(wrong_rate), "fail_rate": str(fail_rate), "seed": str(seed)}
        return evaluate(
            "mock", "arithmetic", cases=60, attempts=2, store=store, progress="none", agent_options=options
        ).id

    baseline = mock(1, 0.05)
    candidate = mock(2, 0.35, 0.1)
    dataset = root / "injected.jsonl"
    cases = [
        {"id": f"{PAYLOAD}-{n}", "input": f"Review {n}: {PAYLOAD}", "expected_output": "4", "category": "injection"}
        for n in range(3)
    ]
    dataset.write_text("".join(json.dumps(c) + "\n" for c in cases))
    agent = root / "injected_agent.py"
    agent.write_text(INJECTED_AGENT)
    injected = evaluate(f"{agent}:answer", dataset, attempts=1, store=store, progress="none").id
    return {"store": str(store), "baseline": baseline, "candidate": candidate, "injected": injected}


@contextlib.contextmanager
def dashboard(store: str, *options: str) -> Iterator[str]:
    """Run `agenteval dashboard --port 0` on ``store`` and yield the address it printed; stopped on exit."""
    with dashboard_process(store, *options) as (address, _):
        yield address


@contextlib.contextmanager
def dashboard_process(store: str, *options: str) -> Iterator[tuple[str, subprocess.Popen[str]]]:
    """:func:`dashboard`, yielding the process too (to read its memory)."""
    command = [sys.executable, "-m", "agenteval.cli", "dashboard", "--store", store, "--port", "0", *options]
    process = subprocess.Popen(
        command,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    assert process.stderr is not None
    try:
        address = _address(process)
        yield address.split("?")[0], process
    finally:
        process.terminate()
        try:
            process.wait(timeout=20)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _address(process: subprocess.Popen[str]) -> str:
    assert process.stderr is not None
    selector = selectors.DefaultSelector()
    selector.register(process.stderr, selectors.EVENT_READ)
    seen = []
    while selector.select(timeout=START_WAIT_SECONDS):
        line = process.stderr.readline()
        if not line:
            break
        seen.append(line)
        if line.startswith("agenteval dashboard at "):
            return line.split()[3]
    raise AssertionError("the dashboard did not start:\n" + "".join(seen))
