"""Every way into the store that the store guide (docs/store.md) shows works on a store a real run wrote,
compacted, beside files of an older version: its DuckDB queries and its pandas, pyarrow and Polars code, run as
written there."""

from __future__ import annotations

import re
from pathlib import Path

import duckdb
import pyarrow as pa
import pytest
from click.testing import CliRunner

from agenteval.cli import main
from agenteval.run import evaluate
from agenteval.store import Store
from agenteval_exporters import SPAN_SCHEMA
from agenteval_exporters.files import publish

GUIDE = (Path(__file__).resolve().parents[1] / "docs" / "store.md").read_text()
SECTION = GUIDE[GUIDE.index("\n## SQL over the store\n") :].split("\n## ")[1]


def blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", SECTION, flags=re.S)


@pytest.fixture(scope="module")
def workdir(tmp_path_factory) -> Path:
    """A folder whose ``.agenteval`` holds a compacted run and an older version's span file, sorted first."""
    folder = tmp_path_factory.mktemp("readable")
    root = folder / ".agenteval"
    experiment = evaluate("mock", "arithmetic", cases=4, attempts=2, store=root, progress="none")
    assert CliRunner().invoke(main, ["compact", "--store", str(root)]).exit_code == 0
    old_fields = [f for f in SPAN_SCHEMA if f.name not in ("input_tokens", "output_tokens", "scope_name")]
    row = {f.name: None for f in old_fields}
    row.update(trace_id="t" * 32, span_id="s" * 16, name="old", kind="INTERNAL", status_code="UNSET")
    row.update(start_time=1, end_time=2, duration_ms=0.0, experiment_id="0-old")
    publish(Store(root).root, "spans", "experiment_id=0-old", pa.Table.from_pylist([row], schema=pa.schema(old_fields)))
    folder.joinpath("expected").write_text(experiment.id)
    return folder


def counts(root: Path) -> tuple[int, int, int]:
    """Spans, trials and passed trials, as the store's own views give them."""
    store = Store(root)
    (spans,) = store.query("SELECT count(*) FROM spans").to_pylist()[0].values()
    (trials,) = store.query("SELECT count(*) FROM trial_history").to_pylist()[0].values()
    (passed,) = store.query("SELECT count(*) FROM trial_history WHERE outcome = 'passed'").to_pylist()[0].values()
    return spans, trials, passed


def test_the_guide_s_pandas_and_pyarrow_code_reads_every_row_and_column(workdir, monkeypatch):
    (code,) = [b for b in blocks("python") if "pd.read_parquet" in b]
    monkeypatch.chdir(workdir)
    spans_total, _, passed_total = counts(workdir / ".agenteval")
    scope: dict = {}
    exec(compile(code, "docs/store.md", "exec"), scope)
    spans, passed = scope["spans"], scope["passed"]
    assert len(spans) == spans_total and list(spans.columns) == SPAN_SCHEMA.names
    assert set(spans["experiment_id"]) == {"0-old", (workdir / "expected").read_text()}
    assert spans["input_tokens"].sum() > 0  # a column the older file, opened first, does not have
    assert passed.num_rows == passed_total > 0


def test_the_guide_s_polars_code_reads_every_span_and_column(workdir, monkeypatch):
    (code,) = [b for b in blocks("python") if "import polars" in b and "SPAN_SCHEMA" in b]
    monkeypatch.chdir(workdir)
    spans_total, _, _ = counts(workdir / ".agenteval")
    scope: dict = {}
    exec(compile(code, "docs/store.md", "exec"), scope)
    spans = scope["spans"].collect()
    assert spans.height == spans_total and spans.columns == SPAN_SCHEMA.names
    assert set(spans["experiment_id"]) == {"0-old", (workdir / "expected").read_text()}
    tokens = dict(scope["tokens"].iter_rows())
    assert tokens["old"] == 0 and sum(tokens.values()) == spans["input_tokens"].sum() > 0


def test_the_guide_s_duckdb_queries_run(workdir, monkeypatch):
    monkeypatch.chdir(workdir)
    spans_total, _, _ = counts(workdir / ".agenteval")
    (sql,) = [b for b in blocks("sql") if "read_parquet" in b]
    statements = [part for part in sql.split(";") if part.strip()]
    assert len(statements) == 2
    con = duckdb.connect()
    by_name = con.execute(statements[0]).fetchall()
    assert sum(n for _, n in by_name) == spans_total
    by_experiment = dict(con.execute(statements[1]).fetchall())
    assert sum(by_experiment.values()) == spans_total and "0-old" in by_experiment


def test_pandas_default_call_is_the_one_the_guide_warns_about(workdir, monkeypatch):
    """Why the guide passes partitioning=None: without it pyarrow reads experiment_id twice."""
    import pandas as pd

    monkeypatch.chdir(workdir)
    with pytest.raises(pa.ArrowTypeError, match="experiment_id has incompatible types"):
        pd.read_parquet(".agenteval/trials")
