"""A resume adds trials to a run only when they are comparable with its first ones: judged by the same scorers,
over the same dataset and corpus, by the same agent. Each test resumes a real run in a real store."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import model_servers as ms
import pytest

from agenteval.analysis import _experiments as ex
from agenteval.dataset import Case, Dataset, load_dataset
from agenteval.dataset._cases import dataset_hash
from agenteval.dataset._catalog import RAG_CORPUS, datasets_dir
from agenteval.run import RunRefused, evaluate
from agenteval.scorers import Scorer, rescore, scorer
from agenteval.store import Store


@scorer
def never(case, features):
    """A scorer no answer passes: the trials it judges are all wrong."""
    return False


def answers_ok(question: str) -> str:
    return "ok"


def failing_run(store, **extra):
    """A run of the mock whose quota runs out on some trials: infrastructure failures ``retry_failed="infra"``
    runs again, in a resume."""
    return dict(
        cases=10,
        attempts=2,
        store=store,
        progress="none",
        agent_options={"fail_rate": "0.5", "failure": "quota_exhausted", "seed": "1"},
        **extra,
    )


def scorer_sets(store, experiment_id) -> set[tuple[str, ...]]:
    """The sets of scorers the experiment's current trials were judged by (one set when they are comparable)."""
    rows = Store(store).rows(
        "SELECT trial_id, list(scorer ORDER BY scorer) AS scorers FROM scores WHERE experiment_id = ? GROUP BY 1",
        [experiment_id],
    )
    return {tuple(row["scorers"]) for row in rows}


def test_a_resume_is_refused_scorers_other_than_the_run_was_judged_by(tmp_path):
    """A scorer given to a resume judged the resumed trials only, beside the run's own: the first trials passed
    by one definition of passing and the resumed ones by another, in one pass rate (a scorer no answer passes made
    the resumed trials wrong and left the first ones passed). Now the resume is refused, naming the scorers;
    given the run's own again, or none, it resumes and every trial is judged by the same scorers."""
    store = tmp_path / "s"
    first = evaluate("mock", "arithmetic", **failing_run(store))
    assert first.summary.failed > 0
    with pytest.raises(RunRefused, match="other scorers than it ran with: .*never given, the built-ins alone"):
        evaluate("mock", "arithmetic", resume=first.id, retry_failed="infra", scorers=[never], **failing_run(store))
    assert Store(store).rows("SELECT count(*) AS n FROM trial_history") == [{"n": 20}]
    again = evaluate("mock", "arithmetic", resume=first.id, retry_failed="infra", **failing_run(store))
    assert again.summary.passed == again.summary.trials - again.summary.failed
    assert len(scorer_sets(store, first.id)) == 1

    judged = evaluate("mock", "arithmetic", scorers=[never], **failing_run(store))
    with pytest.raises(RunRefused, match="other scorers"):
        evaluate(
            "mock", "arithmetic", resume=judged.id, retry_failed="infra", scorers=["tool_errors"], **failing_run(store)
        )
    resumed = evaluate(
        "mock", "arithmetic", resume=judged.id, retry_failed="infra", scorers=[never], **failing_run(store)
    )
    assert resumed.summary.passed == 0 and resumed.options["scorers"] == [f"{__name__}:never"]
    (judged_by,) = scorer_sets(store, judged.id)
    assert "never" in judged_by


def test_a_resume_is_refused_when_the_corpus_changed(model_server, tmp_path):
    """The search tool's corpus (``--corpus``) was recorded by its path only: edited between a run and its resume,
    the resumed trials searched other documents than the first ones, in one experiment. Now its content hash is
    recorded, and a changed corpus refuses the resume as a changed dataset does; as it was, it resumes."""
    corpus = tmp_path / "corpus.jsonl"
    documents = (datasets_dir() / RAG_CORPUS).read_text(encoding="utf-8")
    corpus.write_text(documents, encoding="utf-8")
    cases = load_dataset("rag").cases
    model_server.responder = ms.CaseResponder(cases, {case.input: ms.quota_exhausted() for case in cases})
    run = dict(model="openai/test-model", base_url=model_server.openai_url, corpus=corpus, attempts=1, sample=4)
    run |= dict(sample_seed=0, store=tmp_path / "s", progress="none")
    first = evaluate("", "rag", **run)
    assert first.summary.failures_by_type == {"quota_exhausted": 4} and first.options["corpus_hash"]
    model_server.responder = ms.CaseResponder(cases)
    model_server.requests.clear()
    corpus.write_text("".join(documents.splitlines(keepends=True)[1:]), encoding="utf-8")  # one document less
    with pytest.raises(RunRefused, match="the corpus .*corpus.jsonl changed since it started"):
        evaluate("", "rag", resume=first.id, retry_failed="infra", **run)
    assert not model_server.requests
    corpus.write_text(documents, encoding="utf-8")
    resumed = evaluate("", "rag", resume=first.id, retry_failed="infra", **run)
    assert resumed.summary.this_run["trials"] == 4 and resumed.summary.failed == 0


