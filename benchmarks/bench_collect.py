"""``agenteval collect`` throughput: spans per second received over OTLP and written to the store.

Client processes (``--clients``, 2 by default) send prepared OTLP requests of 512 spans (the SDK's batch size),
encoded beforehand by the SDK's own OTLP encoder, so the clients cost little and the collector is what is
measured. Every request holds other traces (one template, its trace ids renumbered): the collector stores a
request sent again only once. Timed: from the first request to the collector's graceful stop, when every span is
published in Parquet files (so decoding, the write queue, encoding to Arrow and the Parquet writer are all inside). The
spans are production-shaped: an agent turn, a model call with usage, two tool calls, 4-8 attributes each, a
service resource, no experiment. The target, from the issue: at least 100,000 spans/s over HTTP protobuf.

    python benchmarks/bench_collect.py [--spans 204800] [--repeats 5] [--clients 2] [--protocols http grpc]
                                       [--workers 1 2] [--scope agenteval_instrumentation]

Each protocol is measured with each number of HTTP worker processes (``Collector(workers=N)``; gRPC is
always received by the collector's own process, so it is measured with one), in turns within each repeat.
The collector shares the machine's cores with the clients; on the project's 2-core machine class, that is
the set-up a deployment beside its agents would see. The collector's CPU counts its worker processes.
"""

from __future__ import annotations

import argparse
import http.client
import multiprocessing
import os
import shutil
import statistics
import tempfile
import time
from pathlib import Path

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind, Status, StatusCode

from agenteval.collect import Collector
from agenteval.store import Store
from agenteval_instrumentation import attributes as A

BATCH = 512
TARGET = 100_000
OWN_SCOPE = "agenteval_instrumentation"
"""agenteval's own spans, which collect stores as they come; another instrumentation's are masked on intake."""


