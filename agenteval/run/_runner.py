"""``evaluate`` / ``evaluate_async``: run an agent over a dataset, several attempts per case, into the store.

Finished trials are scored and saved in micro-batches: their spans are encoded to Arrow once and
handed to the span writer; scores and trial rows follow. Every second the writers publish in that
order (spans, scores, trials), so a trial row on disk means its spans and scores are too: a run
killed at any moment loses at most the last second of work, and ``resume`` re-runs only trials
that have no row.
"""

from __future__ import annotations

import asyncio
import contextlib
import contextvars
import dataclasses
import functools
import gc
import signal
import socket
import threading
import time
import uuid
import warnings
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator, Sequence
from pathlib import Path
from typing import Any, NoReturn, ParamSpec

import pyarrow as pa

from agenteval_exporters import SPAN_SCHEMA, spans_to_table
from agenteval_exporters.ablation import enabled
from agenteval_exporters.files import partition_path
from agenteval_instrumentation import attributes as A
from agenteval_instrumentation import capture

from ..agents._loading import LoadedAgent
from ..analysis import _experiments as ex
from ..analysis._saved_report import save_report
from ..dataset._card import card_record
from ..dataset._cases import Case, Dataset
from ..dataset._catalog import load_dataset
from ..errors import UsageError
from ..models._cache import cache_folder, recorded_cache
from ..models._limiter import watch_waiting
from ..models._names import recordable_url
from ..scorers import Scorer, load_scorers
from ..scorers._engine import JUDGEMENT_SCHEMA, Judgement, ScoringEngine, Verdict, score_table
from ..scorers._judge import judge_in_charge
from ..scorers._loading import ScorerSpec, scorer_specs
from ..store import CASES, Store, StoreNotWritable, compact
from ..store._database import SMALL_QUERIES
from ..store._lease import (
    JOIN_WAIT_SECONDS,
    TAKE_WAIT_SECONDS,
    AnyLease,
    LeaseLost,
    experiment_lease,
    joining_lease,
    run_lease,
)
from ..store._snapshots import judged_connection
from ..tools._search import corpus_hash
from ..tracing import otlp_exporter_from_env, sdk_provider
from ._collect import TrialCollector, collector_for
from ._environment import environment
from ._executors import Executor, LocalExecutor, RunRecipe, executor_for
from ._export import OTLPForwarder, judged_root, outcome_attributes
from ._failures import register_plugins
from ._loop import run_to_the_end
from ._memory import arrow_on_system_allocator
from ._models import RunModels, check_agent_and_model, own_agent
from ._options import RunOptions, changed_on_resume, recorded_options, simulator_name
from ._plan import (
    RunRefused,
    check_judged_alike,
    check_prices,
    check_resumable,
    check_same_cases,
    check_same_corpus,
    check_same_simulator,
    check_size,
    chosen_cases,
    dataset_ref,
    listed,
    missing_trials,
    new_trials,
    resumed_options,
    resumed_scorers,
)
from ._prices import load_prices
from ._progress import Progress
from ._scheduler import run_all
from ._shards import Shard, checked_experiment_id, shared_experiment_id
from ._sink import StoreSink
from ._starting import stoppable_start, stopped_by_signals
from ._store_mark import has_mark
from ._tasks import carried_into_tasks
from ._threads import carried_into_threads
from ._trial import StopNow, TrialPlan, TrialResult, TrialRunner, UserSimulator

RUN_DATABASE = {"threads": 1, **SMALL_QUERIES}
"""DuckDB's settings for a run's scoring engine, which queries a micro-batch (a second's trials) at a time. One
thread scored them as fast (the harness at 10,000 trials: 0.997x, median of 6 interleaved rounds), and a second
worker kept freed memory in a malloc arena of its own (a 2,000-case run peaked 7 MB higher); memory a query freed
is handed back (:data:`~agenteval.store._database.SMALL_QUERIES`). Rescoring, over whole experiments, keeps
DuckDB's defaults."""

SIGNAL_CHECK_SECONDS = 0.1
"""How often ``evaluate()`` waiting beside a running loop wakes to let a Ctrl-C through."""


