"""Exporter throughput: spans per second through ParquetSpanExporter, and bytes per span on disk.

The spans are real SDK spans shaped like the decorators' (a trial root, a chat span with usage
and messages, a tool span with arguments and result, all stamped with experiment, case and trial
ids). Building the spans is not timed; ``export`` plus publishing the files is. The baseline is
a straightforward per-span conversion (a dict per span, ``json.dumps`` of the attributes,
``Table.from_pylist``), timed the same way.

    python benchmarks/bench_exporter.py [--spans 100000] [--repeats 5]

``--ablate slots typed_struct orjson warm_up`` measures what each of the exporter's shortcuts buys instead
(see benchmarks/ablate.py): throughput with the shortcut on and off, and for ``warm_up`` the first export of
a fresh process (512 spans, the SDK's batch), each in a new interpreter.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import pyarrow as pa
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter
from opentelemetry.trace import SpanKind

from agenteval_exporters import SPAN_SCHEMA, ParquetSpanExporter
from agenteval_exporters.files import publish
from agenteval_instrumentation import attributes as A

BATCH = 512  # the BatchSpanProcessor's default export batch size
ENCODER_SHORTCUTS = ("slots", "typed_struct", "orjson")


def make_spans(count: int) -> list:
    memory = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(memory))
    tracer = provider.get_tracer("agenteval_instrumentation")
    for trial in range(count // 3):
        ids = {A.EXPERIMENT_ID: "bench", A.CASE_ID: f"case-{trial % 200}", A.TRIAL_ID: f"trial-{trial}"}
        with tracer.start_as_current_span("invoke_agent mock", attributes={**ids, A.TRIAL_ATTEMPT: 1}):
            with tracer.start_as_current_span(
                "chat mock-model",
                kind=SpanKind.CLIENT,
                attributes={
                    **ids,
                    A.GEN_AI_OPERATION_NAME: "chat",
                    A.GEN_AI_PROVIDER_NAME: "mock",
                    A.GEN_AI_REQUEST_MODEL: "mock-model",
                    A.GEN_AI_USAGE_INPUT_TOKENS: 42,
                    A.GEN_AI_USAGE_OUTPUT_TOKENS: 7,
                    A.GEN_AI_RESPONSE_FINISH_REASONS: ("stop",),
                    A.GEN_AI_INPUT_MESSAGES: f'{{"question": "What is {trial} + 2?"}}',
                },
            ):
                pass
            with tracer.start_as_current_span(
                "execute_tool calculator",
                attributes={
                    **ids,
                    A.GEN_AI_OPERATION_NAME: "execute_tool",
                    A.GEN_AI_TOOL_NAME: "calculator",
                    A.GEN_AI_TOOL_CALL_ARGUMENTS: f'{{"expression": "{trial} + 2"}}',
                    A.GEN_AI_TOOL_CALL_RESULT: str(trial + 2),
                },
            ):
                pass
    return list(memory.get_finished_spans())


def baseline_table(spans) -> pa.Table:
    rows = []
    for s in spans:
        attributes = dict(s.attributes)
        rows.append(
            {
                "trace_id": format(s.context.trace_id, "032x"),
                "span_id": format(s.context.span_id, "016x"),
                "parent_span_id": format(s.parent.span_id, "016x") if s.parent else None,
                "name": s.name,
                "kind": s.kind.name,
                "start_time": s.start_time,
                "end_time": s.end_time,
                "duration_ms": (s.end_time - s.start_time) / 1e6,
                "status_code": s.status.status_code.name,
                "status_message": s.status.description,
                "service_name": s.resource.attributes.get("service.name"),
                "scope_name": s.instrumentation_scope.name,
                "operation": attributes.get(A.GEN_AI_OPERATION_NAME),
                "provider": attributes.get(A.GEN_AI_PROVIDER_NAME),
                "request_model": attributes.get(A.GEN_AI_REQUEST_MODEL),
                "response_model": attributes.get(A.GEN_AI_RESPONSE_MODEL),
                "input_tokens": attributes.get(A.GEN_AI_USAGE_INPUT_TOKENS),
                "output_tokens": attributes.get(A.GEN_AI_USAGE_OUTPUT_TOKENS),
                "finish_reason": (attributes.get(A.GEN_AI_RESPONSE_FINISH_REASONS) or [None])[0],
                "tool_name": attributes.get(A.GEN_AI_TOOL_NAME),
                "tool_call_id": attributes.get(A.GEN_AI_TOOL_CALL_ID),
                "error_type": attributes.get(A.ERROR_TYPE),
                "experiment_id": attributes.get(A.EXPERIMENT_ID),
                "case_id": attributes.get(A.CASE_ID),
                "trial_id": attributes.get(A.TRIAL_ID),
                "attempt": attributes.get(A.TRIAL_ATTEMPT),
                "attributes": json.dumps(attributes),
                "events": None,
                "resource": json.dumps(dict(s.resource.attributes)),
            }
        )
    return pa.Table.from_pylist(rows, schema=SPAN_SCHEMA)


def run_agenteval(spans, store: Path) -> float:
    exporter = ParquetSpanExporter(store, max_rows=100_000, flush_interval=3600)
    start = time.perf_counter()
    for i in range(0, len(spans), BATCH):
        exporter.export(spans[i : i + BATCH])
    exporter.force_flush()
    elapsed = time.perf_counter() - start
    exporter.shutdown()
    return elapsed


def run_baseline(spans, store: Path) -> float:
    start = time.perf_counter()
    tables = [baseline_table(spans[i : i + BATCH]) for i in range(0, len(spans), BATCH)]
    publish(store, "spans", "experiment_id=bench", pa.concat_tables(tables))
    return time.perf_counter() - start


def bytes_on_disk(store: Path) -> int:
    return sum(p.stat().st_size for p in (store / "spans").rglob("*.parquet"))


FIRST_EXPORT = """
import sys, time
sys.path.insert(0, sys.argv[2])
from bench_exporter import BATCH, make_spans
from agenteval_exporters import ParquetSpanExporter

