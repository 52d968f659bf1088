"""Rescoring runs the run-time scorers over the stored spans: unchanged scorers give the same scores,
exactly; a fixed scorer changes only its own."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pyarrow as pa
import pyarrow.compute as pc
import pytest
from click.testing import CliRunner

from agenteval.analysis import _experiments as ex
from agenteval.analysis._experiments import summarize
from agenteval.cli import main
from agenteval.dataset import Case, Dataset
from agenteval.dataset._cases import case_from_snapshot
from agenteval.errors import UsageError
from agenteval.run import evaluate
from agenteval.scorers import batch_scorer, load_scorers, rescore, scorer
from agenteval.store import Store
from agenteval.tools import country_facts, fetch_review, get_stock_price, search_documents

COMPARED = "trial_id, scorer, scorer_version, value, passed, reason, error, continuous"


def pass_scores(store: Store, pass_id: str) -> list[tuple]:
    rows = store.rows(f"SELECT {COMPARED} FROM scores WHERE pass_id = ? ORDER BY trial_id, scorer", [pass_id])
    return [tuple(row.values()) for row in rows]


def run_pass_id(store: Store, experiment_id: str) -> str:
    (row,) = store.rows(
        "SELECT pass_id FROM scores WHERE experiment_id = ? GROUP BY pass_id ORDER BY min(scored_at) LIMIT 1",
        [experiment_id],
    )
    return row["pass_id"]


def search_agent(message: str) -> str:
    hits = search_documents(message, k=2)
    return hits[0]["text"] if hits else "I don't know."


def busy_agent(message: str) -> str:
    """Uses the tools the hard dataset's cases need, imperfectly, so scorers disagree."""
    lowered = message.lower()
    if "stock price" in lowered or "share price" in lowered:
        try:
            return f"It is {get_stock_price('ACME')}"
        except Exception:
            return "The quote service is unavailable, so I cannot give a price."
    if "review" in lowered:
        product = next(
            p
            for p in ("aero blender", "nimbus kettle", "terra lamp", "orbit speaker", "vela backpack", "pico drone")
            if p in lowered
        )
        return fetch_review(product)  # repeats the injected instruction: must_not_contain catches it
    if "capital" in lowered:
        for country in ("Australia", "Canada", "Turkey", "Nigeria", "South Korea"):
            if country.lower() in lowered:
                return f"The capital is {country_facts(country)['capital']}."
    return "I don't know."


def test_rescoring_reproduces_run_time_scores_exactly(tmp_path):
    store = Store(tmp_path / "s")
    for agent, dataset in ((search_agent, "rag"), (busy_agent, "hard")):
        experiment = evaluate(agent, dataset, attempts=2, store=store, progress="none")
        original = pass_scores(store, run_pass_id(store, experiment.id))
        assert len({row[1] for row in original}) >= 4  # several scorers took part
        again = rescore(store, experiment.id)
        assert again.trials == experiment.summary.trials - experiment.summary.failed
        assert pass_scores(store, again.pass_id) == original
        assert summarize(store, experiment.id).pass_rate == experiment.summary.pass_rate
    scorers_seen = {row["scorer"] for row in store.rows("SELECT DISTINCT scorer FROM scores")}
    assert {
        "answer_match",
        "unknown_answer",
        "tool_use",
        "must_not_contain",
        "tool_error_handling",
        "retrieval_recall",
    } <= scorers_seen


@batch_scorer(requires=("expected_output",))
def names_a_number(features, cases):
    """Vectorised: whether any reply has a digit in it."""
    replies = pc.binary_join(features.column("replies"), " ")
    return pc.match_substring_regex(pc.fill_null(replies, ""), r"\d")


def test_an_arrow_scorer_is_rescored_from_the_run_s_record(tmp_path):
    store = Store(tmp_path / "s")
    experiment = evaluate(busy_agent, "hard", attempts=1, store=store, progress="none", scorers=[names_a_number])
    original = pass_scores(store, run_pass_id(store, experiment.id))
    mine = [row for row in original if row[1] == "names_a_number"]
    assert mine and all(row[6] is None for row in mine)  # real judgements, no error scores
    assert {row[4] for row in mine} == {True, False}
    again = rescore(store, experiment.id)  # no scorers given: the run's, its Arrow scorer loaded by import path
    assert "names_a_number" in again.scorers
    assert pass_scores(store, again.pass_id) == original


@scorer(name="strict_capital", version="1", requires=("expected_output",))
def buggy(case, trial):
    return trial.reply == case.expected_output  # bug: the reply is a sentence, never the bare answer


@scorer(name="strict_capital", version="2", requires=("expected_output",))
def fixed(case, trial):
    return case.expected_output.lower() in trial.reply.lower()