async def evaluate_async(
    agent: str | Callable[..., Any] | None = None,
    dataset: str | Path | Dataset | None = None,
    *,
    attempts: int | None = None,
    concurrency: int | None = None,
    timeout: float | None = None,
    sample: int | None = None,
    sample_seed: int | None = None,
    cases: int | None = None,
    name: str | None = None,
    store: str | Path | Store | None = None,
    agent_options: dict[str, Any] | None = None,
    resume: bool | str = False,
    retry_failed: str | None = None,
    user_simulator: UserSimulator | None = None,
    scorers: Sequence[Scorer | str] = (),
    prices: str | Path | None = None,
    progress: str = "auto",
    model: str | None = None,
    base_url: str | None = None,
    temperature: float | None = None,
    max_tokens: int | None = None,
    max_steps: int | None = None,
    corpus: str | Path | None = None,
    max_corpus_mb: float | None = None,
    judge: str | None = None,
    judge_base_url: str | None = None,
    simulate_users: str | None = None,
    simulator_base_url: str | None = None,
    simulator_max_tokens: int | None = None,
    skip_simulated: bool | None = None,
    cache: bool | str | Path | None = None,
    request_timeout: float | None = None,
    max_retries: int | None = None,
    shard: str | None = None,
    experiment_id: str | None = None,
    executor: str | None = None,
    ray_address: str | None = None,
) -> ex.Experiment:
    """Run ``agent`` over ``dataset`` and return the experiment (id, status, summary).

    ``agent`` is a callable or ``mock`` / a plugin's name / ``MODULE:ATTR`` / ``FILE.py:ATTR``; ``dataset`` a built-in
    name, a path or a loaded :class:`Dataset`. ``resume=True`` continues the newest experiment that was
    interrupted or left "running" by a crash (or the one whose id is given) with only its missing trials;
    ``retry_failed`` (``"infra"`` or ``"all"``) also re-runs failed trials, the new attempt superseding the old.
    Options left as None take their defaults (``attempts`` 3, ``concurrency`` 4, ``timeout`` 120 s, every
    case); on resume they take the run's stored values, and one given that differs from those is refused
    (except ``concurrency``).
    ``scorers`` (Scorer objects, built-in or plugin names, ``MODULE:ATTR``) are added to the built-in ones (a
    same-named Scorer object or ``MODULE:ATTR`` scorer replaces a built-in). The ``agenteval.failures`` plugins'
    matchers are registered before the first run of the process.
    ``progress`` is ``auto`` (a bar on a terminal, lines otherwise), ``plain`` or ``none``.

    Models (``PROVIDER/MODEL``, see :mod:`agenteval.models`): ``model`` runs the built-in reference agent with that
    model (``agent`` then is ``reference`` or left out: ``evaluate(dataset="hard", model=...)``), ``base_url``
    pointing at any OpenAI-compatible server, with ``temperature``, ``max_tokens`` and ``max_steps``; ``corpus`` is
    the search tool's corpus in place of the built-in one (at most ``max_corpus_mb`` MB). ``judge`` grades answers
    with an LLM judge, which then decides whether an answer is right. ``simulate_users`` plays the cases' simulated
    users with a model (``simulator_max_tokens``: the most tokens one of its messages may have); without one such
    cases are refused, unless ``skip_simulated`` leaves them out. ``cache`` (True, or a folder) answers repeated
    model requests from disk, for development. These are recorded with the experiment, never an API key.
    ``request_timeout`` (60 s) bounds each request of these models (for a stream, each silence) and ``max_retries``
    (5) how often a transient failure is sent again; a resume may give both anew (a slow local model's run that
    timed out is resumed with a longer one).

    Spread over machines: ``shard="K/N"`` runs the K-th of N disjoint slices of the experiment (its cases, split
    by a hash of their ids), all shards writing one experiment whose id is ``experiment_id`` or derived from
    ``name``; resume one shard with ``resume=ID, shard="K/N"``. ``experiment_id`` also names a run that is not
    sharded.

    ``executor`` chooses how the trials run: ``"local"`` (the default) on this process's event loop, ``"ray"`` as
    tasks on the Ray cluster at ``ray_address`` (or ``$RAY_ADDRESS``, or a local one started for the run), each
    writing its trials' spans and scores straight to the store, which must be one every node reaches (see
    :mod:`agenteval.run._ray`). ``concurrency`` is then per task.

    What it sets up in the process: when no OpenTelemetry SDK TracerProvider is installed, it installs one
    as the global provider (service name ``$OTEL_SERVICE_NAME`` or ``agenteval``), since the agent's spans
    must go somewhere; an application's own SDK provider is used as it is, with one span processor added
    (it stamps trial ids and hands the run its spans). An agent given as ``FILE.py:ATTR`` is imported under
    a generated module name, with the file's folder put first on ``sys.path`` (as ``python FILE.py`` does),
    so that its sibling modules import; both are taken back when the run ends. Signal handlers for Ctrl-C
    and SIGTERM are installed for the run only, from the main thread only.
    """
    target = store if isinstance(store, Store) else Store(store)
    if isinstance(target.root, Path) and not target.root.is_absolute():
        # The folder meant is the one under today's working directory: an agent that changes it (os.chdir into a
        # workspace) must not send the rest of the run's files to a second store there.
        target = Store(target.root.absolute())
    given: dict[str, Any] = {
        name: value
        for name, value in (
            ("attempts", attempts),
            ("concurrency", concurrency),
            ("timeout", timeout),
            ("sample", sample),
            ("sample_seed", sample_seed),
            ("cases", cases),
            ("agent_options", dict(agent_options) if agent_options else None),
            ("model", model),
            ("base_url", recordable_url(base_url)),
            ("temperature", temperature),
            ("max_tokens", max_tokens),
            ("max_steps", max_steps),
            ("corpus", None if corpus is None else str(Path(corpus).resolve())),
            ("max_corpus_mb", max_corpus_mb),
            ("judge", judge),
            ("judge_base_url", recordable_url(judge_base_url)),
            ("simulate_users", simulate_users),
            ("simulator_base_url", recordable_url(simulator_base_url)),
            ("simulator_max_tokens", simulator_max_tokens),
            ("skip_simulated", skip_simulated),
            ("request_timeout", request_timeout),
            ("max_retries", max_retries),
            ("shard", None if shard is None else str(Shard.parse(shard))),
            (
                "cache",
                None
                if cache is None or cache is False
                else recorded_cache(cache_folder(None if cache is True else cache, target.root), target.root),
            ),
        )
        if value is not None
    }
    # The URLs as given (a gateway's may carry credentials): used for the calls, recorded without them.
    urls = {"model": base_url, "judge": judge_base_url, "simulator": simulator_base_url}
    with arrow_on_system_allocator():
        with stoppable_start():
            # Plugins that cannot be loaded are said before anything is written.
            register_plugins()
            chosen_executor = executor_for(executor, ray_address)
        shipped = {"the agent": agent, "the user simulator": user_simulator, "a scorer": scorers}
        with chosen_executor.ready(shipped):
            with stoppable_start():
                run = _Run.prepare(
                    target,
                    agent,
                    dataset,
                    given,
                    scorers,
                    name,
                    resume,
                    retry_failed,
                    user_simulator,
                    prices,
                    progress,
                    urls,
                    None if experiment_id is None else checked_experiment_id(experiment_id),
                    chosen_executor,
                )
            try:
                with run.lease:
                    return await run.execute()
            finally:
                run.agent.release()


P = ParamSpec("P")

STORED_REPLY = "agenteval.trial.reply"
"""The name a capture redactor is called with for a trial row's reply (a str; not a span attribute)."""


def _to_the_end(run: Callable[P, Coroutine[Any, Any, ex.Experiment]]) -> Callable[P, ex.Experiment]:
    """A blocking call of ``run`` with its very parameters (one signature to keep, not two)."""

    @functools.wraps(run)
    def blocking(*args: P.args, **kwargs: P.kwargs) -> ex.Experiment:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return run_to_the_end(run(*args, **kwargs))
        return _run_beside_running_loop(lambda: run(*args, **kwargs))

    return blocking


evaluate = _to_the_end(evaluate_async)
evaluate.__name__ = evaluate.__qualname__ = "evaluate"
evaluate.__doc__ = """:func:`evaluate_async`, run to the end, with the same parameters. Inside a running event loop (a
notebook cell, an async application) the run gets an event loop of its own on a worker thread, and this call
waits for it."""


def _run_beside_running_loop(make_run: Callable[[], Coroutine[Any, Any, ex.Experiment]]) -> ex.Experiment:
    """Run on a fresh event loop in a worker thread, with the caller's context (its current span).

    Signal handlers belong to the main thread, so the run cannot install its own there: a Ctrl-C (a
    notebook's "interrupt") reaches this waiting thread instead, which cancels the run; the run marks
    itself interrupted, keeps what finished and lets go of its lease before the interrupt goes on.
    """
    guard = threading.Lock()
    state: dict[str, Any] = {}  # the run's loop and task; whether it was interrupted; its outcome

    async def main() -> ex.Experiment:
        with guard:
            if state.get("interrupted"):  # the Ctrl-C came while the thread was starting
                raise asyncio.CancelledError
            state["loop"], state["task"] = asyncio.get_running_loop(), asyncio.current_task()
        return await make_run()

    def work() -> None:
        try:
            state["experiment"] = run_to_the_end(main())
        except BaseException as exc:  # raised again in the waiting thread
            state["error"] = exc

    thread = threading.Thread(target=contextvars.copy_context().run, args=(work,), name="agenteval-evaluate")
    try:
        thread.start()
        # Woken now and then: a Ctrl-C the OS delivers to another of the process's threads runs its
        # handler only once this thread runs Python again.
        while thread.is_alive():
            thread.join(SIGNAL_CHECK_SECONDS)
    except KeyboardInterrupt:
        with guard:
            state["interrupted"] = True
            if "task" in state:
                with contextlib.suppress(RuntimeError):  # the loop already closed: the run has ended anyway
                    state["loop"].call_soon_threadsafe(state["task"].cancel)
        if thread.is_alive():
            thread.join()  # the run saves itself as interrupted
        raise
    if "error" in state:
        raise state["error"]
    return state["experiment"]