spans = make_spans(BATCH)
exporter = ParquetSpanExporter(sys.argv[1], flush_interval=3600)  # warms up here, unless ablated
started = time.perf_counter()
exporter.export(spans)
print((time.perf_counter() - started) * 1000)
exporter.shutdown()
"""


def first_export_ms(warm: bool) -> float:
    """The first export of a fresh process, as a burst right after start-up meets it."""
    env = {k: v for k, v in os.environ.items() if k != "AGENTEVAL_ABLATE"}
    if not warm:
        env["AGENTEVAL_ABLATE"] = "warm_up"
    with tempfile.TemporaryDirectory() as store:
        done = subprocess.run(
            [sys.executable, "-c", FIRST_EXPORT, store, str(Path(__file__).parent)],
            capture_output=True,
            text=True,
            env=env,
            check=True,
        )
    return float(done.stdout)


def ablate(names: list[str], spans: list, repeats: int) -> None:
    from ablate import in_turns, summary

    from agenteval_exporters import ablation

    for name in names:
        assert name in ablation.SHORTCUTS, name
        if name == "warm_up":
            on, off = in_turns(first_export_ms, repeats)
            print(summary(name, on, off, "ms (first export)", higher_is_better=False))
            continue
        module, attribute = ablation.flag(name)

        def spans_per_second(on: bool, module=module, attribute=attribute) -> float:
            setattr(module, attribute, on)
            store = Path(tempfile.mkdtemp())
            try:
                return len(spans) / run_agenteval(spans, store)
            finally:
                setattr(module, attribute, True)
                shutil.rmtree(store)

        on, off = in_turns(spans_per_second, repeats)
        print(summary(name, on, off, "spans/s", higher_is_better=True))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spans", type=int, default=99_999)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--ablate", nargs="+", choices=[*ENCODER_SHORTCUTS, "warm_up"], default=[])
    options = parser.parse_args()
    spans = make_spans(options.spans)
    if options.ablate:
        ablate(options.ablate, spans, options.repeats)
        return
    results = {}
    for name, run in (("ParquetSpanExporter", run_agenteval), ("per-span dict baseline", run_baseline)):
        times, size = [], 0
        for _ in range(options.repeats):
            store = Path(tempfile.mkdtemp())
            times.append(run(spans, store))
            size = bytes_on_disk(store)
            shutil.rmtree(store)
        results[name] = statistics.median(times)
        per_span = results[name] / len(spans) * 1e6
        print(
            f"{name:24} {len(spans) / results[name]:>10,.0f} spans/s  {per_span:6.2f} µs/span  "
            f"{size / len(spans):6.1f} bytes/span  (median of {options.repeats})"
        )
    ratio = results["per-span dict baseline"] / results["ParquetSpanExporter"]
    print(f"speed-up over the per-span baseline: {ratio:.1f}x; target: >= 200,000 spans/s (5 µs/span)")


if __name__ == "__main__":
    main()
