"""Shared fixtures: one real SDK TracerProvider for the session, spans read back in memory."""

from __future__ import annotations

import pytest
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

_exporter = InMemorySpanExporter()
_provider = TracerProvider()
_provider.add_span_processor(SimpleSpanProcessor(_exporter))
trace.set_tracer_provider(_provider)


@pytest.fixture
def spans():
    """The finished spans of this test, read through the SDK's in-memory exporter."""
    _exporter.clear()
    yield _exporter
    _exporter.clear()


@pytest.fixture
def provider() -> TracerProvider:
    return _provider


@pytest.fixture(autouse=True)
def _isolated_store(tmp_path, monkeypatch):
    """Every test gets its own store folder, never the working directory's."""
    monkeypatch.setenv("AGENTEVAL_STORE", str(tmp_path / "store"))