@dataclasses.dataclass
class _Run:
    """One run: its plan, and while it executes the parts that run, score and save its trials."""

    store: Store
    experiment: ex.Experiment
    agent: LoadedAgent
    plans: list[TrialPlan]
    options: RunOptions
    engine: ScoringEngine
    user_simulator: UserSimulator | None
    progress: Progress
    lease: AnyLease
    """Held while the run lives, so that no ``--resume`` joins it."""
    models: RunModels = dataclasses.field(default_factory=RunModels)
    skipped: list[str] = dataclasses.field(default_factory=list)
    """Cases with a simulated user left out (``skip_simulated``): reported as not run."""
    recorded: bool = False
    """Its running record saved already (a new shard saves it as it joins, see :func:`_joining`)."""
    collector: TrialCollector | None = None
    _outside_trials_at_open: int = 0
    """The collector's count of spans outside any trial when the run opened (see :meth:`_say_spans_outside_trials`)."""
    _after_trials_at_open: int = 0
    """Its count of spans started after their trial had ended, when the run opened (the same method)."""
    pass_id: str = dataclasses.field(default_factory=lambda: uuid.uuid4().hex[:12])
    counts: Counter[str] = dataclasses.field(default_factory=Counter)
    pending: list[TrialResult] = dataclasses.field(default_factory=list)
    """Finished trials not yet scored and saved."""
    stop: asyncio.Event = dataclasses.field(default_factory=asyncio.Event)
    """Set by Ctrl-C or SIGTERM: no new trials start."""
    sink: StoreSink | None = None
    """The store's writers, while the run executes."""
    otlp: OTLPForwarder | None = None
    """The run's OTLP export, when the standard variables name a backend: spans after scoring, with back-pressure."""
    signals: int = 0
    """Ctrl-Cs and SIGTERMs received while the run's handlers are installed."""
    stopping_now: bool = False
    """A second signal came: the run stops at once (after saving what finished) and says how to resume."""
    winding_down: bool = False
    """The trials are over and what finished is being saved: a second signal waits for that to end."""
    executor: Executor = dataclasses.field(default_factory=LocalExecutor)
    limits: dict[str, dict[str, Any]] = dataclasses.field(default_factory=dict)
    """A cluster's shared model limiters at the end of the run (see ``agenteval.models._ray_limiter``)."""
    recipe: RunRecipe | None = None
    """How a worker elsewhere makes this run again (set by :meth:`prepare`)."""

    @classmethod
    def prepare(
        cls,
        store: Store,
        agent_spec: str | Callable[..., Any] | None,
        dataset_spec: str | Path | Dataset | None,
        given: dict[str, Any],
        scorers: Sequence[Scorer | ScorerSpec],
        name: str | None,
        resume: bool | str,
        retry_failed: str | None,
        user_simulator: UserSimulator | None,
        prices_file: str | Path | None,
        progress: str,
        urls: dict[str, str | None],
        experiment_id: str | None = None,
        executor: Executor | None = None,
    ) -> _Run:
        """Check everything and plan the trials (see :mod:`._plan`), then take the experiment's lease and,
        for a new run, save its cases. Nothing runs and nothing is written before every check passed."""
        if retry_failed not in (None, "infra", "all"):
            raise UsageError("retry_failed must be 'infra' or 'all'")
        if resume == "":  # an unset variable in a script: never a new run in its place
            raise ex.EmptyId("the experiment id to resume is empty: give an id, or --resume alone for the newest")
        simulator = simulator_name(user_simulator) if user_simulator is not None else None
        options = RunOptions(**given, scorers=scorer_specs(scorers), user_simulator=simulator)
        shard = Shard.parse(options.shard) if options.shard else None
        with contextlib.ExitStack() as on_failure:  # the lease goes with the run; a run that never starts drops it
            previous: ex.Experiment | None = None
            recorded = False
            lease: AnyLease
            if resume:
                if store.root.exists():
                    store.ensure()  # a store that cannot be written is said before its lease is taken
                previous, lease = _resumable(store, resume if isinstance(resume, str) else None, shard)
                on_failure.callback(lease.release)
                options = resumed_options(previous, given, store.root)
                scorers = resumed_scorers(previous, scorers)
                if options.user_simulator is not None:  # said before "no simulator" would be, for want of one
                    check_same_simulator(previous, simulator)
                dataset_spec = dataset_spec if dataset_spec is not None else options.dataset
                if agent_spec is None or agent_spec == "":
                    agent_spec = previous.agent
            if dataset_spec is None:
                raise UsageError("a dataset is required (--dataset NAME|PATH)")
            dataset = (
                dataset_spec
                if isinstance(dataset_spec, Dataset)
                else load_dataset(dataset_spec, cases=options.cases, seed=options.sample_seed)
            )
            options.dataset = dataset_ref(dataset_spec, dataset)
            corpus = corpus_hash(options.corpus, options.max_corpus_mb) if options.corpus else None
            if previous is None:
                options.corpus_hash = corpus
            else:  # before the agent is built: its search tool checks the documents it reads against the record
                check_same_corpus(previous, corpus)
            check_agent_and_model(agent_spec, options)
            models = RunModels.build(options, dataset, urls, store.root)
            agent = models.agent if models.agent is not None else own_agent(agent_spec, options)
            on_failure.callback(agent.release)
            user_simulator = user_simulator or models.simulator
            chosen = chosen_cases(dataset, options)
            if shard is not None:
                chosen = shard.cases(chosen)
            chosen, skipped = _simulated_cases_checked(chosen, user_simulator is not None, options.skip_simulated)
            check_size(chosen, options.attempts, shard is not None)
            prices = load_prices(prices_file)
            loaded = load_scorers(scorers)
            judging = judge_in_charge(loaded, models.judge) if models.judge else loaded
            engine = ScoringEngine(judging, RUN_DATABASE)
            if previous is not None:
                _check_comparable(store, previous, shard, agent, dataset, corpus, judging, chosen)
                check_same_simulator(previous, simulator)  # after the cases: one given for cases left out says so
                check_prices(previous, prices_file)
                experiment = previous
                experiment.status, experiment.ended_at = ex.RUNNING, None
                done = ex.done_trials(store, experiment.experiment_id)
                plans = missing_trials(done, chosen, options.attempts, retry_failed)
            else:
                experiment = ex.Experiment(
                    experiment_id=_new_experiment_id(experiment_id, name, shard),
                    name=name,
                    dataset_name=dataset.name,
                    dataset_hash=dataset.hash,
                    agent=agent.spec,
                    version=agent.version,
                    options=recorded_options(options),
                    status=ex.RUNNING,
                    started_at=time.time_ns(),
                    environment={
                        **environment(agent.source_file),
                        "agent": agent.provenance,
                        **({"dataset_card": card} if (card := card_record(dataset)) else {}),
                    },
                    prices=prices,
                )
                store.ensure()  # everything checked; a store that cannot be written is said before anything runs
                lease = _lease(store, experiment.experiment_id, shard)
                # Held already: another process runs this very run or shard (a new id is never held).
                if not lease.acquire(TAKE_WAIT_SECONDS):
                    what = f"shard {shard} of " if shard is not None else "experiment "
                    raise RunRefused(f"{what}{experiment.experiment_id} is running ({lease.holder()})")
                on_failure.callback(lease.release)
                with _joining(store, experiment, shard):
                    # Checked while the lease is held: a twin started at the same moment may have run it all and let
                    # go of the lease while this process waited for it.
                    _check_is_new(store, experiment, shard, given=experiment_id is not None)
                    plans = new_trials(chosen, options.attempts)
                    store.write("cases", _cases_table(experiment.experiment_id, chosen))
                    if shard is not None:  # recorded before another shard may check what its shards run
                        ex.save(store, experiment)
                        recorded = True
                # The table's Arrow buffers are gone; hand their pages back before the run builds its own.
                pa.default_memory_pool().release_unused()
            run = cls(
                store, experiment, agent, plans, options, engine, user_simulator, Progress.create(progress), lease
            )
            run.models, run.skipped, run.recorded = models, skipped, recorded
            run.executor = executor or LocalExecutor()
            run.recipe = RunRecipe(
                str(store.root),
                experiment,
                options,
                agent_spec,
                scorers,
                urls,
                user_simulator if user_simulator is not models.simulator else None,
                run.pass_id,
                dataset if options.model else None,
            )
            on_failure.pop_all()
            return run

    @classmethod
    def for_worker(cls, recipe: RunRecipe, plans: list[TrialPlan]) -> _Run:
        """The run again, in a cluster's worker, around ``plans``: the agent, models and scorers loaded here,
        the experiment and options as the driver decided them. Nothing is checked again but the agent's version
        (a worker with another copy of the agent's file would mix two agents in one experiment)."""
        store = Store(recipe.store)
        options = recipe.options
        experiment = recipe.experiment
        # The driver saved the experiment, and left the run's mark, before any task started: a store without them is
        # another one (this node's own folder at that path, or a copy), where spans and scores would be lost to the
        # driver, which commits their rows.
        if not _holds_experiment(store, experiment.experiment_id):
            _refuse_store(
                store, f"it does not hold experiment {experiment.experiment_id}, which the driver saved there"
            )
        if not has_mark(store.root, recipe.store_mark):
            _refuse_store(
                store,
                f"it holds an experiment {experiment.experiment_id} but not the mark the driver left for this run "
                f"({recipe.store_mark}): it is another folder (this node's own store, or a copy)",
            )
        register_plugins()
        # The reference agent's tools read the whole dataset (shipped with the recipe); nothing else needs more
        # than the task's own cases.
        dataset = recipe.dataset or Dataset(
            experiment.dataset_name, options.dataset, experiment.dataset_hash, [plan.case for plan in plans]
        )
        models = RunModels.build(options, dataset, recipe.urls, store.root)
        agent = models.agent if models.agent is not None else own_agent(recipe.agent, options)
        if not agent.is_version(recipe.experiment.version, recipe.experiment.agent):
            agent.release()
            raise RunRefused(
                f"the agent {agent.spec} on this worker is version {agent.version}, the run's is "
                f"{recipe.experiment.version}: every node must have the same agent"
            )
        loaded = load_scorers(recipe.scorers)
        engine = ScoringEngine(judge_in_charge(loaded, models.judge) if models.judge else loaded, RUN_DATABASE)
        eid = recipe.experiment.experiment_id
        run = cls(
            store,
            recipe.experiment,
            agent,
            plans,
            options,
            engine,
            recipe.user_simulator or models.simulator,
            Progress.create("none"),
            experiment_lease(store.root, eid),  # never taken: the driver holds the run's lease
        )
        run.models, run.pass_id = models, recipe.pass_id
        return run

    def _open(self, keep_trials: bool = False) -> tuple[TrialCollector, TrialRunner]:
        """The parts that run, collect and save trials: the collector on the SDK provider, the OTLP export, the
        store's writers (``keep_trials``: trial rows kept for a driver, see :class:`StoreSink`), the runner."""
        provider = sdk_provider()
        collector = self.collector = collector_for(provider)
        # The run's spans also go to the OTLP backend the standard variables name, sent by the run itself once
        # scored (setup_tracing's OTLP processor leaves them out while the run lasts).
        otlp = otlp_exporter_from_env()
        self.otlp = OTLPForwarder(otlp) if otlp is not None else None
        collector.open(self.experiment.experiment_id, self.store.root)
        self._outside_trials_at_open = collector.outside_trials
        self._after_trials_at_open = collector.after_trials
        self.sink = StoreSink(self.store, keep_trials, commit_check=self.lease.check)
        runner = TrialRunner(
            self.agent,
            self.experiment.experiment_id,
            collector,
            timeout=self.options.timeout,
            prices=self.experiment.prices,
            user_simulator=self.user_simulator,
            on_rate_limit=self.progress.waiting,
        )
        return collector, runner

    async def run_trials(self, runner: TrialRunner) -> None:
        """Run :attr:`plans` on this event loop, ``concurrency`` at a time, scoring and saving as they finish."""
        await run_all(
            self.plans,
            runner,
            self.pending,
            self._save_finished,
            self.stop,
            self.options.concurrency,
            self._say_loop_blocked,
        )

    async def run_chunk(self) -> tuple[list[dict[str, Any]], int]:
        """In a cluster's worker: run :attr:`plans`, publish their spans and scores, and return their trial rows
        (for the driver to publish: its writing them is their commit) and the model calls the cache answered."""
        collector, runner = self._open(keep_trials=True)
        with carried_into_threads(), carried_into_tasks():
            try:
                await self.run_trials(runner)
            finally:
                runner.close()
                unsaved = await self._close(collector)
                await self._close_models()
        if unsaved is not None:
            raise unsaved
        assert self.sink is not None
        return self.sink.kept, self.counts["cache_hits"]

    def commit(self, rows: list[dict[str, Any]], cache_hits: int) -> None:
        """Trial rows a worker ran, scored and whose spans and scores it published: counted and handed to the
        trials writer (published at the next flush)."""
        assert self.sink is not None
        self.counts["cache_hits"] += cache_hits
        for row in rows:
            self._count(row["outcome"], bool(row["infrastructure"]))
        self.sink.add(None, JUDGEMENT_SCHEMA.empty_table(), rows)

    def _count(self, outcome: str, infrastructure: bool) -> None:
        self.counts[outcome] += 1
        if infrastructure:
            self.counts["infrastructure"] += 1
        self.progress.advance(outcome, infrastructure)

    async def execute(self) -> ex.Experiment:
        if not self.recorded:
            ex.save(self.store, self.experiment)
        collector, runner = self._open()
        self.progress.start(len(self.plans), self.experiment.experiment_id)
        if self.skipped:
            self.progress.note(
                f"not run: {len(self.skipped)} case(s) with a simulated user, for want of a simulator "
                f"(--simulate-users MODEL runs them): {listed(self.skipped)}"
            )
        loop = asyncio.get_running_loop()

        def waiting(change: int) -> None:  # from any thread: the progress display is the loop's
            loop.call_soon_threadsafe(self.progress.waiting, change)

        stop_watching = watch_waiting(waiting)
        status = ex.COMPLETED
        failure: BaseException | None = None
        with self._signals(), _long_lived_objects_frozen(), carried_into_threads(), carried_into_tasks():
            try:
                await self.executor.run(self, runner)
            except asyncio.CancelledError:  # stopped at once: what finished can resume
                status = ex.INTERRUPTED
                if not self.stopping_now:
                    raise
                _uncancel_current_task()  # our own cancel, turned into StopNow below
            except KeyboardInterrupt:
                status = ex.INTERRUPTED
                raise
            except BaseException as exc:
                status, failure = ex.FAILED, exc
                raise
            finally:
                self.winding_down = True
                if status != ex.FAILED and self.stop.is_set():
                    status = ex.INTERRUPTED
                stop_watching()
                runner.close()
                unsaved = await self._close(collector)
                self._say_spans_outside_trials(collector)
                await self._close_models()
                if unsaved is not None:
                    status, failure = ex.FAILED, failure or unsaved
                self.progress.finish()
                lost = next((e for e in (unsaved, failure) if isinstance(e, LeaseLost)), None)
                if lost is not None:  # another process may run the experiment now: its status is theirs to record
                    raise lost
                recorded = self._record_end(status, failure)
                if unsaved is not None and (failure is unsaved or isinstance(failure, OSError)):
                    raise _store_write_failed(self.store, self._resume_command(), unsaved, recorded) from unsaved
        if self.stopping_now:
            raise StopNow(self._stopped_at_once())
        # The run's handlers are the caller's again: a signal now loses only the summary, all is saved.
        saved = StopNow(stopped_after_saving(self.experiment.status, self._resume_command(), self._report_command()))
        try:
            with stopped_by_signals(lambda: saved):
                if status == ex.COMPLETED:
                    compact(self.store, skip_if_busy=True)  # another compaction running will merge these files later
                self.experiment.summary = self.summary()
        except KeyboardInterrupt:  # off the main thread, the caller's own handler's
            raise saved from None
        return self.experiment

    def _say_spans_outside_trials(self, collector: TrialCollector) -> None:
        """Warn of spans that started outside any trial while the run lasted: work that reached a thread started
        outside the trials (threads and pool tasks started inside one carry it, see :mod:`._threads`), which belongs
        to no trial and is not stored."""
        outside = collector.outside_trials - self._outside_trials_at_open
        if outside:
            warnings.warn(
                f"{outside} span(s) started outside any trial while the run lasted, with no parent span: work "
                "reached a thread started outside the trials (a worker started before the run that takes its work "
                "from a queue) without the trial's context, so these spans belong to no trial and are not in the "
                "store. Hand such work over as agenteval_instrumentation's with_current_context(fn), which carries "
                "the context with it",
                stacklevel=2,
            )
        after = collector.after_trials - self._after_trials_at_open
        if after:
            warnings.warn(
                f"{after} span(s) started in a thread or asyncio task a trial had started, after that trial had "
                "ended: a worker thread, pool or task a trial starts and keeps (started lazily on the first call, "
                "then fed by later trials) carries the first trial's context, so these spans are no trial's and are "
                "not in the store. Start such a worker before the run and hand it work as agenteval_instrumentation's "
                "with_current_context(fn); hand a task each piece of work with contextvars.copy_context() taken in "
                "the trial, and run the piece in a task created with that context=",
                stacklevel=2,
            )

    def _say_loop_blocked(self, late: float) -> None:
        self.progress.note(
            f"the event loop was blocked for {late:.1f} s: an async agent is making a blocking call "
            "(time.sleep, sync I/O), which holds up every trial and their timeouts"
        )

    async def _save_finished(self) -> None:
        """The scheduler's tick: score the trials that finished, hand them over, publish."""
        await self._process()
        assert self.sink is not None
        self.sink.flush()

    async def _close(self, collector: TrialCollector) -> OSError | None:
        """Save every trial that finished (late spans included) and close the writers and the OTLP export;
        the first storage error, if any (everything that could be saved was)."""
        assert self.sink is not None
        first: OSError | None = None
        try:
            await self._process()
            await self._process(collector.close(self.experiment.experiment_id))
        except OSError as exc:
            first = exc
        finally:
            # Every trial is scored (or kept for --resume): what DuckDB holds goes back before the compaction
            # and the summary, which would otherwise set the run's peak on top of it.
            self.engine.release()
        unsaved = self.sink.close()
        if self.otlp is not None:
            self.otlp.close()  # sends what is queued, then stops
        return first or unsaved

    async def _close_models(self) -> None:
        """The judge's and the models' clients on this loop; a failure to close costs nothing saved."""
        with contextlib.suppress(Exception):
            await self.engine.close()
            await self.models.close()

    def _record_end(self, status: str, failure: BaseException | None) -> bool:
        """Save the experiment's final status (and why it failed); False when even that cannot be
        written, so the store still says ``running`` (``--resume`` finds it all the same)."""
        self.experiment.status = status
        self.experiment.ended_at = time.time_ns()
        self.experiment.error = None if failure is None else capture.error_text(failure)
        try:
            ex.save(self.store, self.experiment)
        except OSError:
            return False
        return True

    async def _process(self, late_spans: Sequence[Any] = ()) -> None:
        """Score every finished trial and hand it to the sink (one Arrow encoding for all their spans)."""
        assert self.sink is not None
        results = self.pending[:]
        self.pending.clear()  # the same list: the scheduler's workers append to it
        spans = [span for result in results for span in result.spans] + list(late_spans)
        spans_table = spans_to_table(spans) if spans else None
        if not results:
            if spans_table is not None:
                self.sink.add(spans_table, JUDGEMENT_SCHEMA.empty_table(), [])
            if self.otlp is not None:
                self.otlp.send(spans)
            return
        try:
            judged = await self._judge(results, spans_table)
        except asyncio.CancelledError:  # stopped while a judge was grading: these trials are saved at the close
            self.pending[:0] = results
            raise
        judge_spans = self._judges_spans(results)
        if judge_spans:
            self.sink.add(spans_to_table(judge_spans), JUDGEMENT_SCHEMA.empty_table(), [])
            if self.otlp is not None:
                self.otlp.send(judge_spans)
        verdicts = self.engine.outcomes(
            [r.plan.trial_id for r in results],
            [r.failure.type if r.failure else None for r in results],
            judged.table,
            [r.failure.infrastructure if r.failure else None for r in results],
        )
        trial_rows = []
        for result in results:
            verdict = verdicts[result.plan.trial_id]
            trial_rows.append(self._trial_row(result, verdict))
            if result.cache_hits:
                self.counts["cache_hits"] += result.cache_hits
            self._count(verdict.outcome, bool(verdict.infrastructure))
        scores = score_table(self.experiment.experiment_id, judged, self.pass_id, time.time_ns())
        self.sink.add(spans_table, scores, trial_rows)
        if self.otlp is not None:
            self.otlp.send(self._judged_spans(results, verdicts, scores, late_spans))

    def _judged_spans(
        self, results: list[TrialResult], verdicts: dict[str, Verdict], scores: pa.Table, late: Sequence[Any]
    ) -> list[Any]:
        """The spans to send over OTLP: each trial's root (of the try that counts) with its outcome and scores."""
        by_trial: dict[str, list[dict[str, Any]]] = {}
        for score in scores.to_pylist():
            by_trial.setdefault(score["trial_id"], []).append(score)
        now = time.time_ns()
        out: list[Any] = []
        for result in results:
            verdict = verdicts[result.plan.trial_id]
            outcome = outcome_attributes(verdict.outcome, verdict.failure_type, verdict.infrastructure)
            for span in result.spans:
                if _is_root_of(span, result.trace_id):
                    span = judged_root(span, outcome, by_trial.get(result.plan.trial_id, []), now)
                out.append(span)
        return out + list(late)

    def _judges_spans(self, results: list[TrialResult]) -> list[Any]:
        """The spans a coroutine scorer (the LLM judge) made for these trials while they were scored."""
        if self.collector is None or not self.engine.has_coroutines():
            return []
        eid = self.experiment.experiment_id
        return [span for result in results for span in self.collector.take(eid, result.plan.trial_id)]

    async def _judge(self, results: list[TrialResult], spans: pa.Table | None) -> Judgement:
        """:meth:`_score`; should the batch fail as a whole, trial by trial, so that one trial's odd value
        costs that trial an error score and the rest of the batch is judged as usual."""
        try:
            return await self._score(results, spans)
        except Exception:
            pass
        parts = []
        for result in results:
            try:
                parts.append(await self._score([result], spans))
            except Exception as exc:
                if result.failure is None:
                    plan = result.plan
                    message = f"this trial could not be scored: {capture.error_text(exc)}"
                    parts.append(
                        self.engine.failed([plan.trial_id], [plan.case.id], {plan.case.id: plan.case}, message)
                    )
        return Judgement.concat(parts)

    async def _score(self, results: list[TrialResult], spans: pa.Table | None) -> Judgement:
        """Scores of the trials that produced an answer, through the same feature query and scorers as
        ``rescore`` uses over the store."""
        answered = [r for r in results if r.failure is None]
        if not answered:
            return Judgement.empty()
        trials = pa.table(
            {
                "experiment_id": [self.experiment.experiment_id] * len(answered),
                "trial_id": [r.plan.trial_id for r in answered],
                "case_id": [r.plan.case.id for r in answered],
                "attempt": [r.plan.attempt for r in answered],
                "trace_id": [r.trace_id for r in answered],
                "failure_type": pa.nulls(len(answered), pa.string()),
                "reply": [self._stored_reply(r) for r in answered],
                # The replies in memory: what scorers read when content capture keeps them out of the spans.
                "replies": pa.array([r.replies for r in answered], pa.list_(pa.string())),
            }
        )
        features = self.engine.features(trials, spans if spans is not None else SPAN_SCHEMA.empty_table())
        cases = {r.plan.case.id: r.plan.case for r in answered}
        if self.engine.has_coroutines():
            return await self.engine.judge_async(features, cases)
        return self.engine.judge(features, cases)

    @staticmethod
    def _stored_reply(result: TrialResult) -> str | None:
        """The final reply as the trial row keeps it: none with content capture off; otherwise through the redactor
        and secret masking, as the root span's copy is, but whole (``reply_length`` counts it)."""
        if not capture.config.enabled or not result.replies:
            return None
        return capture.whole_text(STORED_REPLY, result.replies[-1])

    def _trial_row(self, result: TrialResult, verdict: Verdict) -> dict[str, Any]:
        """The trial as stored: what it did (its own failure, if any), and the verdict of the run's scores as
        ``outcome``, ``passed`` and ``infrastructure``. Its ``failure_type`` stays its own, never a
        ``scorer_error``: the ``trials`` view judges by the current scores, so a rescore can clear that."""
        failure = result.failure
        return {
            "experiment_id": self.experiment.experiment_id,
            "trial_id": result.plan.trial_id,
            "case_id": result.plan.case.id,
            "attempt": result.plan.attempt,
            "trace_id": result.trace_id,
            "outcome": verdict.outcome,
            "passed": verdict.outcome == "passed",
            "failure_type": failure.type if failure else None,
            "infrastructure": verdict.infrastructure,
            "error_message": failure.message if failure else None,
            "reply": self._stored_reply(result),
            "started_at": result.started_ns,
            "ended_at": result.ended_ns,
            "duration_ms": (result.ended_ns - result.started_ns) / 1e6,
            "input_tokens": result.input_tokens,
            "output_tokens": result.output_tokens,
            "cost_usd": result.cost_usd,
            "supersedes": result.plan.supersedes,
            "input_tokens_all_tries": result.input_tokens_all_tries,
            "output_tokens_all_tries": result.output_tokens_all_tries,
            "cost_usd_all_tries": result.cost_usd_all_tries,
        }

    @contextlib.contextmanager
    def _signals(self) -> Iterator[None]:
        """Ctrl-C and SIGTERM stop new trials and keep what finished; a second one stops at once.

        The handler never raises into whatever the main thread is doing, since that may be DuckDB (which
        turns the exception into "Query interrupted" and leaves its connection busy) or asyncio's own
        bookkeeping: a second signal cancels the run from the event loop, or, once the trials are over and
        what finished is being saved, lets the saving end first. Only a third signal, which means the loop
        never got to the second (a blocking call in an async agent holds it), raises where it lands.

        Python delivers signals to the main thread only: a run started from another thread keeps
        the application's own handlers, and its caller stops it by other means.
        """
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()

        def on_signal(signum: int, frame: Any) -> None:
            self.signals += 1
            if self.signals == 1:
                loop.call_soon_threadsafe(self._stop_soon)
            elif self.signals == 2:
                self.stopping_now = True
                if not self.winding_down and task is not None:
                    loop.call_soon_threadsafe(task.cancel)
            else:
                raise StopNow(self._stopped_at_once())

        previous = {}
        for sig in (signal.SIGINT, signal.SIGTERM):
            try:
                previous[sig] = signal.signal(sig, on_signal)
            except ValueError:  # not the main thread (see above)
                break
        try:
            yield
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)

    def _stopped_at_once(self) -> str:
        return stopped_after_saving(ex.INTERRUPTED, self._resume_command(), self._report_command())

    def _stop_soon(self) -> None:
        self.stop.set()  # first: once the note is out, another Ctrl-C is a second one
        self.progress.note("stopping: finishing what is done; unfinished trials can be resumed")

    def summary(self) -> ex.Summary:
        """What the end of a run reports: outcomes, failures apart from wrong answers, and where to look."""
        eid = self.experiment.experiment_id
        with contextlib.closing(self.store.connect(traces=False)) as con:  # one connection for both: 45 ms less
            with judged_connection(self.store, eid, save=True, con=con) as judged:
                figures = ex.summarize(self.store, eid, judged)
            save_report(self.store, eid, con)  # what `agenteval report` shows, while nothing changes
        return ex.Summary(
            **dataclasses.asdict(figures),
            experiment_id=self.experiment.experiment_id,
            name=self.experiment.name,
            status=self.experiment.status,
            dataset=self.experiment.dataset_name,
            version=self.experiment.version,
            this_run={
                "trials": sum(self.counts[o] for o in ("passed", "wrong", "failed")),
                **dict(self.counts),
                **({"not_run_simulated": len(self.skipped)} if self.skipped else {}),
            },
            report=self._report_command(),
            resume=self._resume_command() if self.experiment.status == ex.INTERRUPTED else None,
            otlp=None if self.otlp is None else ex.OTLPExport(self.otlp.counts.sent, self.otlp.counts.failed),
            limits=self.limits,
            **self._shards_now(),
        )

    def _shards_now(self) -> dict[str, Any]:
        """For a shard's run: the shard, every shard's progress, and the experiment's combined status."""
        shard = self.options.shard
        if not shard:
            return {}
        eid = self.experiment.experiment_id
        counts = self.store.rows("SELECT case_id, count(*) AS n FROM trials WHERE experiment_id = ? GROUP BY 1", [eid])
        combined = ex.find_exact(self.store, eid)
        return {
            "shard": shard,
            "shards": ex.shard_progress(self.store, eid, {row["case_id"]: row["n"] for row in counts}),
            "experiment_status": combined.status if combined is not None else None,
        }

    def _resume_command(self) -> str:
        return resume_command(self.experiment.experiment_id, self.options.shard) + self.store.as_option()

    def _report_command(self) -> str:
        return f"agenteval report {self.experiment.experiment_id}{self.store.as_option()}"


