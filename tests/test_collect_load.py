"""``agenteval collect`` under load: several client processes with the real OTLP exporter, count in equals count out;
SIGTERM in the middle loses no acknowledged span (with and without HTTP worker processes); a full write queue makes
clients wait (503 with ``Retry-After``, gRPC UNAVAILABLE with RetryInfo), and the real exporters retry until
everything is in."""

from __future__ import annotations

import multiprocessing
import signal
import socket
import subprocess
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import grpc
import pytest
from collect_clients import post, send_spans, synthetic_spans
from google.rpc import code_pb2, status_pb2
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcExporter
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpExporter
from opentelemetry.sdk.trace.export import SpanExportResult
from waiting import wait_until

from agenteval.collect import Collector
from agenteval.store import Store

CLIENTS = 4
SPANS_PER_CLIENT = 25_000


def stored_span_ids(store) -> list[int]:
    return [int(r["span_id"], 16) for r in Store(store).rows("SELECT span_id FROM spans")]


def test_four_client_processes_lose_no_span(tmp_path):
    with Collector(tmp_path / "s", port=0, grpc_port=0) as collector:
        jobs = [(collector.http_endpoint, SPANS_PER_CLIENT, seed, "http/protobuf") for seed in range(1, CLIENTS)] + [
            (f"127.0.0.1:{collector.grpc_port}", SPANS_PER_CLIENT, CLIENTS, "grpc")
        ]
        with multiprocessing.get_context("spawn").Pool(CLIENTS) as pool:
            acknowledged = pool.starmap(send_spans, jobs)
    sent = CLIENTS * SPANS_PER_CLIENT
    assert [len(a) for a in acknowledged] == [SPANS_PER_CLIENT] * CLIENTS
    ids = stored_span_ids(tmp_path / "s")
    assert len(ids) == sent == len(set(ids))  # count in == count out, each span once
    assert set(ids) == {i for a in acknowledged for i in a}
    stats = collector.stats()
    assert (stats.spans_received, stats.spans_written, stats.spans_rejected) == (sent, sent, 0)


@pytest.mark.parametrize("workers", [1, 2])
def test_sigterm_under_load_loses_no_acknowledged_span(tmp_path, workers):
    store = tmp_path / "s"
    command = [sys.executable, "-m", "agenteval.cli", "collect", "--port", "0", "--no-grpc", "--store", str(store)]
    command += ["--workers", str(workers)]
    collector = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = collector.stdout.readline()
        assert "OTLP/HTTP on" in line, line + collector.stderr.read()
        endpoint = line.split(" on ")[1].split(";")[0]
        with multiprocessing.get_context("spawn").Pool(CLIENTS) as pool:
            # Far more than can be sent before the signal: the clients are still sending when it comes.
            running = pool.starmap_async(send_spans, [(endpoint, 400_000, seed) for seed in range(1, CLIENTS + 1)])
            wait_until(lambda: any(store.glob("spans/**/*.parquet")), "the collector's first file")
            collector.send_signal(signal.SIGTERM)
            out, err = collector.communicate(timeout=120)
            acknowledged = running.get(timeout=300)
    finally:
        if collector.poll() is None:
            collector.kill()
    assert collector.returncode == 0, err
    ids = stored_span_ids(store)
    acked = {i for a in acknowledged for i in a}
    assert acked and acked <= set(ids)  # every acknowledged span is stored
    assert len(ids) == len(set(ids))  # and none twice
    assert len(acked) < CLIENTS * 400_000  # the signal came mid-load
    assert f"stopped; {len(ids):,} spans written" in out


@pytest.mark.parametrize("protocol", ["http/protobuf", "grpc"])
def test_a_full_queue_makes_the_real_exporter_retry_and_nothing_is_lost(tmp_path, protocol):
    spans = synthetic_spans(6 * 512, seed=7)
    with Collector(tmp_path / "s", port=0, grpc_port=0, max_queued_spans=1000) as collector:
        writer = collector._intake.exporter._writer  # the store's writer, stalled as a slow disk would stall it
        writer._lock.acquire()
        try:
            if protocol == "grpc":
                exporter = GrpcExporter(endpoint=f"127.0.0.1:{collector.grpc_port}", insecure=True, timeout=60)
            else:
                exporter = HttpExporter(endpoint=collector.http_endpoint, timeout=60)
            results: list[SpanExportResult] = []

            def export_all() -> None:
                results.extend(exporter.export(spans[i : i + 512]) for i in range(0, len(spans), 512))

            client = threading.Thread(target=export_all)
            client.start()
            wait_until(lambda: collector.stats().requests_refused > 0, "a request refused while the queue is full")
            status, headers, body = post(collector.http_endpoint, encode_spans(spans[:1]).SerializeToString())
            assert status == 503 and headers["retry-after"] == "1"
            assert status_pb2.Status.FromString(body).code == code_pb2.UNAVAILABLE
        finally:
            writer._lock.release()
        client.join(timeout=120)
        exporter.shutdown()
    assert results == [SpanExportResult.SUCCESS] * 6
    ids = stored_span_ids(tmp_path / "s")
    assert sorted(ids) == sorted(span.context.span_id for span in spans)


