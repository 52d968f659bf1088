"""A failed model call traced by another instrumentation only is typed from its stored trace as it was live.

OpenInference, OpenLLMetry, the official OpenAI instrumentation and the anthropic SDK's own tracing record no
``agenteval.provider_error.*``: what they do record (the SDK's class name, a status in the message or in
``http.response.status_code``, the provider's error type) is read instead (:mod:`agenteval.run._recorded`). Each
instrumentation runs for real in a process of its own (tests/foreign_failures.py) around the real SDK client against
the loopback model server.
"""

from __future__ import annotations

import json
import pathlib
import subprocess
import sys

import pytest
from foreign_failures import INSTRUMENTATIONS

HERE = pathlib.Path(__file__).parent
OPENAI_STREAMED = {
    f"{code}-streamed"
    for code in ("rate_limit_exceeded", "insufficient_quota", "context_length_exceeded", "invalid_api_key")
    + ("server_error", "400")
}
UNSAID = {
    "openinference-openai": OPENAI_STREAMED,
    "opentelemetry-openai-v2": OPENAI_STREAMED,
    "openllmetry-openai": OPENAI_STREAMED,
}
"""Failures the instrumentation's span says nothing of: an error the OpenAI SDK raises from inside a stream (an
``openai.APIError`` with the error's message alone) is recorded by OpenInference and the official instrumentation
without its status, code or type, and by OpenLLMetry not at all (its span ends OK). Typed by what is left, never
as the live one."""


@pytest.mark.parametrize("instrumentation", sorted(INSTRUMENTATIONS))
def test_each_failure_recorded_by_another_instrumentation_is_typed_as_it_was_live(tmp_path, instrumentation):
    done = subprocess.run(
        [sys.executable, str(HERE / "foreign_failures.py"), instrumentation, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=300,
        cwd=HERE,
    )
    assert done.returncode == 0, done.stderr
    calls = [json.loads(line) for line in done.stdout.splitlines()]
    assert len(calls) == 2 * (len([e for e in calls if e["case"].endswith("-plain")]))
    differ = {c["case"] for c in calls if c["recorded"] != c["live"]}
    assert differ == UNSAID.get(instrumentation, set()), [c for c in calls if c["case"] in differ]