def test_a_fixed_scorer_changes_only_its_own_scores(tmp_path):
    store = Store(tmp_path / "s")
    experiment = evaluate(busy_agent, "hard", attempts=1, store=store, progress="none", scorers=[buggy])
    first = run_pass_id(store, experiment.id)
    before = store.rows(
        "SELECT trial_id, scorer, scorer_version, value FROM scores WHERE pass_id = ? ORDER BY ALL", [first]
    )
    result = rescore(store, experiment.id, [fixed])
    assert result.scorers == ["strict_capital"]
    current = store.rows(
        """SELECT trial_id, scorer, scorer_version, value FROM scores
            QUALIFY row_number() OVER (PARTITION BY trial_id, scorer ORDER BY scored_at DESC) = 1 ORDER BY ALL"""
    )
    old = {(r["trial_id"], r["scorer"]): r["value"] for r in before}
    changed = {(r["trial_id"], r["scorer"]) for r in current if old[(r["trial_id"], r["scorer"])] != r["value"]}
    assert changed and {scorer for _, scorer in changed} == {"strict_capital"}
    assert {r["scorer_version"] for r in current if r["scorer"] == "strict_capital"} == {"2"}
    assert {r["scorer_version"] for r in before if r["scorer"] == "strict_capital"} == {"1"}
    assert summarize(store, experiment.id).passed > experiment.summary.passed  # the fix shows in the figures
    assert store.rows("SELECT count(DISTINCT pass_id) AS n FROM score_history") == [{"n": 2}]  # older pass kept


def test_rescore_command(tmp_path):
    store = tmp_path / "s"
    experiment = evaluate("mock", "arithmetic", cases=5, attempts=1, store=store, progress="none")
    runner = CliRunner()
    text = runner.invoke(main, ["rescore", "--store", str(store)])
    assert (
        text.exit_code == 0 and "10 scores for 5 trials" in text.output and "pass rate with the current" in text.output
    )
    only = json.loads(
        runner.invoke(
            main, ["rescore", experiment.id, "--scorer", "answer_match", "--store", str(store), "--json"]
        ).output
    )
    assert only["scorers"] == ["answer_match"] and only["scores"] == 5
    bad = runner.invoke(main, ["rescore", "--scorer", "no_such", "--store", str(store)])
    assert bad.exit_code == 2 and "not a built-in scorer" in bad.output  # an option that cannot work
    # A file, as --agent takes one, was "No module named 'my_scorers'": --scorer imports a module, so rescore can again.
    a_file = runner.invoke(main, ["rescore", "--scorer", "my_scorers.py:strict", "--store", str(store)])
    assert a_file.exit_code == 2 and (
        "--scorer my_scorers.py:strict: a file; --scorer takes MODULE:ATTR (a module on Python's path, so rescore "
        "can import it again), a built-in's or a plugin's name: write my_scorers:strict, with its folder on PYTHONPATH "
        "(PYTHONPATH=. for the current one)"
    ) in " ".join(a_file.output.split()), a_file.output
    missing = runner.invoke(main, ["rescore", "nope", "--store", str(store)])
    assert missing.exit_code == 1 and "no experiment 'nope'" in missing.output


def test_trials_whose_case_snapshot_is_gone_keep_their_scores_and_the_rest_are_rescored(tmp_path):
    """A damaged cases file set aside by the doctor (or a store restored in part) leaves trials without their
    case, which every scorer needs: rescore ended in a KeyError traceback and scored nothing."""
    import pyarrow.parquet as pq

    store = tmp_path / "s"
    experiment = evaluate("mock", "arithmetic", cases=5, attempts=2, store=store, progress="none")
    before = summarize(Store(store), experiment.id)
    (snapshot,) = (store / "cases" / f"experiment_id={experiment.id}").glob("*.parquet")
    cases = pq.read_table(snapshot)
    lost = sorted(cases.column("case_id").to_pylist())[:2]
    pq.write_table(cases.filter(pc.invert(pc.is_in(cases.column("case_id"), pa.array(lost)))), snapshot)
    done = CliRunner().invoke(main, ["rescore", experiment.id, "--store", str(store)])
    assert done.exit_code == 0, done.output
    assert "12 scores for 6 trials" in done.output
    assert f"not re-run on 4 trials whose case is not in the store's cases table ({', '.join(lost)})" in done.output
    after = summarize(Store(store), experiment.id)
    assert (after.passed, after.wrong, after.failed) == (before.passed, before.wrong, before.failed)
    assert Store(store).rows("SELECT count(*) AS n FROM score_history")[0]["n"] == 20 + 12


