"""The collector's defaults: ports, limits, the token's environment variable. Apart from the server so that
the command line reads them without loading gRPC or pyarrow."""

from __future__ import annotations

DEFAULT_HOST = "127.0.0.1"
DEFAULT_HTTP_PORT = 4318
"""OTLP/HTTP's standard port: an OpenTelemetry SDK's default ``http/protobuf`` endpoint reaches it unchanged."""
DEFAULT_GRPC_PORT = 4317
"""OTLP/gRPC's standard port."""
BEHIND_COLLECTOR_PORT = 4319
"""The HTTP port ``collect`` takes behind an OpenTelemetry Collector, which holds 4317 and 4318 itself
(collector-config.yaml sends to it)."""
ENV_TOKEN = "AGENTEVAL_COLLECT_TOKEN"
DEFAULT_MAX_BODY_BYTES = 20 * 1024 * 1024
"""A request's largest body, compressed or not (the OpenTelemetry Collector's own default)."""
DEFAULT_BODY_TIMEOUT = 30.0
"""Seconds a request's body may take to arrive whole, from the end of its headers (408 past it): three times the
OpenTelemetry exporters' own 10 s export timeout, by when a sender has given up on its request anyway; a 20 MiB body
needs 700 KB/s to make it."""
MAX_SPAN_ATTRIBUTES = 1024
"""Attributes kept per span and per event, the first ones sent; the others are dropped and counted in the span's
(or the event's) ``agenteval.dropped_attributes_count``. OpenTelemetry's SDKs keep 128 by default and its Collector
keeps all; a receiver meant to store what it is sent keeps eight times the SDKs' default (flattened message
attributes, such as OpenLLMetry's ``gen_ai.prompt.N.*``, fit), while one span of 1.5 million attributes no longer
costs a minute of CPU and a row no query can read."""
MAX_SPAN_EVENTS = 1024
"""Events kept per span, the first ones sent; the others are dropped and counted in the span's
``agenteval.dropped_events_count``. Resource attributes are kept up to :data:`MAX_SPAN_ATTRIBUTES` likewise, the
number dropped in the resource's ``agenteval.dropped_attributes_count``. A 7 MB request of one span with 300,000
events and a resource of 200,000 attributes had cost 4.9 s of CPU and 250 MB."""
DEFAULT_MAX_QUEUED_SPANS = 200_000
"""Spans decoded and acknowledged but not yet handed to the writer, before requests are refused."""
DEFAULT_MAX_CONNECTIONS = 256
"""Open HTTP connections at once (a thread each); more are closed as they arrive."""
LISTEN_BACKLOG = 4096
"""Connections the kernel holds for the collector to accept (capped by ``net.core.somaxconn``): socketserver's
default of 5 reset 38 of 64 senders that connected at once."""
RETRY_AFTER_SECONDS = 1
"""What a refused client is told to wait."""
DEFAULT_SCORE_DELAY = 5.0
"""With online scoring: seconds between a trace's root span being written and the trace being scored (its
children sent by other processes or in later requests have arrived by then)."""


def is_loopback(host: str) -> bool:
    """Whether ``host`` is a loopback address (``localhost`` counts; any other name does not)."""
    if host == "localhost":
        return True
    import ipaddress  # here, not at the top: `agenteval --help` reads this module and never needs it

    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False  # a name: it may resolve to anything
