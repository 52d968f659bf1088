"""A request sent again to ``agenteval collect --workers 2`` is stored once, whichever worker takes each copy.

The OTLP exporters send a request again when its answer did not reach them (a timeout, a cut connection), gzip'ed
anew, often on a new connection, which the collector may hand to another worker process than the first. Tested
against the command itself (real worker processes, real sockets): the test finds which worker holds each of its
connections from /proc (the socket's inode in /proc/net/tcp, then the worker's descriptors), so it knows that both
workers took copies, then counts the rows in the store.
"""

from __future__ import annotations

import gzip
import http.client
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

from collect_clients import agent_spans
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from test_collect_workers import children_of

from agenteval.store import Store


class Command:
    """``agenteval collect --workers 2`` in a process of its own, on a free loopback port."""

    def __init__(self, store: Path) -> None:
        command = [sys.executable, "-m", "agenteval.cli", "collect", "--port", "0", "--no-grpc", "--workers", "2"]
        self.process = subprocess.Popen(
            [*command, "--store", str(store)], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        line = self.process.stdout.readline()
        assert "(HTTP received by 2 worker processes)" in line, line + self.process.stderr.read()
        self.port = int(line.split(" on ")[1].split(";")[0].split(":")[2].split("/")[0])
        self.workers = children_of(self.process.pid)  # spawn's resource tracker may be one too: it holds no socket

    def connect(self) -> http.client.HTTPConnection:
        connection = http.client.HTTPConnection("127.0.0.1", self.port, timeout=60)
        connection.connect()
        return connection

    def worker_of(self, connection: http.client.HTTPConnection) -> int:
        """The pid of the worker process holding the server's end of ``connection`` (after one request on it:
        the collector hands a connection over once it has accepted it)."""
        inode = server_socket_inode(self.port, connection.sock.getsockname()[1])
        holders = [pid for pid in self.workers if holds_socket(pid, inode)]
        assert len(holders) == 1, (inode, holders)
        return holders[0]

    def stop(self) -> str:
        """SIGTERM (every acknowledged span written first); the command's output."""
        self.process.send_signal(signal.SIGTERM)
        out, err = self.process.communicate(timeout=120)
        assert self.process.returncode == 0, out + err
        return out

    def kill(self) -> None:
        if self.process.poll() is None:
            self.process.kill()
            self.process.communicate()


def server_socket_inode(server_port: int, client_port: int) -> str:
    """The inode of the server's end of a loopback TCP connection, from /proc/net/tcp (ports in hex)."""
    with open("/proc/net/tcp") as table:
        for row in table.readlines()[1:]:
            fields = row.split()
            local, remote = int(fields[1].split(":")[1], 16), int(fields[2].split(":")[1], 16)
            if (local, remote) == (server_port, client_port):
                return fields[9]
    raise AssertionError(f"no server socket for 127.0.0.1:{client_port} -> :{server_port}")


def holds_socket(pid: int, inode: str) -> bool:
    try:
        descriptors = os.listdir(f"/proc/{pid}/fd")
    except OSError:
        return False
    for fd in descriptors:
        try:
            if os.readlink(f"/proc/{pid}/fd/{fd}") == f"socket:[{inode}]":
                return True
        except OSError:
            continue
    return False


def send(connection: http.client.HTTPConnection, body: bytes, mtime: int) -> tuple[int, bytes]:
    """POST ``body`` gzip'ed anew (the gzip header's time differs, as an SDK's retry's does)."""
    headers = {"Content-Type": "application/x-protobuf", "Content-Encoding": "gzip"}
    connection.request("POST", "/v1/traces", gzip.compress(body, mtime=mtime), headers)
    response = connection.getresponse()
    return response.status, response.read()


def stored_span_ids(store: Path) -> list[str]:
    return [r["span_id"] for r in Store(store).rows("SELECT span_id FROM spans")]


def two_connections_on_two_workers(command: Command, first_body: bytes) -> list[http.client.HTTPConnection]:
    """One connection, answered once (so it is handed over and held open), then another: the collector hands a
    connection to the worker with the fewest open, so the second goes to the other worker. Checked, not assumed."""
    one = command.connect()
    assert send(one, first_body, mtime=1)[0] == 200
    other = command.connect()
    assert send(other, first_body, mtime=2)[0] == 200
    assert command.worker_of(one) != command.worker_of(other)
    return [one, other]


def send_at_once(connections: list[http.client.HTTPConnection], body: bytes, mtime: int) -> list[int]:
    """The same request on each connection at the same moment (each from a thread of its own), sent again after a
    503 as an OTLP exporter does; the last status of each."""
    start = threading.Barrier(len(connections))
    statuses = [0] * len(connections)

    def send_when_all_are_ready(k: int) -> None:
        start.wait()
        status, _ = send(connections[k], body, mtime + k)
        while status == 503:
            status, _ = send(connections[k], body, mtime + k)
        statuses[k] = status

    threads = [threading.Thread(target=send_when_all_are_ready, args=(k,)) for k in range(len(connections))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return statuses


def test_a_request_sent_again_on_new_connections_is_stored_once_whichever_worker_takes_it(tmp_path):
    requests = [encode_spans(agent_spans(3, prefix=f"request-{n}-")).SerializeToString() for n in range(3)]
    spans = len(agent_spans(3))
    command = Command(tmp_path / "s")
    try:
        held = two_connections_on_two_workers(command, requests[0])
        workers_per_request: dict[int, set[int]] = {n: set() for n in range(len(requests))}
        answers: dict[int, set[bytes]] = {n: set() for n in range(len(requests))}
        for attempt in range(4):
            for n, body in enumerate(requests):
                # Each copy on both held connections, and on a new one each time (as a client whose connection was
                # cut reconnects), which either worker may take.
                fresh = command.connect()
                for connection in [*held, fresh]:
                    status, answer = send(connection, body, mtime=100 * attempt + n)
                    assert status == 200
                    answers[n].add(answer)
                    workers_per_request[n].add(command.worker_of(connection))
                fresh.close()
        for connection in held:
            connection.close()
        out = command.stop()
    finally:
        command.kill()
    assert all(len(w) == 2 for w in workers_per_request.values())  # every request reached both workers
    assert all(len(a) == 1 for a in answers.values())  # each copy answered as the first
    ids = stored_span_ids(tmp_path / "s")
    assert len(ids) == len(set(ids)) == len(requests) * spans  # each distinct request's spans exactly once
    copies = 2 + 4 * 3 * len(requests)  # the two first sends of request 0, then 4 attempts of 3 copies each
    assert f"{(copies - len(requests)) * spans:,} spans sent again, stored once" in out, out


def test_copies_sent_at_the_same_moment_to_two_workers_are_stored_once(tmp_path):
    """Two copies in flight at once on two workers (a client's timeout shorter than a large request's decoding):
    one is queued; the other waits for its answer (or is told to retry, 503, and then gets it); never both."""
    small = encode_spans(agent_spans(1, prefix="opening-")).SerializeToString()
    large = [encode_spans(agent_spans(1_000, prefix=f"large-{n}-")).SerializeToString() for n in range(4)]
    spans = len(agent_spans(1_000))
    command = Command(tmp_path / "s")
    try:
        held = two_connections_on_two_workers(command, small)
        for n, body in enumerate(large):
            assert send_at_once(held, body, mtime=10 * n) == [200, 200]
        for connection in held:
            connection.close()
        out = command.stop()
    finally:
        command.kill()
    ids = stored_span_ids(tmp_path / "s")
    assert len(ids) == len(set(ids)) == len(large) * spans + len(agent_spans(1))
    assert f"{(len(large) * spans + len(agent_spans(1))):,} spans sent again, stored once" in out, out