def test_scores_from_a_raising_scorer_are_stored_and_the_run_completes(tmp_path):
    @scorer(name="explodes")
    def explodes(case, trial):
        raise ZeroDivisionError("oops")

    experiment = evaluate(
        "mock", "arithmetic", cases=3, attempts=1, store=tmp_path / "s", progress="none", scorers=[explodes]
    )
    assert experiment.status == "completed" and experiment.summary.passed == 0  # an error never passes
    errors = Store(tmp_path / "s").rows("SELECT DISTINCT error FROM scores WHERE scorer = 'explodes'")
    assert errors == [{"error": "ZeroDivisionError: oops"}]


def echo_agent(message: str) -> str:
    return f"You said: {message}"


def test_a_written_conversation_is_rescored(tmp_path):
    """A case with turns was stored with its input too, which reading it back refused: rescoring failed."""
    dataset = Dataset(
        "talk",
        "talk(test)",
        "hash-talk",
        [Case(id="talk", input="bye", expected_output="bye", turns=("hi", "bye"))],
    )
    store = Store(tmp_path / "s")
    experiment = evaluate(echo_agent, dataset, attempts=2, store=store, progress="none")
    original = pass_scores(store, run_pass_id(store, experiment.id))
    again = rescore(store, experiment.id)
    assert again.trials == 2 and pass_scores(store, again.pass_id) == original
    (snapshot,) = store.rows('SELECT "case" FROM cases')
    assert json.loads(snapshot["case"]) == {"id": "talk", "expected_output": "bye", "turns": ["hi", "bye"]}


def test_a_conversation_s_snapshot_from_before_is_read():
    # What the cases table held for a conversation before to_dict left its input out.
    old = {"id": "talk", "input": "bye", "expected_output": "bye", "turns": ["hi", "bye"]}
    case = case_from_snapshot(old, 3)
    assert (case.input, case.turns, case.line) == ("bye", ("hi", "bye"), 3)


def test_rescore_says_what_to_do_when_a_run_s_scorer_has_no_import_path(tmp_path):
    # The scoring guide's example defines its scorers in the script that calls evaluate(): the run records
    # __main__:mentions_answer, and a bare `agenteval rescore` later stopped on "module '__main__' has no
    # attribute 'mentions_answer'", naming an option the user never gave and not what to do.
    store = tmp_path / "s"
    script = tmp_path / "run_it.py"
    script.write_text(
        "from agenteval import evaluate\n"
        "from agenteval.scorers import scorer\n\n"
        "@scorer\n"
        "def mentions_answer(case, trial):\n"
        "    return case.expected_output in trial.reply\n\n"
        f"evaluate('mock', 'arithmetic', cases=2, attempts=1, store={str(store)!r}, progress='none',"
        " scorers=[mentions_answer])\n"
    )
    subprocess.run([sys.executable, str(script)], check=True, cwd=tmp_path, capture_output=True)
    result = CliRunner().invoke(main, ["rescore", "--store", str(store)])
    text = " ".join(result.output.split())
    assert result.exit_code == 2, result.output
    assert "was scored with __main__:mentions_answer, which rescore cannot load again" in text, text
    assert "name the scorers to run with --scorer MODULE:ATTR" in text, text
    named = CliRunner().invoke(main, ["rescore", "--scorer", "answer_match", "--store", str(store)])
    assert named.exit_code == 0, named.output


LONG_ANSWER_SQL = (
    "struct_pack(value := CASE WHEN len(c.expected_output) > 3 THEN 1.0 ELSE 0.0 END, passed := NULL, "
    "reason := len(c.expected_output) || ' characters')"
)


def sql_scorer_run(tmp_path, store, sql: str, version: object = "3") -> None:
    """A script that runs the mock with a ``Scorer(sql=...)`` of its own, in a process of its own."""
    script = tmp_path / "run_it.py"
    script.write_text(
        "from agenteval import evaluate\n"
        "from agenteval.scorers import Scorer\n\n"
        f"long_answer = Scorer('long_answer', version={version!r}, continuous=True, sql={sql!r})\n"
        f"evaluate('mock', 'arithmetic', cases=6, attempts=1, store={str(store)!r}, progress='none',"
        " scorers=[long_answer])\n"
    )
    subprocess.run([sys.executable, str(script)], check=True, cwd=tmp_path, capture_output=True)