def stopped_after_saving(status: str, resume: str | None, report: str) -> str:
    """What a run stopped by a signal once its trials were saved and its status recorded (while it compacted,
    summed up or printed) says: nothing was lost, and where to go on."""
    if status == ex.INTERRUPTED and resume:
        return f"stopped at once; what finished is saved; continue with: {resume}"
    return f"stopped; the run {status} and every trial is saved: {report}"


def _refuse_store(store: Store, why: str) -> NoReturn:
    raise RunRefused(
        f"the store {store.root} on a worker of the Ray cluster (at {socket.gethostname()}) is not the driver's: "
        f"{why}; every node must reach the store at the same path (a shared folder, or object storage)"
    )


def _holds_experiment(store: Store, experiment_id: str) -> bool:
    """Whether ``store`` has the experiment's record: on a file system its folder, looked up by name (a shared file
    system such as NFS may list a folder's entries as they were up to a minute ago, but looks a new name up afresh);
    on object storage, which lists what is there, by a query."""
    if isinstance(store.root, Path):
        return (store.root / "experiments" / partition_path("experiment_id", experiment_id)).is_dir()
    return ex.find_exact(store, experiment_id) is not None


def _uncancel_current_task() -> None:
    task = asyncio.current_task()
    if task is not None:
        task.uncancel()