def test_a_resume_is_refused_when_a_scorer_of_the_run_changed_version(tmp_path):
    """A scorer whose logic changed between a run and its resume (its version bumped, as its docstring asks) judged
    the resumed trials by the new logic and the first ones by the old, in one pass rate. Now a resume is refused
    while the run's trials were judged by another version of a scorer it would judge with; once ``rescore`` has
    judged them all with the scorer as it is, it resumes, and every trial counts scores of one version."""
    store = tmp_path / "s"
    first = evaluate("mock", "arithmetic", scorers=[never], **failing_run(store))
    assert first.summary.failed > 0
    stricter = dataclasses.replace(never, version="2")
    with pytest.raises(RunRefused, match="never version 1 .*2 now.* agenteval rescore"):
        evaluate("mock", "arithmetic", resume=first.id, retry_failed="infra", scorers=[stricter], **failing_run(store))
    rescore(Store(store), first.id, [stricter])
    again = evaluate(
        "mock", "arithmetic", resume=first.id, retry_failed="infra", scorers=[stricter], **failing_run(store)
    )
    assert again.summary.this_run["trials"] == first.summary.failed
    versions = Store(store).rows("SELECT DISTINCT scorer_version AS v FROM scores WHERE scorer = 'never'")
    assert versions == [{"v": "2"}]


def test_a_resume_is_refused_when_a_rescore_judged_the_run_with_a_scorer_it_does_not_record(tmp_path):
    """``rescore --scorer NAME`` judges every trial with a scorer the run does not record; a resume then judged its
    new trials without it, so the first trials passed only if that scorer passed them too. Now it is refused."""
    store = tmp_path / "s"
    first = evaluate("mock", "arithmetic", **failing_run(store))
    rescore(Store(store), first.id, [never])
    with pytest.raises(RunRefused, match="never, which .* would not judge"):
        evaluate("mock", "arithmetic", resume=first.id, retry_failed="infra", **failing_run(store))
    assert Store(store).rows("SELECT count(*) AS n FROM trial_history") == [{"n": 20}]


def test_a_resume_is_refused_cases_the_run_left_out(tmp_path):
    """A run that left out the cases with a simulated user (``skip_simulated``, no simulator), resumed with a user
    simulator, ran them: the experiment held trials of cases its snapshot and its record said were not run, under
    another configuration than the rest. Now a resume runs the cases the run chose, or is refused."""
    cases = [Case(id=f"plain-{i}", input=f"Say ok {i}", expected_output="ok", category="c") for i in range(4)]
    cases.append(Case(id="talk", input="hi", expected_output="ok", category="c", simulated_user={"goal": "an ok"}))
    tiny = Dataset("tiny", "tiny(test)", dataset_hash(cases), cases)
    store = tmp_path / "s"
    first = evaluate(answers_ok, tiny, attempts=1, skip_simulated=True, store=store, progress="none")
    assert first.summary.this_run["not_run_simulated"] == 1
    with pytest.raises(RunRefused, match=r"other cases than the run chose: 1 case\(s\) it left out \(talk\)"):
        evaluate(
            answers_ok, tiny, resume=first.id, user_simulator=lambda goal, messages: "ok", store=store, progress="none"
        )
    again = evaluate(answers_ok, tiny, resume=first.id, store=store, progress="none")
    assert again.summary.trials == 4
    assert Store(store).rows("SELECT DISTINCT case_id FROM trials WHERE case_id = 'talk'") == []


