"""collector-config.yaml is usable as is: every component its pipeline names is defined, no two listeners
share a port (the Collector's own, agenteval collect's behind it, the backends'), and its endpoints are the ones
agenteval and the OpenTelemetry SDK use by default."""

from __future__ import annotations

import re
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import yaml
from opentelemetry.exporter.otlp.proto.http.trace_exporter import DEFAULT_ENDPOINT

from agenteval.collect import BEHIND_COLLECTOR_PORT, DEFAULT_GRPC_PORT, DEFAULT_HTTP_PORT

ROOT = Path(__file__).resolve().parents[1]
TEXT = (ROOT / "collector-config.yaml").read_text()
CONFIG = yaml.safe_load(TEXT)
SECTIONS = ("receivers", "processors", "exporters")


def port_of(endpoint: str) -> int:
    url = urlsplit(endpoint if "//" in endpoint else f"//{endpoint}")
    assert url.port is not None, endpoint
    return url.port


def listeners() -> dict[str, int]:
    """Ports the Collector itself listens on."""
    ports = {
        f"otlp/{name}": port_of(protocol["endpoint"])
        for name, protocol in CONFIG["receivers"]["otlp"]["protocols"].items()
    }
    for number, reader in enumerate(CONFIG["service"]["telemetry"]["metrics"]["readers"]):
        ports[f"telemetry/{number}"] = reader["pull"]["exporter"]["prometheus"]["port"]
    return ports


def test_every_component_a_pipeline_names_is_defined():
    pipelines = CONFIG["service"]["pipelines"]
    assert set(pipelines) == {"traces"}
    for pipeline in pipelines.values():
        for section in SECTIONS:
            assert pipeline[section], f"the pipeline has no {section}"
            for name in pipeline[section]:
                assert name in CONFIG[section], f"{section}: {name} is used but not defined"


def test_memory_limiter_comes_first_then_batch():
    assert CONFIG["service"]["pipelines"]["traces"]["processors"] == ["memory_limiter", "batch"]
    assert (
        CONFIG["processors"]["memory_limiter"]["limit_mib"] > CONFIG["processors"]["memory_limiter"]["spike_limit_mib"]
    )


def test_every_exporter_defined_is_in_the_pipeline_or_its_comment_says_how_to_add_it():
    used = CONFIG["service"]["pipelines"]["traces"]["exporters"]
    for name in CONFIG["exporters"]:
        assert name in used or f"Add {name} to the pipeline" in TEXT, name


def test_no_two_listeners_share_a_port():
    """The Collector's own ports, and those of every process it sends to, are all different."""
    ports = dict(listeners())
    for name, exporter in CONFIG["exporters"].items():
        ports[name] = port_of(exporter["endpoint"])
    assert len(set(ports.values())) == len(ports), ports
    # Phoenix's own gRPC listener defaults to 4317, the Collector's: the config says where to move it.
    assert "PHOENIX_GRPC_PORT=4327" in TEXT and 4327 not in ports.values()


def test_the_front_door_is_where_agents_send_by_default():
    """An SDK told nothing sends http/protobuf to 4318 (agenteval's setup_tracing too) or gRPC to 4317; that is
    this Collector, not agenteval collect, which a Collector config puts on BEHIND_COLLECTOR_PORT."""
    ports = listeners()
    assert ports["otlp/http"] == port_of(DEFAULT_ENDPOINT) == DEFAULT_HTTP_PORT
    assert ports["otlp/grpc"] == DEFAULT_GRPC_PORT
    assert all(
        urlsplit(f"//{p['endpoint']}").hostname == "127.0.0.1"
        for p in CONFIG["receivers"]["otlp"]["protocols"].values()
    )


def test_agenteval_collect_is_reached_where_the_config_says_to_start_it():
    exporter = CONFIG["exporters"]["otlphttp/agenteval"]
    assert exporter["endpoint"] == f"http://127.0.0.1:{BEHIND_COLLECTOR_PORT}"
    assert exporter["compression"] == "gzip"  # collect reads gzip
    (command,) = re.findall(r"agenteval collect --[^\n#]+", TEXT.split("receivers:")[0])
    assert command.split() == ["agenteval", "collect", "--port", str(BEHIND_COLLECTOR_PORT), "--no-grpc"]
    assert BEHIND_COLLECTOR_PORT not in listeners().values()


@pytest.mark.parametrize("doc", ["README.md", "docs/collect.md"])
def test_the_docs_name_the_same_ports(doc):
    text = (ROOT / doc).read_text()
    assert f"agenteval collect --port {BEHIND_COLLECTOR_PORT} --no-grpc" in text
    assert "collector-config.yaml" in text
