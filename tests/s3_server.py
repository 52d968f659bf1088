"""A real S3-compatible server on loopback for the tests and benchmarks: moto in server mode, in a process of its
own, on an ephemeral port of 127.0.0.1. The S3 clients (s3fs, DuckDB through it) reach it through the standard
AWS variables, so the code under test configures nothing of its own."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
from collections.abc import Iterator

SERVE = """
import sys, threading
from moto.server import ThreadedMotoServer
server = ThreadedMotoServer(ip_address="127.0.0.1", port=0, verbose=False)
server.start()
print(server.get_host_and_port()[1], flush=True)
sys.stdin.read()  # until the test closes it
server.stop()
"""

CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing-secret-not-real"}


@contextlib.contextmanager
def moto_server() -> Iterator[dict[str, str]]:
    """Start the server; yields the environment variables that point S3 clients at it (endpoint, region, test
    credentials). Stopped when the block ends."""
    with moto_server_process() as (_, variables):
        yield variables


@contextlib.contextmanager
def stalled(server: subprocess.Popen) -> Iterator[None]:
    """The server stops answering until the block ends (SIGSTOP, then SIGCONT): requests sent meanwhile wait, as
    they do on an object store or a network mount that hangs, and are answered afterwards."""
    server.send_signal(signal.SIGSTOP)
    try:
        yield
    finally:
        server.send_signal(signal.SIGCONT)


@contextlib.contextmanager
def moto_server_process() -> Iterator[tuple[subprocess.Popen, dict[str, str]]]:
    """:func:`moto_server`, also yielding the server's process (for :func:`stalled`)."""
    server = subprocess.Popen(
        [sys.executable, "-c", SERVE],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        stderr=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert server.stdout is not None
        port = int(server.stdout.readline())
        variables = {"AWS_ENDPOINT_URL": f"http://127.0.0.1:{port}", "AWS_DEFAULT_REGION": "us-east-1", **CREDENTIALS}
        yield server, variables
    finally:
        with contextlib.suppress(OSError):
            assert server.stdin is not None
            server.stdin.close()
        try:
            server.wait(timeout=10)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


def make_bucket(name: str) -> None:
    """Create ``name`` on the server the environment points at."""
    import fsspec

    fs = fsspec.filesystem("s3")
    fs.mkdir(name)
    fs.invalidate_cache()


@contextlib.contextmanager
def environment(variables: dict[str, str]) -> Iterator[None]:
    saved = {name: os.environ.get(name) for name in variables}
    os.environ.update(variables)
    try:
        yield
    finally:
        for name, value in saved.items():
            if value is None:
                os.environ.pop(name, None)
            else:
                os.environ[name] = value