def test_a_resume_is_refused_prices_other_than_the_run_recorded(tmp_path):
    """A ``--prices`` file given to a resume was ignored without a word: every trial is priced by the prices the
    run recorded. Now one that prices a model otherwise is refused, naming the model; the same prices, or none,
    resume, and the resumed trials cost what the first ones did."""
    store = tmp_path / "s"
    cheap, dear = tmp_path / "cheap.json", tmp_path / "dear.json"
    cheap.write_text('{"models": {"mock-model": {"input": 1.0, "output": 2.0}}}')
    dear.write_text('{"models": {"mock-model": {"input": 100.0, "output": 200.0}}}')
    first = evaluate("mock", "arithmetic", prices=cheap, **failing_run(store))
    with pytest.raises(RunRefused, match=r"--prices .*dear\.json: it prices mock-model otherwise than the run"):
        evaluate("mock", "arithmetic", resume=first.id, retry_failed="infra", prices=dear, **failing_run(store))
    assert Store(store).rows("SELECT count(*) AS n FROM trial_history") == [{"n": 20}]
    evaluate("mock", "arithmetic", resume=first.id, retry_failed="infra", prices=cheap, **failing_run(store))
    rows = Store(store).rows(
        "SELECT DISTINCT cost_usd / (input_tokens * 1.0 + output_tokens * 2.0) * 1e6 AS per_token FROM trials "
        "WHERE experiment_id = ? AND input_tokens > 0",
        [first.id],
    )
    assert [round(row["per_token"], 9) for row in rows] == [1.0]


def user_who_is_done(goal, messages):
    """A simulated user satisfied by the first reply."""
    return None


def user_who_asks_again(goal, messages):
    """A simulated user who asks once more, then is done."""
    return "and again?" if len(messages) < 3 else None


def test_a_resume_is_refused_another_user_simulator_than_the_run_recorded(tmp_path):
    """A Python user simulator (``evaluate(user_simulator=...)``) was not recorded: a resume with another one, or
    none, played the resumed trials' users otherwise than the first ones', without a word. Now the run records it by
    name, and a resume is refused another, naming the option; the same one resumes."""
    cases = [Case(id="talk", input="hi", expected_output="ok", category="c", simulated_user={"goal": "an ok"})]
    tiny = Dataset("tiny", "tiny(test)", dataset_hash(cases), cases)
    store = tmp_path / "s"
    first = evaluate(answers_ok, tiny, attempts=1, user_simulator=user_who_is_done, store=store, progress="none")
    assert first.options["user_simulator"].startswith(f"{__name__}:user_who_is_done#")
    with pytest.raises(
        RunRefused, match=r"user_who_is_done#\w+, and .*:user_who_asks_again#\w+ is given now \(user_simulator\)"
    ):
        evaluate(answers_ok, tiny, resume=first.id, user_simulator=user_who_asks_again, store=store, progress="none")
    with pytest.raises(RunRefused, match=r"user_who_is_done#\w+, and none is given now \(user_simulator\)"):
        evaluate(answers_ok, tiny, resume=first.id, store=store, progress="none")
    again = evaluate(answers_ok, tiny, resume=first.id, user_simulator=user_who_is_done, store=store, progress="none")
    assert again.options["user_simulator"] == first.options["user_simulator"]

    plain = [Case(id="plain", input="Say ok", expected_output="ok", category="c")]
    without = evaluate(
        answers_ok, Dataset("p", "p(test)", dataset_hash(plain), plain), attempts=1, store=store, progress="none"
    )
    assert without.options["user_simulator"] is None
    refused = pytest.raises(RunRefused, match=r"with a user simulator \(.*user_who_is_done#\w+\): the run had none")
    with refused, pytest.warns(UserWarning, match="it will not be called"):
        evaluate(
            answers_ok,
            Dataset("p", "p(test)", dataset_hash(plain), plain),
            resume=without.id,
            user_simulator=user_who_is_done,
            store=store,
            progress="none",
        )


SIMULATED_RUN = textwrap.dedent(
    """
    import sys

    from agenteval.dataset import Case, Dataset
    from agenteval.dataset._cases import dataset_hash
    from agenteval.run import RunRefused, evaluate


    def simulators():
        # Two lambdas of one function: one qualified name, simulators.<locals>.<lambda>.
        return {
            "done": lambda goal, messages: None,
            "asks": lambda goal, messages: "and again?" if len(messages) < 3 else None,
        }


    def answers_ok(question):
        return "ok"


    store, which, resume = sys.argv[1], sys.argv[2], sys.argv[3:]
    cases = [Case(id="talk", input="hi", expected_output="ok", category="c", simulated_user={"goal": "an ok"})]
    tiny = Dataset("tiny", "tiny(test)", dataset_hash(cases), cases)
    try:
        run = evaluate(
            answers_ok, tiny, attempts=1, user_simulator=simulators()[which], store=store, progress="none",
            resume=resume[0] if resume else False,
        )
    except RunRefused as refused:
        print("refused:", refused)
    else:
        print(run.id, run.options["user_simulator"])
    """
)


