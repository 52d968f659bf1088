"""No span dropped on the way to an OTLP backend, scores reach it, and a service flushes on SIGTERM.

A real loopback OTLP/HTTP receiver (tests/conftest.py) counts what arrives; real runs and real subprocesses.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap

import pytest

from agenteval.run import evaluate
from agenteval.store import Store
from agenteval_instrumentation import attributes as A


def test_a_10000_trial_run_delivers_every_span_and_its_scores(receiver, tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.endpoint)
    experiment = evaluate(
        "mock",
        "arithmetic",
        cases=2000,
        attempts=5,
        store=tmp_path / "s",
        progress="none",
        agent_options={"wrong_rate": 0.2},
        concurrency=64,
    )
    store = Store(tmp_path / "s")
    (stored,) = store.rows("SELECT count(*) AS n FROM spans WHERE experiment_id = ?", [experiment.id])
    assert stored["n"] >= 30_000
    assert len(receiver.spans) == stored["n"]  # the SDK's batch queue dropped most of these before
    assert len({s["span_id"] for s in receiver.spans}) == stored["n"]
    assert (experiment.summary.otlp.spans_sent, experiment.summary.otlp.spans_failed) == (stored["n"], 0)

    roots = [s for s in receiver.spans if A.TRIAL_OUTCOME in s["attributes"]]
    assert len(roots) == 10_000
    outcomes = store.rows(
        "SELECT outcome, count(*) AS n FROM trials WHERE experiment_id = ? GROUP BY 1 ORDER BY 1", [experiment.id]
    )
    sent = {}
    for root in roots:
        sent[root["attributes"][A.TRIAL_OUTCOME]] = sent.get(root["attributes"][A.TRIAL_OUTCOME], 0) + 1
    assert sent == {row["outcome"]: row["n"] for row in outcomes}
    wrong = next(r for r in roots if r["attributes"][A.TRIAL_OUTCOME] == "wrong")
    (name, event) = next(e for e in wrong["events"] if e[0] == A.GEN_AI_EVALUATION_RESULT)
    assert event[A.GEN_AI_EVALUATION_NAME] == "answer_match"
    assert event[A.GEN_AI_EVALUATION_SCORE_LABEL] == "fail"
    assert event[A.GEN_AI_EVALUATION_SCORE_VALUE] == 0.0
    assert event[A.GEN_AI_EVALUATION_EXPLANATION]


def test_a_failed_trial_root_carries_its_failure_type(receiver, tmp_path, monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.endpoint)
    experiment = evaluate(
        "mock",
        "arithmetic",
        cases=20,
        attempts=1,
        store=tmp_path / "s",
        progress="none",
        agent_options={"fail_rate": 1.0},
    )
    (row,) = Store(tmp_path / "s").rows(
        "SELECT any_value(failure_type) AS t, any_value(infrastructure) AS i FROM trials WHERE experiment_id = ?",
        [experiment.id],
    )
    root = next(s for s in receiver.spans if A.TRIAL_OUTCOME in s["attributes"])
    assert root["attributes"][A.TRIAL_OUTCOME] == "failed"
    from agenteval.render._console import run_summary

    assert f"OTLP: {len(receiver.spans)} spans sent, 0 failed" in run_summary(experiment.summary)
    assert root["attributes"][A.TRIAL_FAILURE_TYPE] == row["t"]
    assert root["attributes"][A.TRIAL_INFRASTRUCTURE] == row["i"]


SERVICE = """
import signal, sys, time
from agenteval import tool
from agenteval.tracing import setup_tracing
{host}
tracing = setup_tracing({store!r})

@tool
def step(i: int) -> int:
    return i

for i in range({count}):
    step(i)
