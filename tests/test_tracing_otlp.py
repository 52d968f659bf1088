"""setup_tracing: the same spans reach Parquet and a real OTLP/HTTP receiver on loopback."""

from __future__ import annotations

import subprocess
import sys

from agenteval._demo import demo_agent
from agenteval.store import Store
from agenteval.tracing import setup_tracing


def test_same_spans_in_parquet_and_otlp_backend(receiver, spans, tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.endpoint)
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_PROTOCOL", "http/protobuf")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "x-team=evals")
    tracing = setup_tracing(tmp_path / "store")
    try:
        assert tracing.otlp is not None
        for question in ("What is 2 * 21?", "What is 9 - 4?"):
            demo_agent(question)
        assert tracing.flush()
    finally:
        tracing.shutdown()
    stored = Store(tmp_path / "store").rows("SELECT trace_id, span_id, name FROM spans")
    key = lambda row: (row["trace_id"], row["span_id"], row["name"])  # noqa: E731
    assert len(stored) == 6
    assert sorted(map(key, receiver.spans)) == sorted(map(key, stored))
    assert receiver.headers_seen[0]["x-team"] == "evals"
    # The provider the application had already installed keeps its own exporter and parent links.
    in_memory = spans.get_finished_spans()
    assert sorted((format(s.context.span_id, "016x")) for s in in_memory) == sorted(r["span_id"] for r in stored)


def test_without_otlp_variables_only_parquet_is_configured(tmp_path, monkeypatch):
    for variable in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(variable, raising=False)
    tracing = setup_tracing(tmp_path / "store")
    tracing.shutdown()
    assert tracing.otlp is None and len(tracing.processors) == 1


def test_installs_its_own_provider_when_none_is_set(tmp_path):
    script = f"""
from opentelemetry import trace
from agenteval.tracing import setup_tracing
from agenteval._demo import demo_agent
from agenteval.store import Store
tracing = setup_tracing({str(tmp_path / "store")!r}, service_name="my-agent")
assert trace.get_tracer_provider() is tracing.provider
demo_agent("What is 1 + 1?")
tracing.flush()
rows = Store({str(tmp_path / "store")!r}).rows("SELECT DISTINCT service_name FROM spans")
print(rows)
"""
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=60)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "[{'service_name': 'my-agent'}]"


def test_setting_up_twice_writes_each_span_once(tmp_path, monkeypatch):
    for variable in ("OTEL_EXPORTER_OTLP_ENDPOINT", "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"):
        monkeypatch.delenv(variable, raising=False)
    first = setup_tracing(tmp_path / "store")
    second = setup_tracing(tmp_path / "store")
    try:
        assert second is first
        demo_agent("What is 3 * 3?")
        first.flush()
    finally:
        first.shutdown()
    rows = Store(tmp_path / "store").rows("SELECT count(*) AS n, count(DISTINCT span_id) AS d FROM spans")
    assert rows == [{"n": 3, "d": 3}]
    # After shutdown a new setup is a new one, not the stopped one.
    third = setup_tracing(tmp_path / "store")
    third.shutdown()
    assert third is not first