def script_in_processes(source: str, tmp_path: Path) -> Callable[..., str]:
    """A function running the script ``source`` (its arguments: a store, then its own) in a fresh process each
    call, on one store; it returns what the script printed."""
    script = tmp_path / "script.py"
    script.write_text(source)
    store = str(tmp_path / "s")

    def run(*arguments: str) -> str:
        done = subprocess.run(
            [sys.executable, str(script), store, *arguments], capture_output=True, text=True, cwd=tmp_path
        )
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    return run


def test_a_resume_tells_two_lambdas_of_one_function_apart(tmp_path):
    """A user simulator was recorded by its qualified name alone, which two lambdas of one function share
    (``simulators.<locals>.<lambda>``): a resume given the other lambda continued the run, its simulated users
    played otherwise, without a word. Now the name carries a hash of the code; each step is a fresh process, so the
    very same lambda resumes, and the other one is refused, naming the option."""
    run = script_in_processes(SIMULATED_RUN, tmp_path)
    experiment_id, recorded = run("done").split()
    refused = run("asks", experiment_id)
    assert refused.startswith(f"refused: cannot resume {experiment_id}: its simulated users were played by ")
    assert "of the same name, but other code" in refused and "(user_simulator)" in refused
    assert run("done", experiment_id) == f"{experiment_id} {recorded}"
    assert recorded.startswith("__main__:simulators.<locals>.<lambda>#")


def test_a_resume_is_refused_a_response_cache_the_run_did_not_have(tmp_path):
    """``--cache`` could be turned on (or pointed at another folder) for a resume without a word: its resumed trials
    got answers replayed from earlier runs where the first ones got fresh answers. Now it is refused, naming the
    option; left out, the resume uses the run's cache, as it ran."""
    store = tmp_path / "s"
    first = evaluate("mock", "arithmetic", **failing_run(store))
    with pytest.raises(RunRefused, match=r"other options than it ran with: cache \(.*model-cache' given, None in"):
        evaluate("mock", "arithmetic", resume=first.id, retry_failed="infra", cache=True, **failing_run(store))
    cached = evaluate("mock", "arithmetic", cache=tmp_path / "answers", **failing_run(store))
    with pytest.raises(RunRefused, match=r"cache \(.*other-answers' given, .*answers' in the run"):
        evaluate(
            "mock",
            "arithmetic",
            resume=cached.id,
            retry_failed="infra",
            cache=tmp_path / "other-answers",
            **failing_run(store),
        )
    assert Store(store).rows("SELECT count(*) AS n FROM trial_history") == [{"n": 40}]
    again = evaluate("mock", "arithmetic", resume=cached.id, retry_failed="infra", **failing_run(store))
    assert again.options["cache"] == str(tmp_path / "answers")


def cached_model_run(server, store, **options):
    """A run of the reference agent whose answers are all cut short (failed trials): a resume with
    ``retry_failed="all"`` asks the model again, which its cache answers when it is the run's."""
    server.responder = lambda request: ms.truncated()
    return evaluate(
        "",
        "arithmetic",
        model="openai/test-model",
        base_url=server.openai_url,
        store=store,
        progress="none",
        **options,
    )


def test_a_store_moved_with_its_cache_resumes_with_it(model_server, tmp_path):
    """A run's cache folder was recorded as an absolute path, the store's own ``.model-cache`` too: a store moved
    (or checked out elsewhere) resumed with its old folder's path, so its cache was not found there (every answer
    asked again, the old folder made again), and ``--cache`` given to it was refused as another folder. Now a
    cache in the store is recorded relative to the store and goes with it."""
    first = cached_model_run(model_server, tmp_path / "a", cases=2, attempts=1, cache=True)
    assert first.summary.failed == 2
    asked = len(model_server.requests)
    (tmp_path / "a").rename(tmp_path / "b")
    again = cached_model_run(model_server, tmp_path / "b", resume=first.id, retry_failed="all", cache=True)
    assert again.summary.this_run["cache_hits"] == asked and len(model_server.requests) == asked
    assert not (tmp_path / "a").exists()
    assert again.options["cache"] == first.options["cache"] == ".model-cache"


