"""Cost of a decorated call against the same span written by hand.

Both sides run under the same SDK setup: a TracerProvider with a BatchSpanProcessor feeding an
exporter that drops everything. The hand-written side uses ``tracer.start_as_current_span`` and
sets the same attributes the decorator sets (with capture on, that includes the JSON of the
arguments and the result). Prints the median microseconds per call over repeated runs and the
ratio; the target is at most 1.3x with capture on for small arguments.

    python benchmarks/bench_decorators.py [--calls 20000] [--repeats 9]
"""

from __future__ import annotations

import argparse
import functools
import json
import statistics
import time

from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

from agenteval_instrumentation import attributes as A
from agenteval_instrumentation import configure_capture, tool


class DropExporter(SpanExporter):
    def export(self, spans):
        return SpanExportResult.SUCCESS


provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(DropExporter()))
trace.set_tracer_provider(provider)
tracer = trace.get_tracer("bench")


@tool
def add(a: int, b: int) -> int:
    """Add two integers."""
    return a + b


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


def per_call_us(fn, calls: int) -> float:
    start = time.perf_counter()
    for i in range(calls):
        fn(i, 1)
    return (time.perf_counter() - start) / calls * 1e6


def median_us(fn, calls: int, repeats: int) -> float:
    per_call_us(fn, calls // 10)  # warm up
    return statistics.median(per_call_us(fn, calls) for _ in range(repeats))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--calls", type=int, default=20_000)
    parser.add_argument("--repeats", type=int, default=9)
    options = parser.parse_args()

    print(f"{options.calls} calls x {options.repeats} runs, median microseconds per call")
    print(f"{'capture':8} {'by hand':>9} {'@tool':>9} {'ratio':>7}")
    for capture in (True, False):
        configure_capture(enabled=capture)
        hand = median_us(functools.partial(by_hand, capture=capture), options.calls, options.repeats)
        decorated = median_us(add, options.calls, options.repeats)
        print(f"{'on' if capture else 'off':8} {hand:9.2f} {decorated:9.2f} {decorated / hand:6.2f}x")
    provider.shutdown()


if __name__ == "__main__":
    main()
