"""Query latency over a synthetic store: 10 million spans, 1 million trials, through the store's views.

The store is generated with DuckDB straight into the store's layout and schema (10 experiments,
one compacted file per table and experiment). Each query runs once to warm up, then its median
of repeated runs is printed. The baseline is the same span filter through JSON extraction from
the ``attributes`` column instead of the typed column.

    python benchmarks/bench_queries.py [--spans 10000000] [--trials 1000000] [--repeats 5] [--keep DIR]
"""

from __future__ import annotations

import argparse
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import duckdb

from agenteval.store import Store

EXPERIMENTS = 10
CATEGORIES = 10
CASES_PER_EXPERIMENT = 1000

QUERIES = {
    "pass rate by category": """
        SELECT c.category, avg(t.passed::INT) AS pass_rate, count(*) AS trials
        FROM trials t JOIN cases c USING (experiment_id, case_id)
        GROUP BY c.category ORDER BY c.category""",
    "p50/p95 duration by span name": """
        SELECT name, quantile_cont(duration_ms, 0.5) AS p50, quantile_cont(duration_ms, 0.95) AS p95
        FROM spans GROUP BY name""",
    "tool calls per trial": """
        SELECT avg(n) AS mean_calls, max(n) AS max_calls FROM (
            SELECT trial_id, count(*) AS n FROM spans WHERE operation = 'execute_tool' GROUP BY trial_id)""",
    "spans of one tool (typed column)": "SELECT count(*) FROM spans WHERE tool_name = 'calculator'",
    "spans of one tool (JSON extraction)": """
        SELECT count(*) FROM spans WHERE json_extract_string(attributes, '$."gen_ai.tool.name"') = 'calculator'""",
}


