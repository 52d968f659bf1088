"""A real backend: Arize Phoenix on loopback receives a small run over OTLP/HTTP and OTLP/gRPC, and its own
API shows what a person would see: model calls with parsed messages and tool calls, tools with their
arguments, agents with input and output, a retrieval, tokens counted once, and the evaluation results.

Phoenix runs from its own environment (its dependencies are many and pinned): ``.venv-phoenix``, which the
first run of this test makes, or the Python named by ``AGENTEVAL_PHOENIX_PYTHON``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path

import pytest
from phoenix_agent import REPLIES
from real_parts import PHOENIX, environment
from waiting import wait_until

from agenteval_instrumentation import attributes as A

ROOT = Path(__file__).resolve().parent.parent
pytestmark = pytest.mark.heavy


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _spans(url: str) -> list[dict]:
    """The project's spans; none while Phoenix has not yet made the project (it ingests in the background)."""
    try:
        with urllib.request.urlopen(url, timeout=10) as response:
            return json.load(response)["data"]
    except urllib.error.HTTPError as error:
        if error.code == 404:
            return []
        raise


def _up(url: str) -> bool:
    try:
        with urllib.request.urlopen(url, timeout=2) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError):
        return False


@pytest.fixture(scope="module")
def phoenix(tmp_path_factory):
    python = environment("phoenix", PHOENIX, override="AGENTEVAL_PHOENIX_PYTHON")
    workdir = tmp_path_factory.mktemp("phoenix")
    http, grpc = _free_port(), _free_port()
    env = {
        **os.environ,
        "PHOENIX_HOST": "127.0.0.1",
        "PHOENIX_PORT": str(http),
        "PHOENIX_GRPC_PORT": str(grpc),
        "PHOENIX_WORKING_DIR": str(workdir),
        "PHOENIX_TELEMETRY_ENABLED": "false",
    }
    log = open(workdir / "phoenix.log", "w")
    server = subprocess.Popen(
        [python, str(ROOT / "tests" / "phoenix_launcher.py")], cwd=workdir, env=env, stdout=log, stderr=log
    )
    base = f"http://127.0.0.1:{http}"
    try:
        wait_until(lambda: server.poll() is not None or _up(f"{base}/healthz"), "Phoenix to start", timeout=240)
        assert server.poll() is None, (workdir / "phoenix.log").read_text()[-2000:]
        yield {"base": base, "grpc": f"http://127.0.0.1:{grpc}"}
    finally:
        server.terminate()
        server.wait(timeout=60)
        log.close()


def _run(model_server, store, env):
    """The small run, in a process of its own: agenteval installs its provider there, whose resource reads
    OTEL_RESOURCE_ATTRIBUTES (the project Phoenix files the spans under)."""
    model_server.script(*REPLIES)
    urls = [model_server.openai_url, model_server.anthropic_url]
    done = subprocess.run(
        [sys.executable, str(ROOT / "tests" / "phoenix_agent.py"), *urls, str(store)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_phoenix_shows_the_run(phoenix, model_server, tmp_path, monkeypatch, protocol):
    project = f"agenteval-{protocol.split('/')[0]}"
    endpoint = f"{phoenix['base']}/v1/traces" if protocol == "http/protobuf" else phoenix["grpc"]
    env = {
        **os.environ,
        "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT": endpoint,
        "OTEL_EXPORTER_OTLP_TRACES_PROTOCOL": protocol,
        "OTEL_RESOURCE_ATTRIBUTES": f"openinference.project.name={project}",
    }
    assert _run(model_server, tmp_path / "s", env) == {"spans_sent": 8, "spans_failed": 0}

    url = f"{phoenix['base']}/v1/projects/{project}/spans?limit=100"
    spans = wait_until(lambda: len(found := _spans(url)) == 8 and found, f"8 spans in Phoenix's {project}")
    by_kind: dict[str, list[dict]] = {}
    for span in spans:
        by_kind.setdefault(span["span_kind"], []).append(span)
    assert sorted((k, len(v)) for k, v in by_kind.items()) == [("AGENT", 2), ("LLM", 4), ("RETRIEVER", 1), ("TOOL", 1)]

    decision = next(
        s["attributes"]
        for s in by_kind["LLM"]
        if "llm.tools.0.tool.json_schema" in s["attributes"]
        and "llm.output_messages.0.message.tool_calls.0.tool_call.id" in s["attributes"]
    )
    assert decision["llm.input_messages.0.message.content"] == "What is 2 + 2?"
    assert decision["llm.output_messages.0.message.tool_calls.0.tool_call.function.name"] == "add"
    assert json.loads(decision["llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments"]) == {
        "a": 2,
        "b": 2,
    }
    (answer,) = [
        s["attributes"] for s in by_kind["LLM"] if s["attributes"].get("llm.output_messages.0.message.content") == "4"
    ]
    assert answer["llm.input_messages.2.message.role"] == "tool"
    assert answer["llm.input_messages.1.message.tool_calls.0.tool_call.id"] == "call_1"

    (tool_span,) = by_kind["TOOL"]
    assert tool_span["attributes"]["tool.name"] == "add"
    assert (tool_span["attributes"]["tool.parameters.a"], tool_span["attributes"]["tool.parameters.b"]) == (2, 2)
    (retrieval,) = by_kind["RETRIEVER"]
    assert retrieval["attributes"]["retrieval.documents.0.document.id"] == "doc-arith"

    agents = {s["name"]: s["attributes"] for s in by_kind["AGENT"]}
    calculator = agents["invoke_agent calculator"]
    assert calculator["llm.input_messages.0.message.content"] == "What is 2 + 2?"
    assert calculator["llm.output_messages.0.message.content"] == "4"

    # Tokens once: the anthropic SDK's own span has them, the @llm_call around it none.
    prompt_tokens = sorted(s["attributes"].get("llm.token_count.prompt") or 0 for s in by_kind["LLM"])
    assert prompt_tokens == [0, 7, 20, 30]

    (root_span,) = [s for s in by_kind["AGENT"] if s["parent_id"] is None]
    assert root_span["attributes"][A.TRIAL_OUTCOME] == "passed"
    results = {
        e["attributes"][A.GEN_AI_EVALUATION_NAME]: e["attributes"]
        for e in root_span["events"]
        if e["name"] == A.GEN_AI_EVALUATION_RESULT
    }
    assert results["answer_match"][A.GEN_AI_EVALUATION_SCORE_LABEL] == "pass"
    assert results["tool_use"][A.GEN_AI_EVALUATION_SCORE_VALUE] == 1.0
    assert results["tool_use"][A.GEN_AI_EVALUATION_EXPLANATION]
