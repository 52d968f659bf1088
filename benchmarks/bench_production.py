"""Production traces: what partitioning by day and service costs the span writer, and how long the traces view,
``agenteval report --traces`` and online scoring take over a store of production traces.

1. Partitioning a batch of production spans (the exporter's and the collector's path): the day-and-service rule
   against the baseline, the day-only rule it replaced, in microseconds per batch of 512 spans (the SDK's batch)
   and of 10,000 (a collector's), of one service and of two interleaved.
2. A store of ``--traces`` production traces (a root, a model call, a tool call each; over ``--services``
   services), written by the exporter and compacted (not timed); then, timed: a count over the ``traces`` view,
   the report, and scoring every trace with the default reference-free scorer.

    python benchmarks/bench_production.py [--traces 100000] [--repeats 5]

Prints medians of ``--repeats`` runs.
"""

from __future__ import annotations

import argparse
import functools
import statistics
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from agenteval_exporters import ParquetSpanExporter, spans_to_batch
from agenteval_exporters.files import partition_path
from agenteval_exporters.partitions import partition_by_experiment, partition_spans
from agenteval_exporters.schema import PARTITION_COLUMN
from agenteval_instrumentation import attributes as A


def day_only(batch: pa.RecordBatch) -> Iterable[tuple[str, pa.RecordBatch]]:
    """The baseline: the rule before services had folders (``date=YYYY-MM-DD`` only)."""
    yield from partition_by_experiment(batch)
    ids = batch.column(PARTITION_COLUMN)
    if ids.null_count:
        rest = batch.filter(pc.is_null(ids))
        days = pc.cast(rest.column("start_time"), pa.date32())
        for day in pc.unique(days).to_pylist():
            yield partition_path("date", day.isoformat()), rest.filter(pc.equal(days, pa.scalar(day, pa.date32())))


def make_spans(traces: int, services: int) -> list[list]:
    """Real SDK spans of ``traces`` production traces, one list per service."""
    made = []
    for service in range(services):
        memory = InMemorySpanExporter()
        provider = TracerProvider(resource=Resource.create({"service.name": f"service-{service}"}))
        provider.add_span_processor(SimpleSpanProcessor(memory))
        tracer = provider.get_tracer("agenteval_instrumentation")
        for i in range(traces // services):
            agent = {A.GEN_AI_OPERATION_NAME: "invoke_agent"}
            with tracer.start_as_current_span("invoke_agent assistant", attributes=agent) as root:
                root.set_attribute(
                    A.GEN_AI_INPUT_MESSAGES, f'[{{"role": "user", "parts": [{{"type": "text", "content": "q{i}"}}]}}]'
                )
                chat = {
                    A.GEN_AI_OPERATION_NAME: "chat",
                    A.GEN_AI_REQUEST_MODEL: "gpt-4o-mini",
                    A.GEN_AI_USAGE_INPUT_TOKENS: 120,
                    A.GEN_AI_USAGE_OUTPUT_TOKENS: 12,
                }
                with tracer.start_as_current_span("chat gpt-4o-mini", kind=SpanKind.CLIENT, attributes=chat):
                    pass
                tool = {A.GEN_AI_OPERATION_NAME: "execute_tool", A.GEN_AI_TOOL_NAME: "lookup"}
                with tracer.start_as_current_span("execute_tool lookup", attributes=tool):
                    pass
                root.set_attribute(
                    A.GEN_AI_OUTPUT_MESSAGES, '[{"role": "assistant", "parts": [{"type": "text", "content": "ok"}]}]'
                )
        made.append(list(memory.get_finished_spans()))
        provider.shutdown()
    return made


def median_seconds(work: Callable[[], object], repeats: int) -> float:
    times = []
    for _ in range(repeats):
        started = time.perf_counter()
        work()
        times.append(time.perf_counter() - started)
    return statistics.median(times)


def rounds_of(
    rule: Callable[[pa.RecordBatch], Iterable[tuple[str, pa.RecordBatch]]], batch: pa.RecordBatch, n: int
) -> None:
    for _ in range(n):
        list(rule(batch))


def partitioning(one: list, other: list, repeats: int) -> None:
    """One service's batches of 512 and 10,000 spans, and 10,000 spans of two services interleaved."""
    mixed = [span for pair in zip(one[:5000], other[:5000], strict=True) for span in pair]
    for label, spans in (("one service", one[:512]), ("one service", one[:10_000]), ("two services", mixed)):
        batch = spans_to_batch(spans)
        size = batch.num_rows
        rounds = max(1, 200_000 // size)

        new = median_seconds(functools.partial(rounds_of, partition_spans, batch, rounds), repeats) / rounds * 1e6
        old = median_seconds(functools.partial(rounds_of, day_only, batch, rounds), repeats) / rounds * 1e6
        print(
            f"partition {size:>6} spans, {label}: day+service {new:8.1f} µs, day only (baseline) {old:8.1f} µs, "
            f"ratio {new / old:.2f} ({new / batch.num_rows * 1000:.0f} ns a span)"
        )


def store_figures(spans_by_service: list[list], repeats: int) -> None:
    from agenteval.analysis import build_traces_report
    from agenteval.scorers import score_traces
    from agenteval.store import Store, compact

    with tempfile.TemporaryDirectory() as folder:
        root = Path(folder) / "store"
        exporter = ParquetSpanExporter(root, flush_interval=3600)
        for spans in spans_by_service:
            for start in range(0, len(spans), 512):
                exporter.export(spans[start : start + 512])
        exporter.shutdown()
        store = Store(root)
        compact(store)
        traces = store.rows("SELECT count(*) AS n FROM traces")[0]["n"]
        spans = store.rows("SELECT count(*) AS n FROM spans")[0]["n"]
        count = median_seconds(lambda: store.rows("SELECT count(*) AS n, sum(cost_usd) FROM traces"), repeats)
        report = median_seconds(lambda: build_traces_report(store), repeats)
        print(f"store: {traces:,} traces, {spans:,} spans, {len(spans_by_service)} services")
        print(f"traces view, count and cost of every trace: {count:.3f} s")
        print(f"report --traces: {report:.3f} s")
        scoring = median_seconds(lambda: score_traces(store, scorers=["tool_errors"]), 1)
        print(f"rescore --traces (tool_errors, every trace): {scoring:.3f} s, {traces / scoring:,.0f} traces/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--traces", type=int, default=100_000)
    parser.add_argument("--services", type=int, default=4)
    parser.add_argument("--repeats", type=int, default=5)
    options = parser.parse_args()
    spans_by_service = make_spans(options.traces, options.services)
    partitioning(spans_by_service[0], spans_by_service[-1], options.repeats)
    store_figures(spans_by_service, options.repeats)


if __name__ == "__main__":
    main()