def test_a_relative_cache_is_the_folder_it_named_where_it_was_given(model_server, tmp_path, monkeypatch):
    """A relative ``--cache answers`` was recorded as typed: resumed from another directory, the same words named
    another folder, and were taken as the run's. Now the folder is recorded resolved: given from elsewhere it is
    refused as another folder, and left out the resume uses the run's own."""
    for folder in ("here", "elsewhere"):
        (tmp_path / folder).mkdir()
    monkeypatch.chdir(tmp_path / "here")
    first = cached_model_run(model_server, tmp_path / "s", cases=2, attempts=1, cache="answers")
    asked = len(model_server.requests)
    monkeypatch.chdir(tmp_path / "elsewhere")
    with pytest.raises(RunRefused, match=r"other options than it ran with: cache \(.*elsewhere.answers' given"):
        cached_model_run(model_server, tmp_path / "s", resume=first.id, retry_failed="all", cache="answers")
    again = cached_model_run(model_server, tmp_path / "s", resume=first.id, retry_failed="all")
    assert again.summary.this_run["cache_hits"] == asked and len(model_server.requests) == asked
    assert not (tmp_path / "elsewhere" / "answers").exists()
    assert again.options["cache"] == first.options["cache"] == str((tmp_path / "here" / "answers").resolve())


AGENT_OPTION_RUN = textwrap.dedent(
    """
    import sys

    from agenteval.dataset import Case, Dataset
    from agenteval.dataset._cases import dataset_hash
    from agenteval.run import RunRefused, evaluate


    def answerer(pick):
        return lambda question: pick(question)


    def picks():
        # Two lambdas of one function: one qualified name, picks.<locals>.<lambda>.
        return {"ok": lambda question: "ok", "shout": lambda question: "OK!"}


    store, which, resume = sys.argv[1], sys.argv[2], sys.argv[3:]
    cases = [Case(id="one", input="hi", expected_output="ok", category="c")]
    tiny = Dataset("tiny", "tiny(test)", dataset_hash(cases), cases)
    try:
        run = evaluate(
            answerer, tiny, attempts=1, agent_options={"pick": picks()[which]}, store=store, progress="none",
            resume=resume[0] if resume else False,
        )
    except RunRefused as refused:
        print("refused:", refused)
    else:
        print(run.id, run.options["agent_options"]["pick"])
    """
)


def test_a_run_given_a_function_as_an_agent_option_resumes_with_it_and_refuses_another(tmp_path):
    """A function given as an agent option was recorded (and hashed into the agent's version) as its text, which
    names its memory address, another in every process: the very same lambda was refused on resume. It is recorded
    by its name and the hash of its code, so it resumes, and another lambda of the same name is refused."""
    run = script_in_processes(AGENT_OPTION_RUN, tmp_path)
    experiment_id, recorded = run("ok").split()
    assert recorded.startswith("__main__:picks.<locals>.<lambda>#") and " at 0x" not in recorded
    assert run("ok", experiment_id) == f"{experiment_id} {recorded}"
    refused = run("shout", experiment_id)
    assert refused.startswith(f"refused: cannot resume {experiment_id} with other options than it ran with: "), refused
    assert "'pick': '__main__:picks.<locals>.<lambda>#" in refused and f"{recorded}'}} in the run" in refused


def long_answer(sql_threshold: int) -> Scorer:
    """A SQL scorer: whether the case's expected answer is longer than ``sql_threshold`` characters."""
    return Scorer(
        "long_answer",
        sql=f"struct_pack(value := (len(c.expected_output) > {sql_threshold})::DOUBLE, passed := NULL, reason := '')",
        continuous=True,
    )