def generate(store: Store, spans: int, trials: int) -> None:
    store.ensure()
    con = duckdb.connect()
    trials_per = trials // EXPERIMENTS
    spans_per_trial = max(1, spans // trials)
    for e in range(EXPERIMENTS):
        exp = f"exp{e:02d}"
        for table in ("cases", "trials", "spans"):
            (store.root / table / f"experiment_id={exp}").mkdir(parents=True, exist_ok=True)
        con.execute(f"""
            COPY (SELECT '{exp}' AS experiment_id, 'case-' || i AS case_id, i AS line, 'question ' || i AS input,
                         (i * 7)::VARCHAR AS expected_output, 'cat' || (i % {CATEGORIES}) AS category,
                         'medium' AS difficulty, ['t']::VARCHAR[] AS tags, '{{}}' AS "case"
                  FROM range({CASES_PER_EXPERIMENT}) r(i))
            TO '{store.root}/cases/experiment_id={exp}/part-0.parquet' (FORMAT parquet, COMPRESSION zstd)""")
        con.execute(f"""
            COPY (SELECT '{exp}' AS experiment_id, '{exp}-t' || i AS trial_id, 'case-' || (i % {CASES_PER_EXPERIMENT})
                         AS case_id, (i // {CASES_PER_EXPERIMENT} + 1)::INT AS attempt, md5(i::VARCHAR) AS trace_id,
                         CASE WHEN hash(i) % 10 < 8 THEN 'passed' WHEN hash(i) % 10 < 9 THEN 'wrong' ELSE 'failed' END
                           AS outcome,
                         hash(i) % 10 < 8 AS passed, NULL::VARCHAR AS failure_type, false AS infrastructure,
                         NULL::VARCHAR AS error_message, 'reply' AS reply,
                         make_timestamp(1764460800000000 + i * 1000)::TIMESTAMPTZ AS started_at,
                         make_timestamp(1764460800000000 + i * 1000 + 500)::TIMESTAMPTZ AS ended_at,
                         0.5 AS duration_ms, 40 AS input_tokens, 8 AS output_tokens, 0.0001 AS cost_usd,
                         NULL::VARCHAR AS supersedes
                  FROM range({trials_per}) r(i))
            TO '{store.root}/trials/experiment_id={exp}/part-0.parquet' (FORMAT parquet, COMPRESSION zstd)""")
        con.execute(f"""
            COPY (SELECT md5(t::VARCHAR) AS trace_id, md5(i::VARCHAR)[:16] AS span_id,
                         CASE WHEN k = 0 THEN NULL ELSE md5((i - k)::VARCHAR)[:16] END AS parent_span_id,
                         CASE k WHEN 0 THEN 'invoke_agent mock' WHEN 1 THEN 'chat mock-model'
                                ELSE 'execute_tool calculator' END AS name,
                         CASE k WHEN 1 THEN 'CLIENT' ELSE 'INTERNAL' END AS kind,
                         make_timestamp(1764460800000000 + i)::TIMESTAMPTZ AS start_time,
                         make_timestamp(1764460800000000 + i + 300)::TIMESTAMPTZ AS end_time,
                         (hash(i) % 1000) / 10.0 AS duration_ms, 'UNSET' AS status_code,
                         NULL::VARCHAR AS status_message, 'bench' AS service_name,
                         'agenteval_instrumentation' AS scope_name,
                         CASE k WHEN 0 THEN 'invoke_agent' WHEN 1 THEN 'chat' ELSE 'execute_tool' END AS operation,
                         CASE k WHEN 1 THEN 'mock' END AS provider,
                         CASE k WHEN 1 THEN 'mock-model' END AS request_model,
                         CASE k WHEN 1 THEN 'mock-model' END AS response_model,
                         CASE k WHEN 1 THEN 40 END AS input_tokens, CASE k WHEN 1 THEN 8 END AS output_tokens,
                         CASE k WHEN 1 THEN 'stop' END AS finish_reason,
                         CASE WHEN k > 1 THEN 'calculator' END AS tool_name, NULL::VARCHAR AS tool_call_id,
                         NULL::VARCHAR AS error_type, '{exp}' AS experiment_id,
                         'case-' || (t % {CASES_PER_EXPERIMENT}) AS case_id, '{exp}-t' || t AS trial_id, 1 AS attempt,
                         CASE WHEN k > 1 THEN '{{"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": '
                              || '"calculator", "gen_ai.tool.call.arguments": "{{\\"expression\\": \\"2+2\\"}}"}}'
                              ELSE '{{"gen_ai.operation.name": "chat"}}' END AS attributes,
                         NULL::VARCHAR AS events, '{{"service.name": "bench"}}' AS resource
                  FROM (SELECT i, i // {spans_per_trial} AS t, i % {spans_per_trial} AS k
                        FROM range({spans // EXPERIMENTS}) r(i)))
            TO '{store.root}/spans/experiment_id={exp}/part-0.parquet' (FORMAT parquet, COMPRESSION zstd)""")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--spans", type=int, default=10_000_000)
    parser.add_argument("--trials", type=int, default=1_000_000)
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--keep", type=Path, default=None, help="Reuse (or create and keep) the store here.")
    options = parser.parse_args()
    root = options.keep or Path(tempfile.mkdtemp())
    store = Store(root)
    if not (root / "spans" / "experiment_id=exp00").exists():
        started = time.perf_counter()
        generate(store, options.spans, options.trials)
        print(
            f"generated {options.spans:,} spans and {options.trials:,} trials in {time.perf_counter() - started:.1f} s"
        )
    con = store.connect()
    print(
        f"spans: {con.execute('SELECT count(*) FROM spans').fetchone()[0]:,}  "
        f"trials: {con.execute('SELECT count(*) FROM trials').fetchone()[0]:,}"
    )
    medians = {}
    for name, sql in QUERIES.items():
        con.execute(sql).fetchall()  # warm
        runs = []
        for _ in range(options.repeats):
            started = time.perf_counter()
            con.execute(sql).fetchall()
            runs.append(time.perf_counter() - started)
        medians[name] = statistics.median(runs)
        print(f"{name:38} {medians[name] * 1000:8.1f} ms  (median of {options.repeats}, warm)")
    typed, extracted = medians["spans of one tool (typed column)"], medians["spans of one tool (JSON extraction)"]
    print(f"typed column vs JSON extraction: {extracted / typed:.0f}x faster; target: each report query < 1 s warm")
    if options.keep is None:
        shutil.rmtree(root)


if __name__ == "__main__":
    main()
