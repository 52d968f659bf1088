"""Exceptions carry content. With capture off, no user content and no secret reaches the store through
an exception (span events, status messages, trial rows): the failure keeps its type, the message is
replaced, the stack trace keeps its frames only. With capture on, secrets in messages are masked."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import pyarrow.parquet as pq
import pytest

from agenteval import llm_call, tool
from agenteval.dataset import Case, Dataset
from agenteval.run import evaluate
from agenteval.store import Store
from agenteval_instrumentation import capture, configure_capture

USER_TEXT = "Zebulon Quagmire, account 4471-PLANTED"
SECRET = "sk-proj-PLANTEDsecret0123456789abcdef"
AWS_KEY_ID = "AKIAPLANTED234567890"


class BadRequest(Exception):
    status_code = 400


@tool
def lookup_customer(name: str) -> str:
    raise LookupError(f"no customer {USER_TEXT} with key {SECRET}")


@llm_call(model="m")
def ask_model(prompt: str) -> str:
    raise BadRequest(f"invalid prompt {prompt!r}; Authorization: Bearer {SECRET}")


def agent(question: str) -> str:
    if question == "tool":
        return lookup_customer(USER_TEXT)
    if question == "model":
        return ask_model(f"about {USER_TEXT}")
    try:
        lookup_customer(USER_TEXT)
    except LookupError as error:  # chained: the tool's message is in the agent's traceback too
        raise ValueError(f"cannot answer {USER_TEXT} using {AWS_KEY_ID}") from error
    return "unreachable"


DATASET = Dataset(
    "private",
    "private(test)",
    "hash-private",
    [Case(id=q, input=q, expected_output="x") for q in ("tool", "model", "agent")],
)
EXPECTED_FAILURES = {"tool": "tool_error", "model": "llm_error", "agent": "agent_error"}


@pytest.fixture(autouse=True)
def _restore_capture(monkeypatch):
    monkeypatch.delenv(capture.ENV_CAPTURE_CONTENT, raising=False)
    saved = dataclasses.replace(capture.config)
    yield
    for field in dataclasses.fields(saved):
        setattr(capture.config, field.name, getattr(saved, field.name))


def stored_text(store: Path) -> str:
    """Every column of every row of every Parquet file under the store, as text, plus every other file."""
    parts = []
    for path in sorted(store.rglob("*")):
        if path.suffix == ".parquet":
            parts.append(json.dumps(pq.read_table(path).to_pylist(), default=str, ensure_ascii=False))
        elif path.is_file():
            parts.append(path.read_bytes().decode("utf-8", "replace"))
    return "\n".join(parts)


def run(tmp_path: Path) -> tuple[Path, dict[str, dict]]:
    store = tmp_path / "store"
    experiment = evaluate(agent, DATASET, attempts=1, concurrency=1, store=store, progress="none")
    trials = Store(store).rows(
        "SELECT case_id, failure_type, error_message FROM trials WHERE experiment_id = ?", [experiment.id]
    )
    return store, {t["case_id"]: t for t in trials}


def exception_events(store: Path) -> list[dict]:
    rows = Store(store).rows("SELECT name, status_message, events FROM spans WHERE status_code = 'ERROR'")
    return [{**row, "events": json.loads(row["events"])} for row in rows]


def test_capture_off_keeps_user_content_and_secrets_out_of_every_table(tmp_path):
    configure_capture(enabled=False)
    store, trials = run(tmp_path)
    assert {case: t["failure_type"] for case, t in trials.items()} == EXPECTED_FAILURES
    text = stored_text(store)
    for planted in (USER_TEXT, "Zebulon", "4471-PLANTED", SECRET, "PLANTEDsecret", AWS_KEY_ID):
        assert planted not in text
    assert trials["agent"]["error_message"] == "ValueError: <message not captured>"

    failed = exception_events(store)
    # Three trial roots, the tool that failed twice and the model call.
    assert sorted(row["name"] for row in failed) == [
        "chat m",
        "execute_tool lookup_customer",
        "execute_tool lookup_customer",
        "invoke_agent agent",
        "invoke_agent agent",
        "invoke_agent agent",
    ]
    for row in failed:
        (event,) = [e for e in row["events"] if e["name"] == "exception"]
        attributes = event["attributes"]
        assert attributes["exception.message"] == capture.NOT_CAPTURED
        assert row["status_message"].endswith(": <message not captured>")
        # The frames stay, so the failure can still be located; the source lines do not.
        assert 'File "' in attributes["exception.stacktrace"] and ", in " in attributes["exception.stacktrace"]
        assert "raise " not in attributes["exception.stacktrace"]


def test_capture_off_with_a_redactor_records_the_redacted_message(spans):
    configure_capture(enabled=False, redactor=lambda attribute, value: str(value).replace(USER_TEXT, "[customer]"))
    with pytest.raises(LookupError):
        lookup_customer("anyone")
    (span,) = spans.get_finished_spans()
    (event,) = span.events
    # The redactor ran, and the key was masked by its shape after it.
    assert event.attributes["exception.message"] == "no customer [customer] with key ***"
    assert span.status.description == "LookupError: no customer [customer] with key ***"
    assert USER_TEXT not in event.attributes["exception.stacktrace"]


def test_capture_on_masks_secrets_in_exception_text_and_keeps_the_rest(tmp_path):
    configure_capture(enabled=True)
    store, trials = run(tmp_path)
    assert {case: t["failure_type"] for case, t in trials.items()} == EXPECTED_FAILURES
    assert trials["agent"]["error_message"] == f"ValueError: cannot answer {USER_TEXT} using ***"
    assert trials["model"]["error_message"].endswith("Authorization: Bearer ***")

    text = stored_text(store)
    for planted in (SECRET, "PLANTEDsecret", AWS_KEY_ID):
        assert planted not in text
    assert USER_TEXT in text  # capture on: the message itself is recorded
    stacktraces = [
        e["attributes"]["exception.stacktrace"]
        for row in exception_events(store)
        for e in row["events"]
        if e["name"] == "exception"
    ]
    assert stacktraces and all("Traceback" in s and "raise " in s for s in stacktraces)  # whole, source lines too