def _simulated_cases_checked(cases: list[Case], simulator: bool, skip: bool) -> tuple[list[Case], list[str]]:
    """The cases to run and those left out: a case with a simulated user needs a simulator, or it would run
    as a single turn and be scored as if it had been meant that way. Without one it is refused, or left out
    (and reported as not run) with ``skip_simulated``."""
    simulated = [c.id for c in cases if c.simulated_user]
    if simulator and not simulated:  # a simulator asked for and never used is worth a word: a wrong dataset?
        warnings.warn(
            "a user simulator was given (--simulate-users) but none of the cases to run has a simulated user: "
            "it will not be called",
            stacklevel=5,
        )
    if not simulated or simulator:
        return cases, []
    if not skip:
        raise UsageError(
            f"{len(simulated)} case(s) have a simulated user but no simulator was given: {listed(simulated)}. "
            "Give --simulate-users PROVIDER/MODEL (or evaluate(user_simulator=...)), or --skip-simulated to "
            "leave them out"
        )
    left = set(simulated)
    return [c for c in cases if c.id not in left], simulated


def _is_root_of(span: Any, trace_id: str | None) -> bool:
    """Whether ``span`` is the root span of the trial's try whose trace is ``trace_id``."""
    scope = span.instrumentation_scope
    return (
        span.parent is None
        and scope is not None
        and scope.name == A.RUNNER_SCOPE
        and format(span.context.trace_id, "032x") == trace_id
    )


