"""Cost of a decorated call against the same span written by hand; with ``--peers``, other libraries' decorators too.

Both sides run under the same SDK setup: a TracerProvider with a BatchSpanProcessor feeding an
exporter that drops everything. The hand-written side uses ``tracer.start_as_current_span`` and
sets the same attributes the decorator sets (with capture on, that includes the JSON of the
arguments and the result). Prints the median microseconds per call over repeated runs and the
ratio; the target is at most 1.3x with capture on for small arguments.

``--peers`` measures, each in a fresh process and in rounds (the order rotated), a trivial two-argument tool
decorated by each library installed from the ``bench`` extra (``pip install -e '.[bench]'``), recording its
arguments and result, beside the same hand-written span as above (from a plain SDK TracerProvider of its own, so
the baseline is the same in every process), and prints the median of the rounds' ratios with their range:

- agenteval ``@tool`` with capture on, under a plain SDK TracerProvider;
- Logfire ``@logfire.instrument(record_return=True)`` after ``logfire.configure(send_to_logfire=False,
  console=False)``, its spans going to the dropping exporter through ``additional_span_processors``;
- OpenInference ``@OITracer.tool`` over a plain SDK TracerProvider (its default TraceConfig records input and
  output);
- Langfuse ``@observe(as_type="tool")`` with placeholder keys, a loopback address that is never reached and
  the dropping exporter as its ``span_exporter`` (Langfuse's own span processor batches in front of it).

Nothing leaves the machine. Traceloop is not measured: ``traceloop-sdk`` pins the OpenTelemetry SDK to another
patch release and installs about 35 instrumentation packages, which the ``bench`` extra would impose on the
project's environment.

    python benchmarks/bench_decorators.py [--calls 20000] [--repeats 9]
    python benchmarks/bench_decorators.py --peers [--rounds 5] [--calls 20000] [--repeats 5]
"""

from __future__ import annotations

import argparse
import functools
import importlib.metadata
import importlib.util
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from agenteval_instrumentation import attributes as A

PEERS = {
    # name: (import names it needs, distribution whose version is printed)
    "agenteval": (("agenteval_instrumentation",), "agenteval-instrumentation"),
    "logfire": (("logfire",), "logfire"),
    "openinference": (("openinference.instrumentation",), "openinference-instrumentation"),
    "langfuse": (("langfuse",), "langfuse"),
}


class DropExporter(SpanExporter):
    """Drops every span, counting them: a peer whose spans never arrive would be measuring a no-op."""

    def __init__(self) -> None:
        self.spans = 0

    def export(self, spans):
        self.spans += len(spans)
        return SpanExportResult.SUCCESS


def dropping_provider(exporter: SpanExporter | None = None) -> TracerProvider:
    provider = TracerProvider()
    provider.add_span_processor(BatchSpanProcessor(exporter or DropExporter()))
    return provider


hand_provider = dropping_provider()
tracer = hand_provider.get_tracer("bench")

STATIC = {
    A.GEN_AI_OPERATION_NAME: "execute_tool",
    A.GEN_AI_TOOL_NAME: "add",
    A.GEN_AI_TOOL_TYPE: "function",
    A.GEN_AI_TOOL_DESCRIPTION: "Add two integers.",
}


def by_hand(a: int, b: int, capture: bool) -> int:
    with tracer.start_as_current_span("execute_tool add", attributes=STATIC) as span:
        if capture:
            span.set_attribute(A.GEN_AI_TOOL_CALL_ARGUMENTS, json.dumps({"a": a, "b": b}))
        result = a + b
        if capture:
            span.set_attribute(A.GEN_AI_TOOL_CALL_RESULT, json.dumps(result))
        return result


def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


def agenteval_tool(exporter: SpanExporter | None = None) -> tuple[Callable[[int, int], int], Callable[[], object]]:
    from agenteval_instrumentation import tool

    provider = dropping_provider(exporter)
    trace.set_tracer_provider(provider)
    return tool(add), provider.force_flush


# Each peer's decorated ``add``, set up the way its documentation shows, with its spans going to ``exporter``;
# with the function that flushes them.


def logfire_tool(exporter: SpanExporter) -> tuple[Callable[[int, int], int], Callable[[], object]]:
    import logfire

    logfire.configure(send_to_logfire=False, console=False, additional_span_processors=[BatchSpanProcessor(exporter)])
    return logfire.instrument(record_return=True)(add), logfire.force_flush


def openinference_tool(exporter: SpanExporter) -> tuple[Callable[[int, int], int], Callable[[], object]]:
    from openinference.instrumentation import OITracer, TraceConfig

    provider = dropping_provider(exporter)
    return OITracer(provider.get_tracer("bench"), config=TraceConfig()).tool(add), provider.force_flush


