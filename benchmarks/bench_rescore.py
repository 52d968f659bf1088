"""Rescoring throughput: the deterministic built-in scorers over a large synthetic experiment.

The experiment is generated with DuckDB straight into the store's layout: N trials of the arithmetic
kind (a root span with the reply, a model span, a calculator span each; ids ordered as the runner makes
them), 1,000 cases, one compacted file per table. Each run rescores the whole experiment in a fresh
process; the script prints the median trials/s and peak RSS of the runs. Target: at least 50,000
trials/s, memory bounded by the batch size, not the experiment's size.

    python benchmarks/bench_rescore.py [--trials 1000000] [--batch-size 50000] [--repeats 3] [--keep DIR]
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import duckdb

try:
    from agenteval.analysis import Experiment
    from agenteval.analysis._experiments import save
except ImportError:  # bench_regression runs this script on a baseline from before the packages too
    from agenteval.experiments import Experiment, save
from agenteval.store import Store

CASES = 1000
EXPERIMENT = "20261130-000000-bench0"


def generate(store: Store, trials: int) -> None:
    store.ensure()
    save(store, Experiment(EXPERIMENT, "bench", "arithmetic", "h", "mock", "v", {}, "completed", time.time_ns()))
    con = duckdb.connect()
    for table in ("cases", "trials", "spans"):
        (store.root / table / f"experiment_id={EXPERIMENT}").mkdir(parents=True, exist_ok=True)
    part = f"experiment_id={EXPERIMENT}/part-0.parquet"
    con.execute(f"""
        COPY (SELECT '{EXPERIMENT}' AS experiment_id, 'arithmetic-' || i AS case_id, i AS line,
                     'What is ' || i || ' + 7?' AS input, (i + 7)::VARCHAR AS expected_output, 'addition' AS category,
                     'easy' AS difficulty, []::VARCHAR[] AS tags,
                     '{{"id": "arithmetic-' || i || '", "input": "What is ' || i || ' + 7?", "expected_output": "'
                       || (i + 7) || '", "category": "addition", "expected_tools": ["calculator"]}}' AS "case"
              FROM range({CASES}) r(i))
        TO '{store.root}/cases/{part}' (FORMAT parquet, COMPRESSION zstd)""")
    con.execute(f"""
        COPY (SELECT '{EXPERIMENT}' AS experiment_id, printf('%016x', i) || 'abcdef01' AS trial_id,
                     'arithmetic-' || (i % {CASES}) AS case_id, (i // {CASES} + 1)::INT AS attempt,
                     printf('%032x', i) AS trace_id, 'passed' AS outcome, true AS passed,
                     NULL::VARCHAR AS failure_type, NULL::BOOLEAN AS infrastructure, NULL::VARCHAR AS error_message,
                     'The answer is ' || (i % {CASES} + CASE WHEN i % 10 = 0 THEN 8 ELSE 7 END) || '.' AS reply,
                     make_timestamp(1764460800000000 + i)::TIMESTAMPTZ AS started_at,
                     make_timestamp(1764460800000000 + i + 1)::TIMESTAMPTZ AS ended_at,
                     0.4 AS duration_ms, 30 AS input_tokens, 9 AS output_tokens, 0.00005 AS cost_usd,
                     NULL::VARCHAR AS supersedes
              FROM range({trials}) r(i))
        TO '{store.root}/trials/{part}' (FORMAT parquet, COMPRESSION zstd)""")
    con.execute(f"""
        COPY (SELECT printf('%032x', t) AS trace_id, printf('%016x', t * 3 + k) AS span_id,
                     CASE WHEN k = 0 THEN NULL ELSE printf('%016x', t * 3) END AS parent_span_id,
                     CASE k WHEN 0 THEN 'invoke_agent mock' WHEN 1 THEN 'chat mock-model'
                            ELSE 'execute_tool calculator' END AS name,
                     CASE k WHEN 1 THEN 'CLIENT' ELSE 'INTERNAL' END AS kind,
                     make_timestamp(1764460800000000 + t * 3 + k)::TIMESTAMPTZ AS start_time,
                     make_timestamp(1764460800000000 + t * 3 + k + 1)::TIMESTAMPTZ AS end_time,
                     0.1 AS duration_ms, 'UNSET' AS status_code, NULL::VARCHAR AS status_message,
                     'bench' AS service_name,
                     CASE k WHEN 0 THEN 'agenteval.runner' ELSE 'agenteval_instrumentation' END AS scope_name,
                     CASE k WHEN 0 THEN 'invoke_agent' WHEN 1 THEN 'chat' ELSE 'execute_tool' END AS operation,
                     CASE k WHEN 1 THEN 'mock' END AS provider, CASE k WHEN 1 THEN 'mock-model' END AS request_model,
                     CASE k WHEN 1 THEN 'mock-model' END AS response_model,
                     CASE k WHEN 1 THEN 30 END AS input_tokens, CASE k WHEN 1 THEN 9 END AS output_tokens,
                     CASE k WHEN 1 THEN 'tool_calls' END AS finish_reason,
                     CASE k WHEN 2 THEN 'calculator' END AS tool_name, NULL::VARCHAR AS tool_call_id,
                     NULL::VARCHAR AS error_type, '{EXPERIMENT}' AS experiment_id,
                     'arithmetic-' || (t % {CASES}) AS case_id, printf('%016x', t) || 'abcdef01' AS trial_id,
                     1 AS attempt, NULL::VARCHAR AS role,
                     CASE k
                       WHEN 0 THEN '{{"gen_ai.output.messages": "[{{\\"role\\": \\"assistant\\", \\"parts\\": '
                                   || '[{{\\"type\\": \\"text\\", \\"content\\": \\"The answer is '
                                   || (t % {CASES} + CASE WHEN t % 10 = 0 THEN 8 ELSE 7 END) || '.\\"}}]}}]"}}'
                       WHEN 2 THEN '{{"gen_ai.tool.call.arguments": "{{\\"expression\\": \\"' || (t % {CASES})
                                   || ' + 7\\"}}", "gen_ai.tool.call.result": "' || (t % {CASES} + 7) || '"}}'
                       ELSE '{{}}' END AS attributes,
                     NULL::VARCHAR AS events, '{{"service.name": "bench"}}' AS resource
              FROM (SELECT i // 3 AS t, i % 3 AS k FROM range({trials * 3}) r(i)))
        TO '{store.root}/spans/{part}' (FORMAT parquet, COMPRESSION zstd, ROW_GROUP_SIZE 100000)""")


ONE_RUN = """
import json, sys
try:
    from agenteval.scorers import rescore
except ImportError:  # a baseline from before the packages
    from agenteval.rescore import rescore
from agenteval.store import Store
result = rescore(Store(sys.argv[1]), sys.argv[2], batch_size=int(sys.argv[3]))
print(json.dumps({"trials": result.trials, "scores": result.scores, "seconds": result.seconds,
                  "figures_seconds": getattr(result, "figures_seconds", 0.0),
                  # VmHWM: a child's ru_maxrss would start from its parent's (large after generating)
                  "peak_mb": next(int(l.split()[1]) for l in open("/proc/self/status")
                                  if l.startswith("VmHWM:")) / 1024}))
"""


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--trials", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=50_000)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--keep", type=Path, default=None, help="Reuse (or create and keep) the store here.")
    options = parser.parse_args()
    root = options.keep or Path(tempfile.mkdtemp())
    if not (root / "trials" / f"experiment_id={EXPERIMENT}").exists():
        started = time.perf_counter()
        generate(Store(root), options.trials)
        print(
            f"generated {options.trials:,} trials ({options.trials * 3:,} spans) "
            f"in {time.perf_counter() - started:.1f} s"
        )
    runs = []
    for _ in range(options.repeats):
        done = subprocess.run(
            [sys.executable, "-c", ONE_RUN, str(root), EXPERIMENT, str(options.batch_size)],
            capture_output=True,
            text=True,
            check=True,
        )
        runs.append(json.loads(done.stdout))
    seconds = statistics.median(r["seconds"] for r in runs)
    trials = runs[0]["trials"]
    print(
        f"rescored {trials:,} trials ({runs[0]['scores']:,} scores) in batches of {options.batch_size:,}: "
        f"{trials / seconds:,.0f} trials/s, {seconds:.1f} s, "
        f"then {statistics.median(r['figures_seconds'] for r in runs):.1f} s saving the figures for reports, "
        f"peak RSS {statistics.median(r['peak_mb'] for r in runs):.0f} MB "
        f"(median of {options.repeats}); target >= 50,000 trials/s"
    )
    if options.keep is None:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