def resume_command(experiment_id: str, shard: str | None = None) -> str:
    """The command that continues an interrupted or failed run (one shard of it, with ``shard``)."""
    return f"agenteval run --resume {experiment_id}" + (f" --shard {shard}" if shard else "")


def _store_write_failed(store: Store, resume: str, error: OSError, recorded: bool) -> StoreNotWritable:
    status = "its status is saved as failed" if recorded else "its status could not be saved (it still says running)"
    return StoreNotWritable(
        f"the run stopped: the store at {store.root} could not be written ({error}). The trials saved before are "
        f"intact and {status}; free space or fix the store's permissions, then run "
        f"`{resume}` to run the rest"
    )


FREEZE_LONG_LIVED_OBJECTS = enabled("gc_freeze")
"""Benchmarks only (``AGENTEVAL_ABLATE=gc_freeze``, see ``agenteval_exporters.ablation``): False runs unfrozen."""


@contextlib.contextmanager
def _long_lived_objects_frozen() -> Iterator[None]:
    """Keep what outlives the trials (the cases, the plans, loaded modules) out of the garbage
    collector's full passes for the run. Without it, at 100,000 trials, 64 full passes walked
    them all and took 12% of the run. What the trials make is collected as usual."""
    # Switched off for a benchmark, or the application froze its own heap: leave the collector alone.
    if not FREEZE_LONG_LIVED_OBJECTS or gc.get_freeze_count():
        yield
        return
    gc.freeze()
    try:
        yield
    finally:
        gc.unfreeze()