def langfuse_tool(exporter: SpanExporter) -> tuple[Callable[[int, int], int], Callable[[], object]]:
    from langfuse import Langfuse, observe

    client = Langfuse(
        public_key="pk-bench", secret_key="sk-bench", base_url="http://127.0.0.1:9", span_exporter=exporter
    )
    return observe(as_type="tool")(add), client.flush


DECORATED = {
    "agenteval": agenteval_tool,
    "logfire": logfire_tool,
    "openinference": openinference_tool,
    "langfuse": langfuse_tool,
}


def per_call_us(fn, calls: int) -> float:
    start = time.perf_counter()
    for i in range(calls):
        fn(i, 1)
    return (time.perf_counter() - start) / calls * 1e6


def median_us(fn, calls: int, repeats: int) -> float:
    per_call_us(fn, calls // 10)  # warm up
    return statistics.median(per_call_us(fn, calls) for _ in range(repeats))


def peer_child(name: str, calls: int, repeats: int) -> None:
    """In this fresh process: the peer's decorated call and the hand-written span, in turns; one JSON line."""
    exporter = DropExporter()
    decorated, flush = DECORATED[name](exporter)
    hand = functools.partial(by_hand, capture=True)
    per_call_us(hand, calls // 10)
    per_call_us(decorated, calls // 10)
    times: dict[str, list[float]] = {"hand": [], "decorated": []}
    for repeat in range(repeats):
        for side in ("hand", "decorated") if repeat % 2 == 0 else ("decorated", "hand"):
            times[side].append(per_call_us(hand if side == "hand" else decorated, calls))
    flush()
    assert exporter.spans >= calls * repeats, f"{name} exported {exporter.spans} spans"
    print(json.dumps({side: statistics.median(values) for side, values in times.items()}))


def run_peer(name: str, calls: int, repeats: int) -> dict[str, float]:
    done = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--peer", name, "--calls", str(calls), "--repeats", str(repeats)],
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
        env={k: v for k, v in os.environ.items() if not k.startswith(("OTEL_", "LOGFIRE_", "LANGFUSE_"))},
    )
    if done.returncode != 0:
        raise SystemExit(f"{name} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def peers(rounds: int, calls: int, repeats: int) -> None:
    present = []
    for name, (modules, _) in PEERS.items():
        if missing := [m for m in modules if importlib.util.find_spec(m.split(".")[0]) is None]:
            print(f"{name}: not installed ({', '.join(missing)} missing); install it with pip install -e '.[bench]'")
        else:
            present.append(name)
    results: dict[str, list[dict[str, float]]] = {name: [] for name in present}
    for round_ in range(rounds):
        for name in present[round_ % len(present) :] + present[: round_ % len(present)]:
            results[name].append(run_peer(name, calls, repeats))
    print(f"{calls} calls x {repeats} runs a process, {rounds} rounds; medians over the rounds (min-max)")
    print(f"{'decorator':14} {'version':>10} {'by hand µs':>20} {'decorated µs':>22} {'ratio':>22}")
    for name, runs in results.items():
        hand, decorated = [r["hand"] for r in runs], [r["decorated"] for r in runs]
        ratios = [r["decorated"] / r["hand"] for r in runs]
        print(
            f"{name:14} {version(PEERS[name][1]):>10} {spread(hand, '.1f'):>20} {spread(decorated, '.1f'):>22}"
            f" {spread(ratios, '.2f', 'x'):>22}"
        )


def spread(values: list[float], fmt: str, unit: str = "") -> str:
    return f"{statistics.median(values):{fmt}}{unit} ({min(values):{fmt}}-{max(values):{fmt}})"


def own(calls: int, repeats: int) -> None:
    from agenteval_instrumentation import configure_capture

    decorated_add, _ = agenteval_tool()
    print(f"{calls} calls x {repeats} runs, median microseconds per call")
    print(f"{'capture':8} {'by hand':>9} {'@tool':>9} {'ratio':>7}")
    for capture in (True, False):
        configure_capture(enabled=capture)
        hand = median_us(functools.partial(by_hand, capture=capture), calls, repeats)
        decorated = median_us(decorated_add, calls, repeats)
        print(f"{'on' if capture else 'off':8} {hand:9.2f} {decorated:9.2f} {decorated / hand:6.2f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--repeats", type=int)
    parser.add_argument("--peers", action="store_true", help="Other libraries' decorators beside agenteval's.")
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--peer", choices=list(DECORATED), help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.peer:
        peer_child(options.peer, options.calls, options.repeats)
    elif options.peers:
        peers(options.rounds, options.calls, options.repeats or 5)
    else:
        own(options.calls, options.repeats or 9)


if __name__ == "__main__":
    main()
