"""OpenTelemetry's zero-code set-up (`opentelemetry-instrument`) with the commands the guides give, run as written
in real processes: the Parquet exporter alone (docs/export.md), and a Python agent sending OTLP straight to
`agenteval collect` (README.md, docs/collect.md)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from importlib.metadata import entry_points
from pathlib import Path

import pytest

from agenteval.collect import Collector
from agenteval.store import Store

ROOT = Path(__file__).resolve().parents[1]
GUIDES = {
    "exporter alone": ("docs/export.md", "OTEL_TRACES_EXPORTER=agenteval_parquet opentelemetry-instrument"),
    "README": ("README.md", "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318"),
    "collect guide": ("docs/collect.md", "OTEL_EXPORTER_OTLP_ENDPOINT=http://127.0.0.1:4318"),
}
AGENT = """\
from agenteval import agent, tool


@tool
def add(a: int, b: int) -> int:
    return a + b


@agent(name="adder")
def adder(question: str) -> str:
    return str(add(1, 2))


adder("What is 1 + 2?")
"""
SPANS = ["execute_tool add", "invoke_agent adder"]


def block(guide: str) -> str:
    """The shell block of the guide's page that holds its marker."""
    page, marker = GUIDES[guide]
    (found,) = [b for b in re.findall(r"```sh\n(.*?)```", (ROOT / page).read_text(), flags=re.S) if marker in b]
    return found


def commands(text: str) -> str:
    """The block's lines that set up and run the agent, as a script: continuations joined, comments dropped."""
    lines = [line.split(" #")[0].strip() for line in text.replace("\\\n", " ").splitlines()]
    wanted = [line for line in lines if "opentelemetry-instrument" in line or line.startswith("export OTEL_")]
    return "\n".join(re.sub(r"\s+", " ", line) for line in wanted)


def run_as_written(script: str, cwd: Path) -> None:
    (cwd / "app.py").write_text(AGENT)
    (cwd / "my_agent.py").write_text(AGENT)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "AGENTEVAL_"))}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{env.get('PATH', '')}"
    done = subprocess.run(["bash", "-c", script], cwd=cwd, env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stdout + done.stderr


def span_names(store: Path) -> list[str]:
    return [row["name"] for row in Store(store).rows("SELECT name FROM spans ORDER BY name")]


@pytest.mark.parametrize("guide", sorted(GUIDES))
def test_the_guides_name_what_sets_the_sdk_up(guide):
    """`opentelemetry-instrument` alone installs no SDK: the distribution with the configurator must be named."""
    (configurator,) = entry_points(group="opentelemetry_configurator")
    assert configurator.dist is not None
    assert re.search(rf"pip install [^\n]*\b{re.escape(configurator.dist.name)}\b", block(guide)), guide


def test_the_parquet_exporter_alone_writes_the_store(tmp_path):
    """docs/export.md's command: no agenteval code but the decorators, the spans in ./.agenteval."""
    run_as_written(commands(block("exporter alone")), tmp_path)
    assert span_names(tmp_path / ".agenteval") == SPANS


@pytest.mark.parametrize("guide", ["README", "collect guide"])
def test_a_python_agent_sends_otlp_straight_to_collect(guide, tmp_path):
    """The variables as the guide sets them, on the collector's port: the Python distro's exporter defaults to
    gRPC, which the HTTP port refused, and a plain `python my_agent.py` sent nothing."""
    store = tmp_path / "store"
    with Collector(store, port=0, grpc_port=None) as collector:
        run_as_written(commands(block(guide)).replace(":4318", f":{collector.http_port}"), tmp_path)
    assert span_names(store) == SPANS