def _cases_table(experiment_id: str, cases: Sequence[Case]) -> pa.Table:
    """The run's snapshot of its cases, built column by column (a dict per case cost 80 MB at 100,000)."""
    return pa.table(
        {
            "experiment_id": pa.repeat(pa.scalar(experiment_id), len(cases)),
            "case_id": [c.id for c in cases],
            "line": [c.line for c in cases],
            "input": [c.input for c in cases],
            "expected_output": [c.expected_output for c in cases],
            "category": [c.category for c in cases],
            "difficulty": [c.difficulty for c in cases],
            "tags": [list(c.tags) for c in cases],
            "case": [c.to_json() for c in cases],
        },
        schema=CASES,
    )


def _name_one(store: Store, experiment_id: str | None, shard: Shard | None) -> str:
    """For a resume without an id that found no interrupted experiment: how to name a completed one, whose failed
    trials ``--retry-failed`` re-runs too (the newest's id, when the store has any)."""
    newest = ex.find(store) if experiment_id is None and shard is None else None
    if newest is None:
        return ""
    return (
        "; to re-run the failed trials of a completed one (with --retry-failed), name it: "
        f"--resume {newest.experiment_id} is the newest, agenteval experiments lists them all"
    )


def _resumable(store: Store, experiment_id: str | None, shard: Shard | None) -> tuple[ex.Experiment, AnyLease]:
    """The experiment (or, with ``shard``, the shard's record) to resume, and its lease, now held by this process."""
    if shard is not None:
        if not experiment_id:
            raise UsageError(f"--resume with --shard {shard} needs the experiment's id: --resume ID --shard {shard}")
        found = ex.find_shard(store, experiment_id, str(shard))
        what = f"no shard {shard} of experiment {experiment_id}"
    else:
        # A run killed with SIGKILL never recorded "interrupted": its newest row still says "running".
        found = ex.find(store, experiment_id, None if experiment_id else (ex.INTERRUPTED, ex.RUNNING, ex.FAILED))
        what = f"no experiment {experiment_id}" if experiment_id else "no interrupted experiment"
        if found is not None and found.options.get("shard"):
            raise UsageError(
                f"{found.experiment_id} runs in shards: resume one with --resume {found.experiment_id} --shard K/N"
            )
    if found is None:
        raise RunRefused(f"cannot resume: there is {what} in {store.root}{_name_one(store, experiment_id, shard)}")
    lease = _lease(store, found.experiment_id, shard)
    if not lease.acquire(TAKE_WAIT_SECONDS):  # its run is alive: two processes would run the same trials
        raise RunRefused(
            f"cannot resume {found.experiment_id}: it is still running ({lease.holder()}); "
            "wait for it to finish, or stop it (Ctrl-C) and resume it then"
        )
    return found, lease