def test_a_run_s_sql_scorer_is_resumed_from_its_record_and_another_sql_is_refused(tmp_path):
    """A ``Scorer(sql=...)`` was recorded by its bare name: a resume given no scorers could not load it again, and one
    given the scorer with other SQL (its version unchanged) judged the resumed trials by the new SQL and the first ones
    by the old. Now its definition is recorded: a resume rebuilds it, and refuses other SQL."""
    store = tmp_path / "s"
    first = evaluate("mock", "arithmetic", scorers=[long_answer(3)], **failing_run(store))
    assert first.summary.failed > 0
    assert first.options["scorers"][0]["sql"] == long_answer(3).sql
    with pytest.raises(RunRefused, match=r"other scorers than it ran with: long_answer \(SQL #\w+\) given"):
        evaluate(
            "mock", "arithmetic", resume=first.id, retry_failed="infra", scorers=[long_answer(4)], **failing_run(store)
        )
    assert Store(store).rows("SELECT count(*) AS n FROM trial_history") == [{"n": 20}]
    again = evaluate("mock", "arithmetic", resume=first.id, retry_failed="infra", **failing_run(store))
    assert again.summary.this_run["trials"] == first.summary.failed
    rows = Store(store).rows(
        "SELECT s.value, c.case FROM scores s JOIN cases c USING (experiment_id, case_id) "
        "WHERE s.scorer = 'long_answer' AND s.experiment_id = ?",
        [first.id],
    )
    answered = again.summary.trials - again.summary.failed  # every answered trial, the resumed ones too
    assert answered > first.summary.trials - first.summary.failed and len(rows) == answered
    assert all(row["value"] == float(len(json.loads(row["case"])["expected_output"]) > 3) for row in rows)


def test_a_sql_scorer_recorded_by_name_before_resumes_given_again(tmp_path):
    """A run recorded before SQL scorers were recorded by their definition named one by its bare name: given the
    scorer again, a resume matches it by that name, as it did then."""
    store = tmp_path / "s"
    first = evaluate("mock", "arithmetic", scorers=[long_answer(3)], **failing_run(store))
    older = Store(store)
    ex.save(older, dataclasses.replace(first, options={**first.options, "scorers": ["long_answer"]}))
    again = evaluate(
        "mock", "arithmetic", resume=first.id, retry_failed="infra", scorers=[long_answer(3)], **failing_run(store)
    )
    assert again.summary.this_run["trials"] == first.summary.failed


class Threshold:
    """A callable object whose text says how it is set, the same in every process."""

    def __init__(self, level: float) -> None:
        self.level = level

    def __repr__(self) -> str:
        return f"Threshold({self.level})"

    def __call__(self, question: str) -> str:
        return "ok" if self.level < 1 else "no"


def answerer_with(gate):
    return lambda question: gate(question)


def test_a_callable_object_given_as_an_agent_option_is_told_apart_by_how_it_is_set(tmp_path):
    """A callable given as an agent option was recorded by its name and the hash of its class's code alone, so two
    callable objects of one class set otherwise (Threshold(0.5), Threshold(0.9)) were recorded alike, and a resume
    given the other one continued the run. One whose text names no memory address is recorded by that text: the
    other one is refused, the same one resumes."""
    cases = [Case(id="one", input="hi", expected_output="ok", category="c")]
    tiny = Dataset("tiny", "tiny(test)", dataset_hash(cases), cases)
    store = tmp_path / "s"

    def run(level: float, **extra):
        return evaluate(
            answerer_with,
            tiny,
            attempts=1,
            agent_options={"gate": Threshold(level)},
            store=store,
            progress="none",
            **extra,
        )

    first = run(0.5)
    assert ex.find(Store(store), first.id).options["agent_options"] == {"gate": "Threshold(0.5)"}
    with pytest.raises(RunRefused, match=r"agent_options \({'gate': 'Threshold\(0\.9\)'} given"):
        run(0.9, resume=first.id)
    assert run(0.5, resume=first.id).id == first.id


@dataclasses.dataclass
class Gate:
    level: float

    def __call__(self, question: str) -> str:
        return "ok"


def test_a_dataclass_given_as_an_agent_option_resumes_with_it(tmp_path):
    """A dataclass among the agent's options was recorded as a dict (``dataclasses.asdict`` of the run's options
    reached into them), which the same object given to a resume never equalled: such a run could never be resumed.
    It is recorded by its text, as the agent's version hashes it."""
    cases = [Case(id="one", input="hi", expected_output="ok", category="c")]
    tiny = Dataset("tiny", "tiny(test)", dataset_hash(cases), cases)
    store = tmp_path / "s"

    def run(level: float, **extra):
        options = {"gate": Gate(level)}
        return evaluate(answerer_with, tiny, attempts=1, agent_options=options, store=store, progress="none", **extra)

    first = run(0.5)
    assert ex.find(Store(store), first.id).options["agent_options"] == {"gate": "Gate(level=0.5)"}
    assert run(0.5, resume=first.id).id == first.id
    with pytest.raises(RunRefused, match=r"agent_options \({'gate': 'Gate\(level=0\.9\)'} given"):
        run(0.9, resume=first.id)