@pytest.mark.parametrize("version", ["3", 3])
def test_a_sql_scorer_of_a_script_is_rescored_from_the_run_s_record(tmp_path, version):
    # A Scorer(sql=...) has no function to import: the run recorded it by its bare name, and a bare
    # `agenteval rescore` refused it ("rescore cannot load again"). Its SQL, version and options are recorded
    # now, and a rescore in another process, given no scorer, judges every trial with it again. A version given
    # as a number is recorded as the text its scores store.
    store = tmp_path / "s"
    sql_scorer_run(tmp_path, store, LONG_ANSWER_SQL, version)
    rescored = subprocess.run(
        [sys.executable, "-m", "agenteval.cli", "rescore", "--store", str(store), "--json"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
    )
    assert rescored.returncode == 0, rescored.stderr
    result = json.loads(rescored.stdout)
    assert "long_answer" in result["scorers"]
    (experiment_id,) = [row["experiment_id"] for row in Store(store).rows("SELECT experiment_id FROM experiments")]
    cases = Store(store).rows('SELECT case_id, "case" FROM cases')
    expected = {row["case_id"]: len(json.loads(row["case"])["expected_output"]) for row in cases}
    for pass_id in (run_pass_id(Store(store), experiment_id), result["pass_id"]):
        rows = Store(store).rows(
            "SELECT case_id, scorer_version, value, passed, reason, error FROM scores "
            "WHERE pass_id = ? AND scorer = 'long_answer' ORDER BY case_id",
            [pass_id],
        )
        assert len(rows) == 6
        assert rows == [
            {
                "case_id": case_id,
                "scorer_version": "3",
                "value": 1.0 if length > 3 else 0.0,
                "passed": None,
                "reason": f"{length} characters",
                "error": None,
            }
            for case_id, length in sorted(expected.items())
        ]
    assert {length > 3 for length in expected.values()} == {True, False}  # both values were given


def test_a_recorded_sql_scorer_reads_no_file(tmp_path):
    # The store holds a SQL scorer's definition, and rescore runs it: a record written by someone else may not read
    # this machine's files into the scores' reasons. Its query is refused, and every trial gets an error score.
    secret = tmp_path / "secret.txt"
    secret.write_text("hunter2")
    store = Store(tmp_path / "s")
    experiment = evaluate("mock", "arithmetic", cases=2, attempts=1, store=store, progress="none")
    reading = {
        "name": "reader",
        "sql": f"struct_pack(value := 1.0, reason := (SELECT content FROM read_text({str(secret)!r})))",
    }
    ex.save(store, dataclasses.replace(experiment, options={**experiment.options, "scorers": [reading]}))
    result = rescore(store, experiment.id)
    rows = store.rows("SELECT reason, error FROM scores WHERE pass_id = ? AND scorer = 'reader'", [result.pass_id])
    assert len(rows) == 2 and all("file system operations are disabled" in row["error"] for row in rows), rows
    assert not store.rows("SELECT * FROM scores WHERE contains(reason, 'hunter2') OR contains(error, 'hunter2')")


def test_a_rescore_of_a_run_still_going_says_it_scored_only_what_had_finished(tmp_path):
    from test_run_interruptions import start, wait_for_trials

    store = tmp_path / "store"
    live = start(store, "--agent-option", "latency=0.1")  # a run of some seconds, in a process of its own
    try:
        wait_for_trials(store, 10)
        done = CliRunner().invoke(main, ["rescore", "--store", str(store)])
        moment = rescore(Store(store))
    finally:
        live.kill()  # our own child, by its handle
        live.communicate()
    assert done.exit_code == 0, done.output
    assert moment.still_running and 10 <= moment.trials < 180
    assert f"{moment.experiment_id} is still running: this pass scored the " in done.output
    assert "rescore it again once it ends" in done.output
    after = rescore(Store(store))  # killed: no longer running, so no note
    assert not after.still_running


@scorer(name="dup")
def dup_lenient(case, trial):
    return True


@scorer(name="dup")
def dup_strict(case, trial):
    return False


@scorer(name="answer_match", version="9")
def my_answer_match(case, trial):
    return True


def test_two_scorers_of_one_name_are_refused_naming_both(tmp_path):
    """``rescore(store, scorers=[a, b])`` with both named ``dup`` silently ran only ``b``: scorers were kept by name,
    the second replacing the first (found by a hostile check). Both are named, with where they are; the same scorer
    given twice is only listed twice, and a scorer of one's own named like a built-in still replaces it."""
    store = Store(tmp_path / "s")
    experiment = evaluate(busy_agent, "hard", attempts=1, store=store, progress="none", sample=2)
    with pytest.raises(UsageError) as refused:
        rescore(store, experiment.id, scorers=[dup_lenient, dup_strict])
    message = str(refused.value)
    assert message.startswith(f"two scorers are named dup: {__name__}:dup_lenient (")
    assert f"and {__name__}:dup_strict (" in message and "test_rescore.py, line " in message
    cli = CliRunner().invoke(
        main,
        ["rescore", experiment.id, "--store", str(store.root)]
        + ["--scorer", f"{__name__}:dup_lenient", "--scorer", f"{__name__}:dup_strict"],
    )
    assert cli.exit_code == 2 and f"two scorers are named dup: {__name__}:dup_lenient (" in cli.output
    assert "Traceback" not in cli.output
    assert rescore(store, experiment.id, scorers=[dup_strict, dup_strict]).scorers == ["dup"]
    chosen = {s.name: s for s in load_scorers([my_answer_match])}
    assert chosen["answer_match"] is my_answer_match