def _check_comparable(
    store: Store,
    previous: ex.Experiment,
    shard: Shard | None,
    agent: LoadedAgent,
    dataset: Dataset,
    corpus: str | None,
    judging: list[Scorer],
    chosen: list[Case],
) -> None:
    """A resume's trials are comparable with the run's first ones, or it is refused: the same agent, dataset and
    corpus (its content hash ``corpus``), judged alike, over the cases the run (or its ``shard``) chose."""
    check_resumable(previous, agent, dataset, corpus)
    check_judged_alike(previous, judging, ex.scorer_versions(store, previous.experiment_id))
    recorded = ex.case_ids(store, previous.experiment_id)
    check_same_cases(previous, chosen, {i for i in recorded if shard is None or shard.holds(i)})


def _lease(store: Store, experiment_id: str, shard: Shard | None) -> AnyLease:
    return run_lease(store.root, experiment_id, None if shard is None else str(shard))


def _new_experiment_id(given: str | None, name: str | None, shard: Shard | None) -> str:
    """The id a new run records: given, derived from the name every shard shares, or new."""
    if given is None and shard is not None:
        if not name:
            raise UsageError(
                f"--shard {shard} needs an experiment every shard shares: --experiment ID, or --name NAME "
                "(the id is derived from it)"
            )
        given = shared_experiment_id(name)
    return ex.new_experiment_id() if given is None else given


@contextlib.contextmanager
def _joining(store: Store, experiment: ex.Experiment, shard: Shard | None) -> Iterator[None]:
    """For a new shard, hold the experiment's joining lease (see :func:`~agenteval.store._lease.joining_lease`)."""
    if shard is None:
        yield
        return
    with joining_lease(store.root, experiment.experiment_id) as joining:
        if not joining.acquire(JOIN_WAIT_SECONDS):
            raise RunRefused(
                f"shard {shard} of {experiment.experiment_id} cannot join: another shard is joining it "
                f"({joining.holder()}) and took longer than {JOIN_WAIT_SECONDS:g} s; start --shard {shard} again"
            )
        yield


def _check_is_new(store: Store, experiment: ex.Experiment, shard: Shard | None, given: bool) -> None:
    """A new run's id (``given``: not made up here) names no run, or, for a shard, no run of that shard and only
    shards it can join."""
    if shard is not None:
        _check_joins_its_shards(store, experiment, shard)
    elif given and ex.find_exact(store, experiment.experiment_id) is not None:
        eid = experiment.experiment_id
        raise RunRefused(f"experiment {eid} exists already: resume it with --resume {eid}, or give another id")


_WHERE_A_SHARD_RUNS = frozenset({"shard", "dataset"})
"""Options that differ between shards of one experiment: which shard, and the path its dataset was read from."""


def _check_joins_its_shards(store: Store, experiment: ex.Experiment, shard: Shard) -> None:
    """A shard joins the other shards of its experiment only if it runs what they run."""
    if ex.find_shard(store, experiment.experiment_id, str(shard)) is not None:
        raise RunRefused(
            f"shard {shard} of {experiment.experiment_id} has run already: continue it with "
            f"--resume {experiment.experiment_id} --shard {shard}"
        )
    for other in ex.shard_records(store, experiment.experiment_id):
        other_shard = Shard.parse(other.options.get("shard") or "1/1")
        if other_shard.count != shard.count:
            raise RunRefused(
                f"{experiment.experiment_id} runs in {other_shard.count} shards, not {shard.count}: give --shard K/"
                f"{other_shard.count}"
            )
        if (other.version, other.dataset_hash) != (experiment.version, experiment.dataset_hash):
            raise RunRefused(
                f"shard {other_shard} of {experiment.experiment_id} ran another agent or dataset (version "
                f"{other.version}, dataset hash {other.dataset_hash[:12]}): every shard must run the same"
            )
        # Where the dataset is read from is no part of it (its content hash is compared above): the same file in
        # two checkouts, on two machines, is one dataset.
        ran = {k: v for k, v in other.options.items() if k not in _WHERE_A_SHARD_RUNS}
        changed = changed_on_resume(ran, {k: v for k, v in experiment.options.items() if k not in _WHERE_A_SHARD_RUNS})
        if changed:
            raise RunRefused(
                f"shard {other_shard} of {experiment.experiment_id} ran with other options: {'; '.join(changed)}"
            )
