"""A scorer's code is not ours: whatever it raises, even ``sys.exit()``, a ``GeneratorExit`` or its own
``BaseException`` subclass, costs the trials it judged an error score each, never the batch nor the run. A
KeyboardInterrupt goes on (in a rescore it is the user's Ctrl-C). Real engine, real run over the mock agent, real
Parquet and DuckDB."""

from __future__ import annotations

import sys

import pyarrow as pa
import pytest
from test_scorers import FEATURES, case, trial

from agenteval import evaluate
from agenteval.scorers import Scorer, batch_scorer, scorer
from agenteval.scorers._engine import ScoringEngine
from agenteval.store import Store


class OwnStop(BaseException):
    """A library's own BaseException subclass, as some test frameworks and CLIs define."""


RAISED = [SystemExit(2), GeneratorExit(), OwnStop("stop here")]


def kinds(exc: BaseException) -> list[Scorer]:
    """A scorer of each kind that raises ``exc``: per trial, per batch, and from its ``when=`` (an async one, which
    needs a run's trials, is :func:`test_a_scorer_that_calls_sys_exit_costs_its_trials_not_the_run`'s)."""

    def raise_it(*_: object) -> bool:
        raise exc

    return [
        scorer(raise_it, name="per_trial"),
        batch_scorer(raise_it, name="per_batch"),
        Scorer("condition", sql="struct_pack(value := 1.0)", when=raise_it),
    ]


@pytest.mark.parametrize("exc", RAISED, ids=lambda e: type(e).__name__)
def test_a_base_exception_from_any_kind_of_scorer_is_its_error_score(exc):
    engine = ScoringEngine([*kinds(exc), scorer(lambda c, t: True, name="fine")])
    rows = [dict(trial(["4"]), trial_id="t1"), dict(trial(["4"]), trial_id="t2")]
    judged = engine.judge(pa.Table.from_pylist(rows, schema=FEATURES), {"c1": case(expected_output="4")})
    scores = {(t.trial_id, s.scorer): s for t in judged.trials() for s in t.scores}
    assert len(scores) == 2 * 4  # every trial judged by every scorer, none lost
    for name in ("per_trial", "per_batch", "condition"):
        for trial_id in ("t1", "t2"):
            assert type(exc).__name__ + ":" in scores[trial_id, name].error, (name, scores[trial_id, name])
            assert scores[trial_id, name].passed is None
    assert scores["t1", "fine"].passed is True
    assert judged.passed == {"t1": False, "t2": False}  # an error never passes


def test_a_keyboard_interrupt_from_a_scorer_goes_on():
    @scorer
    def interrupted(case, features):
        raise KeyboardInterrupt

    engine = ScoringEngine([interrupted])
    with pytest.raises(KeyboardInterrupt):
        engine.judge(pa.Table.from_pylist([trial(["4"])], schema=FEATURES), {"c1": case(expected_output="4")})


@scorer
def exits_on_one_case(case, features):
    """A scorer whose helper calls sys.exit() for one case (an argparse error, a library's own exit)."""
    if case.id == "arithmetic-0002":
        sys.exit(2)
    return True


@scorer
async def own_stop_on_one_case(case, features):
    """An async scorer (a judge) whose library raises its own BaseException subclass for one case."""
    if case.id == "arithmetic-0003":
        raise OwnStop("stop here")
    return True


def test_a_scorer_that_calls_sys_exit_costs_its_trials_not_the_run(tmp_path):
    run = evaluate(
        "mock",
        "arithmetic",
        cases=4,
        attempts=2,
        store=str(tmp_path / "s"),
        progress="none",
        scorers=[exits_on_one_case, own_stop_on_one_case],
    )
    rows = Store(str(tmp_path / "s")).rows(
        "SELECT case_id, outcome, failure_type FROM trials WHERE experiment_id = ? ORDER BY case_id", [run.id]
    )
    assert run.status == "completed" and len(rows) == 8
    odd = ("arithmetic-0002", "arithmetic-0003")
    assert {r["failure_type"] for r in rows if r["case_id"] in odd} == {"scorer_error"}
    assert {r["outcome"] for r in rows if r["case_id"] not in odd} == {"passed"}
