"""Online evaluation in ``agenteval collect``: a decorated production agent in a process of its own sends its
traces over OTLP/HTTP (the real SDK exporter) to a real collector, which scores them as they arrive with the
scorers ``rescore --traces`` uses, into the same scores, each trace once; what waits at the stop is scored then.
Counted: traces finished (handed to the scorer) = traces sent, traces scored = scores written (one scorer) =
traces sampled that did not end in error."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from waiting import wait_until

from agenteval.collect import Collector
from agenteval.scorers import TraceScorer, score_traces
from agenteval.scorers._traces import trace_sampled
from agenteval.store import Store

AGENT = str(Path(__file__).parent / "production_agent.py")


def send_traces(endpoint: str, count: int, mode: str = "agent", env: dict[str, str] | None = None) -> None:
    """``count`` traces of the production agent (its seven scenarios in turn, three of which end in error)."""
    done = subprocess.run(
        [sys.executable, AGENT, endpoint, "shop", mode, str(count)],
        capture_output=True,
        text=True,
        timeout=120,
        env=None if env is None else {**os.environ, **env},
    )
    assert done.returncode == 0 and done.stdout.splitlines()[-1].startswith(f"wrote {count} "), done.stderr


def trace_scores(store_dir) -> dict[str, dict]:
    rows = Store(store_dir).rows("SELECT trace_id, scorer, value, passed FROM trace_scores")
    return {r["trace_id"]: r for r in rows}


def traces(store_dir) -> dict[str, str]:
    return {r["trace_id"]: r["status"] for r in Store(store_dir).rows("SELECT trace_id, status FROM traces")}


@pytest.mark.parametrize("workers", [1, 2])
def test_traces_are_scored_as_they_arrive_each_once_as_rescore_traces_scores_them(tmp_path, workers):
    """With HTTP workers, they tell the collector the roots they wrote, and it scores the traces."""
    store = tmp_path / "collected"
    scorer = TraceScorer(Store(store), ["tool_errors"])
    with Collector(store, port=0, grpc_port=None, score=scorer, score_delay=0.2, workers=workers) as collector:
        send_traces(collector.http_endpoint, 14)
        # Scored while the collector runs, not only at its stop: 8 of the 14 did not end in error.
        wait_until(lambda: len(trace_scores(store)) == 8, "8 traces to be scored online", timeout=60)
        send_traces(collector.http_endpoint, 7)  # the last of these may still wait at the stop
    stats = collector.stats()
    # 21 finished, of which the 12 that did not end in error were judged, one score each.
    assert (stats.traces_finished, stats.traces_scored, stats.scores_written) == (21, 12, 12)
    sent = traces(store)
    online = trace_scores(store)
    assert len(sent) == 21 and set(online) == {t for t, status in sent.items() if status != "ERROR"}
    assert {r["scorer"] for r in online.values()} == {"tool_errors"}
    assert all(r["passed"] for r in online.values())  # the one failed tool call is owned up to in the reply
    # Scoring the stored traces again later gives the same judgements.
    assert score_traces(Store(store), scorers=["tool_errors"]).scores == 12
    later = trace_scores(store)
    assert {t: (r["value"], r["passed"]) for t, r in later.items()} == {
        t: (r["value"], r["passed"]) for t, r in online.items()
    }


def test_traces_whose_top_span_has_a_remote_parent_are_scored_too(tmp_path):
    """An agent behind a gateway: its top span's parent is the gateway's, which is never sent to the collector.
    The SDK's exporter flags such a parent as remote, and the collector scores the trace, as rescore --traces would."""
    store = tmp_path / "collected"
    scorer = TraceScorer(Store(store), ["tool_errors"])
    with Collector(store, port=0, grpc_port=None, score=scorer, score_delay=0, workers=1) as collector:
        send_traces(collector.http_endpoint, 7, mode="gateway")
    sent = traces(store)
    assert len(sent) == 7
    assert set(trace_scores(store)) == {t for t, status in sent.items() if status != "ERROR"}
    assert collector.stats().scores_written == 4


def collected(store: Path, send: Callable[[str], object], *options: str) -> str:
    """What ``agenteval collect`` (HTTP on a free port, into ``store``, with ``options``) prints once ``send(endpoint)``
    has sent to it and a SIGTERM has stopped it."""
    command = [sys.executable, "-m", "agenteval.cli", "collect", "--port", "0", "--no-grpc", "--store", str(store)]
    process = subprocess.Popen([*command, *options], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        line = process.stdout.readline()
        assert line.startswith("agenteval collect: OTLP/HTTP on http://127.0.0.1:"), line + process.stderr.read()
        send(line.split(" on ")[1].split(";")[0].strip())
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 0, err
    return out


def test_the_command_scores_a_sample_chosen_by_trace_id_and_says_how_many(tmp_path):
    store = tmp_path / "cli-store"
    options = ("--score", "tool_errors", "--sample", "0.5", "--score-delay", "0")
    out = collected(store, lambda endpoint: send_traces(endpoint, 42), *options)
    scored = trace_scores(store)
    # The sample is chosen by trace id, as rescore --traces --sample 0.5 would choose it.
    expected = {t for t, status in traces(store).items() if status != "ERROR" and trace_sampled(t, 0.5)}
    assert 0 < len(scored) < 24 and set(scored) == expected
    # Said as rescore --traces says it: the traces judged, not the 42 handed to the sample.
    assert f"; {len(scored)} scores for {len(scored)} of 42 finished traces (the others not sampled" in out


def test_the_command_says_why_traces_sent_without_message_content_got_no_score(tmp_path):
    """Found by a hostile check: an agent whose content capture is off sent 900 traces, and the stop line read
    '0 scores for 900 of 900 finished traces' with no reason, where rescore --traces over the same store says the
    scorer had no message content to judge."""
    store = tmp_path / "no-content"
    no_content = {"OTEL_INSTRUMENTATION_GENAI_CAPTURE_MESSAGE_CONTENT": "false"}
    out = collected(
        store, lambda endpoint: send_traces(endpoint, 7, env=no_content), "--score", "tool_errors", "--score-delay", "0"
    )
    assert trace_scores(store) == {}
    # The 4 traces that did not end in error, as rescore --traces counts and words them.
    assert "; 0 scores for 4 of 7 finished traces" in out
    assert "not scored, for want of message content (captured off): tool_errors (4 traces)" in out
    assert score_traces(Store(store), scorers=["tool_errors"]).not_scored == {"tool_errors": 4}


def test_scoring_options_without_score_are_refused(tmp_path):
    done = subprocess.run(
        [sys.executable, "-m", "agenteval.cli", "collect", "--sample", "0.5", "--store", str(tmp_path / "s")],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 2 and "--sample, --max-tool-calls and --must-not-contain go with --score" in done.stderr