def padded_request(spans, size: int) -> bytes:
    """A valid request of exactly ``size`` bytes: ``spans`` and an unknown field of padding (receivers skip it)."""
    body = encode_spans(spans).SerializeToString()
    padding = size - len(body) - 1 - 3  # the field's tag, and its length as a 3-byte varint
    assert 1 << 14 <= padding < 1 << 21
    length = bytes([padding & 0x7F | 0x80, padding >> 7 & 0x7F | 0x80, padding >> 14])
    return body + bytes([15 << 3 | 2]) + length + bytes(padding)


def test_bodies_past_the_memory_budget_are_refused_as_busy_and_the_others_stored(tmp_path):
    """Each connection read and decoded a body of up to --max-body at once, whatever the others held: four senders of
    20 MiB requests of small spans took the collector to 2.9 GB, and more senders, more memory. A process now holds
    at most two bodies of the largest size; past that, requests are refused as busy (503 with Retry-After, gRPC
    UNAVAILABLE), however small, until the bodies held are answered. What a sender has not sent holds nothing."""
    limit = 1 << 20
    with Collector(tmp_path / "s", port=0, grpc_port=0, max_body_bytes=limit) as collector:
        stalled = []
        for seed in (1, 2):
            body = padded_request(synthetic_spans(4, seed=seed), limit)
            head = "POST /v1/traces HTTP/1.1\r\nHost: x\r\nContent-Type: application/x-protobuf\r\n"
            sender = socket.create_connection(("127.0.0.1", collector.http_port), timeout=60)
            sender.sendall(f"{head}Content-Length: {limit}\r\n\r\n".encode() + body[:-1])
            stalled.append((sender, body[-1:]))
        announced_only = socket.create_connection(("127.0.0.1", collector.http_port), timeout=60)
        announced_only.sendall(f"{head}Content-Length: {limit}\r\n\r\n".encode())  # holds nothing
        wait_until(lambda: collector._intake.bodies.held == 2 * (limit - 1), "two bodies held, all but a byte each")

        small = encode_spans(synthetic_spans(4, seed=3)).SerializeToString()
        status, headers, answer = post(collector.http_endpoint, small)
        assert (status, headers["retry-after"]) == (503, "1")
        assert status_pb2.Status.FromString(answer).code == code_pb2.UNAVAILABLE
        grpc_exporter = GrpcExporter(endpoint=f"127.0.0.1:{collector.grpc_port}", insecure=True, timeout=60)
        with grpc.insecure_channel(f"127.0.0.1:{collector.grpc_port}") as channel:
            export = channel.unary_unary("/opentelemetry.proto.collector.trace.v1.TraceService/Export")
            with pytest.raises(grpc.RpcError) as refused:
                export(encode_spans(synthetic_spans(4, seed=4)).SerializeToString(), timeout=60)
        assert refused.value.code() == grpc.StatusCode.UNAVAILABLE

        for sender, last in stalled:
            sender.sendall(last)
            assert sender.makefile("rb").readline().startswith(b"HTTP/1.1 200")
            sender.close()
        announced_only.close()
        assert post(collector.http_endpoint, small)[0] == 200  # the senders refused retry, and are heard
        assert grpc_exporter.export(synthetic_spans(4, seed=4)) == SpanExportResult.SUCCESS
        grpc_exporter.shutdown()
    assert collector.stats().requests_refused == 2
    assert sorted(stored_span_ids(tmp_path / "s")) == sorted(
        span.context.span_id for seed in (1, 2, 3, 4) for span in synthetic_spans(4, seed=seed)
    )


def test_a_burst_of_senders_connecting_at_once_is_answered(tmp_path):
    """The HTTP server listened with socketserver's backlog of 5: of 64 senders that connected at once, 38 had their
    connection reset (a connection error for each exporter, which it retries at best)."""
    senders = 64
    bodies = [encode_spans(synthetic_spans(4, seed=seed)).SerializeToString() for seed in range(1, senders + 1)]
    with Collector(tmp_path / "s", port=0, grpc_port=None) as collector:
        at_once = threading.Barrier(senders)

        def send(body: bytes) -> int:
            at_once.wait()
            return post(collector.http_endpoint, body)[0]

        with ThreadPoolExecutor(senders) as pool:
            assert list(pool.map(send, bodies)) == [200] * senders
    assert len(stored_span_ids(tmp_path / "s")) == 4 * senders
