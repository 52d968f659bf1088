"""The store is an open format: engines other than DuckDB read it as it is and compute what the report
computes. ClickHouse (embedded, as chdb) and Polars run the queries docs/store.md shows, over a store with
failures, wrong answers and a rescoring pass, and give the report's pass rate for every category."""

from __future__ import annotations

import json
import math
import re
import subprocess
from pathlib import Path

import pytest
from real_parts import CHDB, environment

from agenteval.analysis import build_report
from agenteval.run import evaluate
from agenteval.scorers import rescore, scorer
from agenteval.store import Store

DOCS = Path(__file__).resolve().parents[1] / "docs" / "store.md"
SECTION = "### A pass rate in any engine"


def example(language: str) -> str:
    text = DOCS.read_text()
    return re.findall(rf"```{language}\n(.*?)```", text[text.index(SECTION) :], flags=re.S)[0]


@scorer(name="answer_match", version="strict")
def strict_on_first_attempts(case, features):
    """A rescoring pass that fails every first attempt: current scores must be picked from two passes."""
    return features.attempt != 1 and "The answer is" in features.reply


@pytest.fixture(scope="module")
def store(tmp_path_factory) -> Store:
    store = Store(tmp_path_factory.mktemp("engines") / "store")
    options = {"wrong_rate": "0.2", "fail_rate": "0.1", "failure": "tool_error", "seed": "5"}
    first = evaluate("mock", "arithmetic", cases=40, attempts=3, store=store, progress="none", agent_options=options)
    evaluate("mock", "arithmetic", cases=20, attempts=1, store=store, progress="none")
    rescore(store, first.id, [strict_on_first_attempts])
    return store


def reported(store: Store) -> dict[tuple[str, str], tuple[float, int]]:
    ids = [row["experiment_id"] for row in store.rows("SELECT experiment_id FROM experiments")]
    return {(eid, c.category): (c.pass_rate, c.trials) for eid in ids for c in build_report(store, eid).categories}


def assert_same(found: dict[tuple[str, str], tuple[float, int]], expected: dict) -> None:
    assert found.keys() == expected.keys()
    for key, (rate, trials) in expected.items():
        assert found[key][1] == trials and math.isclose(found[key][0], rate, abs_tol=1e-12), key


@pytest.mark.heavy
def test_clickhouse_gives_the_report_s_pass_rate_per_category(store):
    python = environment("chdb", CHDB, override="AGENTEVAL_CHDB_PYTHON")
    sql = example("sql").replace(".agenteval", str(store.root))
    script = "import chdb, sys\nprint(chdb.query(sys.stdin.read(), 'JSONEachRow'))"
    done = subprocess.run([python, "-c", script], input=sql, capture_output=True, text=True, check=True, timeout=300)
    rows = [json.loads(line) for line in done.stdout.splitlines() if line.strip()]
    found = {(r["experiment_id"], r["category"]): (r["pass_rate"], int(r["trials"])) for r in rows}
    assert_same(found, reported(store))


def test_polars_gives_the_report_s_pass_rate_per_category(store):
    namespace: dict = {}
    exec(example("python").replace(".agenteval", str(store.root)), namespace)
    rows = namespace["by_category"].to_dicts()
    found = {(r["experiment_id"], r["category"]): (r["pass_rate"], r["trials"]) for r in rows}
    assert_same(found, reported(store))