print("ready", flush=True)
time.sleep(60)
"""


def _serve_then_sigterm(tmp_path, host: str = "", count: int = 82) -> subprocess.CompletedProcess:
    store = tmp_path / "store"
    script = SERVICE.format(host=textwrap.dedent(host), store=str(store), count=count)
    env = {**os.environ, "AGENTEVAL_PARQUET_FLUSH_INTERVAL": "3600"}  # nothing reaches disk by time alone
    env.pop("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", None)
    with subprocess.Popen(
        [sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True
    ) as proc:
        assert proc.stdout.readline().strip() == "ready"
        proc.send_signal(signal.SIGTERM)
        try:
            out, err = proc.communicate(timeout=60)
        except subprocess.TimeoutExpired:
            proc.kill()  # else leaving the with block waits for it
            pytest.fail("the service had not exited 60 s after SIGTERM")
    return subprocess.CompletedProcess(proc.args, proc.returncode, out, err)


def test_a_service_killed_with_sigterm_writes_every_span(tmp_path):
    done = _serve_then_sigterm(tmp_path)
    assert done.returncode == -signal.SIGTERM, done.stderr  # still ends as SIGTERM does
    (row,) = Store(tmp_path / "store").rows("SELECT count(*) AS n FROM spans")
    assert row["n"] == 82


def test_the_hosts_own_sigterm_handler_still_runs(tmp_path):
    host = """
    def on_term(signum, frame):
        print("host handler ran", flush=True)
        sys.exit(3)
    signal.signal(signal.SIGTERM, on_term)
    """
    done = _serve_then_sigterm(tmp_path, host=host, count=10)
    assert done.returncode == 3, done.stderr
    assert "host handler ran" in done.stdout
    (row,) = Store(tmp_path / "store").rows("SELECT count(*) AS n FROM spans")
    assert row["n"] == 10


def test_rescore_otlp_sends_the_new_scores_parented_to_each_trials_root(receiver, tmp_path, monkeypatch):
    from click.testing import CliRunner

    from agenteval.cli import main

    store = tmp_path / "s"
    experiment = evaluate("mock", "arithmetic", cases=6, attempts=1, store=store, progress="none")
    roots = {
        r["trial_id"]: r
        for r in Store(store).rows(
            "SELECT trial_id, trace_id, span_id FROM spans"
            " WHERE scope_name = 'agenteval.runner' AND parent_span_id IS NULL"
        )
    }
    refused = CliRunner().invoke(main, ["rescore", experiment.id, "--otlp", "--store", str(store)])
    assert refused.exit_code == 2 and "OTEL_EXPORTER_OTLP_ENDPOINT" in refused.output

    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", receiver.endpoint)
    done = CliRunner().invoke(main, ["rescore", experiment.id, "--otlp", "--store", str(store)])
    assert done.exit_code == 0, done.output
    assert "OTLP: 6 evaluation spans sent, 0 failed" in done.output
    assert len(receiver.spans) == 6
    for span in receiver.spans:
        root = roots[span["attributes"][A.TRIAL_ID]]
        assert span["trace_id"] == root["trace_id"]
        assert span["parent_span_id"] == root["span_id"]
        assert span["attributes"][A.TRIAL_OUTCOME] == "passed"
        names = {e[1][A.GEN_AI_EVALUATION_NAME] for e in span["events"] if e[0] == A.GEN_AI_EVALUATION_RESULT}
        assert "answer_match" in names


def test_a_backend_that_refuses_every_export_never_holds_up_the_run(tmp_path, monkeypatch):
    from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
    from threading import Thread

    class Refuse(BaseHTTPRequestHandler):
        def do_POST(self):
            self.rfile.read(int(self.headers["Content-Length"]))
            self.server.posts += 1
            self.send_response(400)  # not retried by the exporter
            self.send_header("Content-Length", "0")
            self.end_headers()

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Refuse)
    server.posts = 0
    Thread(target=server.serve_forever, daemon=True).start()
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", f"http://127.0.0.1:{server.server_address[1]}/v1/traces")
    try:
        experiment = evaluate("mock", "arithmetic", cases=500, attempts=2, store=tmp_path / "s", progress="none")
    finally:
        server.shutdown()
        server.server_close()
    (stored,) = Store(tmp_path / "s").rows("SELECT count(*) AS n FROM spans")
    assert experiment.status == "completed"
    assert (experiment.summary.otlp.spans_sent, experiment.summary.otlp.spans_failed) == (0, stored["n"])
    assert server.posts == 3  # then it stopped trying: the store has every span


def test_a_backend_that_never_answers_costs_no_span_on_sigterm(tmp_path):
    """The SIGTERM flush handed spans to the OTLP backend before finishing the Parquet writes, and waited on the
    backend for as long as the exporter's own timeout: a backend that accepted connections and never answered
    held the exit past any grace period, with the spans still in the Parquet exporter's buffer (a container
    is then killed and loses them). Parquet is now flushed first and the whole flush keeps to its bound."""
    import socket

    silent = socket.create_server(("127.0.0.1", 0))  # accepts (the kernel's backlog) and never answers
    try:
        endpoint = f"http://127.0.0.1:{silent.getsockname()[1]}/v1/traces"
        host = f"""
        import os
        os.environ["OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"] = {endpoint!r}
        os.environ["OTEL_EXPORTER_OTLP_TRACES_TIMEOUT"] = "600"
        """
        done = _serve_then_sigterm(tmp_path, host=host, count=82)
    finally:
        silent.close()
    assert done.returncode == -signal.SIGTERM, done.stderr
    (row,) = Store(tmp_path / "store").rows("SELECT count(*) AS n FROM spans")
    assert row["n"] == 82