def request_bodies(count: int, scope: str = OWN_SCOPE) -> list[bytes]:
    """``count`` OTLP requests of 512 production-shaped spans (128 traces of 4) each: one template whose trace ids
    are renumbered in each, so no two requests are the same."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

    template = ExportTraceServiceRequest.FromString(request_body(scope))
    bodies = []
    for number in range(count):
        request = ExportTraceServiceRequest()
        request.CopyFrom(template)
        suffix = number.to_bytes(4, "big")
        for resource_spans in request.resource_spans:
            for scope_spans in resource_spans.scope_spans:
                for span in scope_spans.spans:
                    span.trace_id = span.trace_id[:12] + suffix
        bodies.append(request.SerializeToString())
    return bodies


def request_body(scope: str = OWN_SCOPE) -> bytes:
    """One OTLP request of 512 production-shaped spans (128 traces of 4) of instrumentation ``scope``."""
    memory = InMemorySpanExporter()
    provider = TracerProvider(resource=Resource({"service.name": "support-bot", "deployment.environment": "prod"}))
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer(scope)
    for n in range(BATCH // 4):
        with tracer.start_as_current_span(
            "invoke_agent support-bot", kind=SpanKind.SERVER, attributes={A.GEN_AI_OPERATION_NAME: "invoke_agent"}
        ):
            with tracer.start_as_current_span(
                "chat gpt-4o-mini",
                kind=SpanKind.CLIENT,
                attributes={
                    A.GEN_AI_OPERATION_NAME: "chat",
                    A.GEN_AI_PROVIDER_NAME: "openai",
                    A.GEN_AI_REQUEST_MODEL: "gpt-4o-mini",
                    A.GEN_AI_RESPONSE_MODEL: "gpt-4o-mini-2024-07-18",
                    A.GEN_AI_USAGE_INPUT_TOKENS: 120 + n,
                    A.GEN_AI_USAGE_OUTPUT_TOKENS: 30,
                    A.GEN_AI_RESPONSE_FINISH_REASONS: ("tool_calls",),
                    A.GEN_AI_INPUT_MESSAGES: f'[{{"role": "user", "parts": [{{"type": "text", "content": "q{n}"}}]}}]',
                },
            ):
                pass
            with tracer.start_as_current_span(
                "execute_tool lookup",
                attributes={
                    A.GEN_AI_OPERATION_NAME: "execute_tool",
                    A.GEN_AI_TOOL_NAME: "lookup",
                    A.GEN_AI_TOOL_CALL_ID: f"call_{n}",
                    A.GEN_AI_TOOL_CALL_ARGUMENTS: f'{{"order": {n}}}',
                    A.GEN_AI_TOOL_CALL_RESULT: '{"status": "shipped"}',
                },
            ):
                pass
            with tracer.start_as_current_span(
                "execute_tool refund",
                attributes={A.GEN_AI_OPERATION_NAME: "execute_tool", A.GEN_AI_TOOL_NAME: "refund"},
            ) as failed:
                failed.set_attribute(A.ERROR_TYPE, "PermissionError")
                failed.set_status(Status(StatusCode.ERROR, "not allowed"))
    return encode_spans(memory.get_finished_spans()).SerializeToString()


def http_client(endpoint: str, bodies: list[bytes], start: multiprocessing.synchronize.Event) -> None:
    host, port = endpoint.split("//")[1].split("/")[0].split(":")
    connection = http.client.HTTPConnection(host, int(port), timeout=60)
    start.wait()
    for body in bodies:
        while True:
            connection.request("POST", "/v1/traces", body, {"Content-Type": "application/x-protobuf"})
            response = connection.getresponse()
            response.read()
            if response.status == 200:
                break
            if response.status != 503:
                raise RuntimeError(f"HTTP {response.status}")
            time.sleep(float(response.getheader("Retry-After", "1")))


def grpc_client(target: str, bodies: list[bytes], start: multiprocessing.synchronize.Event) -> None:
    import grpc

    with grpc.insecure_channel(target) as channel:
        export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
        start.wait()
        for body in bodies:
            while True:
                try:
                    export(body, timeout=60)
                    break
                except grpc.RpcError as error:
                    if error.code() != grpc.StatusCode.UNAVAILABLE:
                        raise
                    time.sleep(1)


def run_once(
    protocol: str, bodies: list[bytes], spans: int, clients: int, warm_up: float, workers: int = 1
) -> tuple[float, float, int]:
    """Seconds from the first request to the last span published, the collector's CPU seconds (its process
    and its workers: the clients are others), and the requests it refused as busy."""
    store = Path(tempfile.mkdtemp())
    requests = spans // BATCH // clients
    context = multiprocessing.get_context("spawn")
    start = context.Event()
    try:
        grpc_port = 0 if protocol == "grpc" else None
        collector = Collector(store, port=0, grpc_port=grpc_port, workers=workers).start()
        target, client = (
            (f"127.0.0.1:{collector.grpc_port}", grpc_client)
            if protocol == "grpc"
            else (collector.http_endpoint, http_client)
        )
        shares = [bodies[k * requests : (k + 1) * requests] for k in range(clients)]
        processes = [context.Process(target=client, args=(target, share, start)) for share in shares]
        for process in processes:
            process.start()
        time.sleep(warm_up)  # the clients start, connect and wait at the start line (not timed)
        began, cpu = time.perf_counter(), collector_cpu(collector)
        start.set()
        for process in processes:
            process.join()
        cpu = collector_cpu(collector) - cpu  # the workers' before they exit
        collector.stop()
        elapsed = time.perf_counter() - began
        if any(p.exitcode for p in processes):
            raise RuntimeError("a client failed")
        (row,) = Store(store).rows("SELECT count(*) AS n FROM spans")
        if row["n"] != requests * clients * BATCH:
            raise RuntimeError(f"count in {requests * clients * BATCH} != count out {row['n']}")
        return elapsed, cpu, collector.stats().requests_refused
    finally:
        shutil.rmtree(store, ignore_errors=True)


def collector_cpu(collector: Collector) -> float:
    """CPU seconds of this process and of the collector's worker processes so far."""
    total = time.process_time()
    for pid in collector.worker_pids():
        with open(f"/proc/{pid}/stat") as stat:
            fields = stat.read().rsplit(")", 1)[1].split()
        total += (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    return total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spans", type=int, default=400 * BATCH)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--clients", type=int, default=2)
    parser.add_argument("--protocols", nargs="+", choices=["http", "grpc"], default=["http", "grpc"])
    parser.add_argument("--workers", nargs="+", type=int, default=[1, 2], help="HTTP worker processes to measure")
    parser.add_argument("--warm-up", type=float, default=1.0, help="seconds for the clients to start (not timed)")
    parser.add_argument(
        "--scope", default=OWN_SCOPE, help="the spans' instrumentation scope: another's has its secrets masked"
    )
    options = parser.parse_args()
    spans = options.spans // BATCH // options.clients * options.clients * BATCH
    bodies = request_bodies(spans // BATCH, options.scope)
    sides = [(p, w) for p in options.protocols for w in (options.workers if p == "http" else [1])]
    runs: dict[tuple[str, int], list[tuple[float, float, int]]] = {side: [] for side in sides}
    for _ in range(options.repeats):
        for protocol, workers in sides:
            runs[protocol, workers].append(run_once(protocol, bodies, spans, options.clients, options.warm_up, workers))
    for (protocol, workers), measured in runs.items():
        times = [r[0] for r in measured]
        rate = spans / statistics.median(times)
        low, high = spans / max(times), spans / min(times)
        cpu = statistics.median(r[1] for r in measured) / spans * 1e6
        print(
            f"{protocol:5} {workers} process{'es' if workers > 1 else '  '} {rate:>10,.0f} spans/s "
            f"({low:,.0f}-{high:,.0f})  {rate / TARGET:.2f}x the {TARGET:,} spans/s target  "
            f"(median of {options.repeats}, {spans:,} spans, {options.clients} client processes)"
        )
        print(
            f"      collector CPU {cpu:.2f} µs/span (all its threads and workers; {1e6 / cpu:,.0f} spans per "
            f"CPU-second); requests refused as busy: {sum(r[2] for r in measured)}"
        )


if __name__ == "__main__":
    main()
