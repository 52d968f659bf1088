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
import itertools
import secrets
import signal
import threading
import time
import uuid
import warnings
from collections import Counter
from collections.abc import Callable, Coroutine, Iterator, Sequence
from pathlib import Path
from typing import Any, ParamSpec

import pyarrow as pa
from opentelemetry.sdk.trace.export import BatchSpanProcessor

from agenteval_exporters import SPAN_SCHEMA, spans_to_batch
from agenteval_exporters.ablation import enabled
from agenteval_instrumentation import capture
from agenteval_instrumentation.text import storable_text

from ..agents._loading import LoadedAgent, load_agent
from ..analysis import _experiments as ex
from ..dataset._cases import Case, Dataset
from ..dataset._catalog import builtin_names, load_dataset
from ..dataset._sampling import sample_cases
from ..errors import AgentevalError
from ..scorers import Scorer, load_scorers
from ..scorers._engine import Judgement, ScoringEngine, score_table
from ..scorers._loading import scorer_specs
from ..store import CASES, TRIALS, Store, StoreNotWritable, compact
from ..store._lease import Lease, experiment_lease
from ..tracing import SCHEDULE_DELAY_MILLIS, exports_otlp, otlp_exporter_from_env, sdk_provider
from ._collect import TrialCollector, collector_for
from ._environment import environment
from ._options import CHANGEABLE_ON_RESUME, RunOptions, changed_on_resume
from ._prices import load_prices
from ._progress import Progress
from ._trial import StopNow, TrialPlan, TrialResult, TrialRunner, UserSimulator

BATCH_SECONDS = 1.0
"""How often finished trials are scored and handed to the writers. Each micro-batch has a fixed cost (the
feature query, each SQL scorer's query, the outcome query: 30 to 50 ms); twice a second cost a tenth of a
10,000-trial run's time, once a second half that. The progress counts move at this pace."""
FLUSH_SECONDS = 1.0
BLOCKED_LOOP_SECONDS = 1.0
"""How late housekeeping may wake before the run says that something blocks the event loop."""
SIGNAL_CHECK_SECONDS = 0.1
"""How often ``evaluate()`` waiting beside a running loop wakes to let a Ctrl-C through."""


class RunRefused(AgentevalError, ValueError):
    """The run cannot start as asked (a resume of a changed agent or dataset, nothing to resume, ...)."""


async def evaluate_async(
    agent: str | Callable[..., Any],
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
) -> ex.Experiment:
    """Run ``agent`` over ``dataset`` and return the experiment (id, status, summary).

    ``agent`` is a callable or ``mock`` / ``MODULE:ATTR`` / ``FILE.py:ATTR``; ``dataset`` a built-in
    name, a path or a loaded :class:`Dataset`. ``resume=True`` continues the newest experiment that was
    interrupted or left "running" by a crash (or the one whose id is given) with only its missing trials;
    ``retry_failed`` (``"infra"`` or ``"all"``) also re-runs failed trials, the new attempt superseding the old.
    Options left as None take their defaults (``attempts`` 3, ``concurrency`` 4, ``timeout`` 120 s, every
    case); on resume they take the run's stored values, and one given that differs from those is refused
    (except ``concurrency``).
    ``scorers`` are added to the built-in ones (a same-named scorer replaces a built-in).
    ``progress`` is ``auto`` (a bar on a terminal, lines otherwise), ``plain`` or ``none``.
    """
    target = store if isinstance(store, Store) else Store(store)
    given = {
        name: value
        for name, value in (
            ("attempts", attempts),
            ("concurrency", concurrency),
            ("timeout", timeout),
            ("sample", sample),
            ("sample_seed", sample_seed),
            ("cases", cases),
            ("agent_options", dict(agent_options) if agent_options else None),
        )
        if value is not None
    }
    options = RunOptions(**given, scorers=scorer_specs(scorers))
    run = _Run.prepare(
        target, agent, dataset, options, given, name, resume, retry_failed, user_simulator, prices, progress
    )
    with run.lease:
        run.engine = ScoringEngine(load_scorers([*run.options.scorers, *scorers] if run.resumed else scorers))
        return await run.execute()


P = ParamSpec("P")


def _to_the_end(run: Callable[P, Coroutine[Any, Any, ex.Experiment]]) -> Callable[P, ex.Experiment]:
    """A blocking call of ``run`` with its very parameters (one signature to keep, not two)."""

    @functools.wraps(run)
    def blocking(*args: P.args, **kwargs: P.kwargs) -> ex.Experiment:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return asyncio.run(run(*args, **kwargs))
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
            state["experiment"] = asyncio.run(main())
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
    store: Store
    experiment: ex.Experiment
    agent: LoadedAgent
    dataset: Dataset
    plans: list[TrialPlan]
    options: RunOptions
    user_simulator: UserSimulator | None
    progress: Progress
    resumed: bool
    lease: Lease
    """Held while the run lives, so that no ``--resume`` joins it."""
    engine: ScoringEngine | None = None
    pass_id: str = dataclasses.field(default_factory=lambda: uuid.uuid4().hex[:12])
    counts: Counter[str] = dataclasses.field(default_factory=Counter)

    @classmethod
    def prepare(
        cls,
        store: Store,
        agent_spec: str | Callable[..., Any],
        dataset_spec: str | Path | Dataset | None,
        options: RunOptions,
        given: dict[str, Any],
        name: str | None,
        resume: bool | str,
        retry_failed: str | None,
        user_simulator: UserSimulator | None,
        prices_file: str | Path | None,
        progress: str,
    ) -> _Run:
        if retry_failed not in (None, "infra", "all"):
            raise ValueError("retry_failed must be 'infra' or 'all'")
        with contextlib.ExitStack() as on_failure:  # the lease goes with the run; a run that never starts drops it
            previous = lease = None
            if resume:
                if store.root.exists():
                    store.ensure()  # a store that cannot be written is said before its lease is taken
                previous, lease = _resumable(store, resume if isinstance(resume, str) else None)
                on_failure.callback(lease.release)
                changed = changed_on_resume(previous.options, given)
                if changed:
                    raise RunRefused(
                        f"cannot resume {previous.experiment_id} with other options than it ran with: "
                        f"{'; '.join(changed)}. Leave them out to resume as it ran, or start a new run."
                    )
                kept = {k: v for k, v in previous.options.items() if k in RunOptions.__dataclass_fields__}
                options = RunOptions(**{**kept, **{k: v for k, v in given.items() if k in CHANGEABLE_ON_RESUME}})
                dataset_spec = dataset_spec if dataset_spec is not None else options.dataset
                if agent_spec is None or agent_spec == "":
                    agent_spec = previous.agent
            if dataset_spec is None:
                raise ValueError("a dataset is required (--dataset NAME|PATH)")
            dataset = (
                dataset_spec
                if isinstance(dataset_spec, Dataset)
                else load_dataset(dataset_spec, cases=options.cases, seed=options.sample_seed)
            )
            options.dataset = _dataset_ref(dataset_spec, dataset)
            agent = load_agent(agent_spec, options.agent_options)
            chosen = _chosen_cases(dataset, options)
            prices = load_prices(prices_file)
            if previous is not None:
                _check_resumable(previous, agent, dataset)
                experiment = previous
                experiment.status, experiment.ended_at = ex.RUNNING, None
                plans = _missing_plans(store, experiment.experiment_id, chosen, options.attempts, retry_failed)
            else:
                experiment = ex.Experiment(
                    experiment_id=ex.new_experiment_id(),
                    name=name,
                    dataset_name=dataset.name,
                    dataset_hash=dataset.hash,
                    agent=agent.spec,
                    version=agent.version,
                    options=dataclasses.asdict(options),
                    status=ex.RUNNING,
                    started_at=time.time_ns(),
                    environment={**environment(agent.source_file), "agent": agent.provenance},
                    prices=prices,
                )
                store.ensure()  # everything checked; a store that cannot be written is said before anything runs
                lease = experiment_lease(store.root, experiment.experiment_id)
                lease.acquire()  # a new id: no other process can hold it
                on_failure.callback(lease.release)
                plans = [
                    TrialPlan(case, attempt, _trial_id())
                    for case in chosen
                    for attempt in range(1, options.attempts + 1)
                ]
                store.write("cases", _cases_table(experiment.experiment_id, chosen))
                # The table's Arrow buffers are gone; hand their pages back before the run builds its own.
                pa.default_memory_pool().release_unused()
            run = cls(
                store,
                experiment,
                agent,
                dataset,
                plans,
                options,
                user_simulator,
                Progress.create(progress),
                previous is not None,
                lease,
            )
            on_failure.pop_all()
            return run

    async def execute(self) -> ex.Experiment:
        ex.save(self.store, self.experiment)
        provider = sdk_provider()
        collector = collector_for(provider)
        # The run's spans also go to the OTLP backend the standard variables name, for as long as the run lasts.
        otlp = None if exports_otlp(provider) else otlp_exporter_from_env()
        self.otlp = BatchSpanProcessor(otlp, schedule_delay_millis=SCHEDULE_DELAY_MILLIS) if otlp else None
        collector.open(self.experiment.experiment_id, self.store.root)
        # A writer, not the exporter: the exporter logs write errors (as an SDK exporter must), the run
        # has to stop on them, and record why.
        self.span_writer = self.store.writer("spans", flush_interval=3600)
        self.score_writer = self.store.writer("scores", flush_interval=3600)
        self.trial_writer = self.store.writer("trials", flush_interval=3600)
        self.pending: list[TrialResult] = []
        self.stop = asyncio.Event()
        runner = TrialRunner(
            self.agent,
            self.experiment.experiment_id,
            collector,
            timeout=self.options.timeout,
            prices=self.experiment.prices,
            user_simulator=self.user_simulator,
            on_rate_limit=self.progress.waiting,
        )
        self.progress.start(len(self.plans), self.experiment.experiment_id)
        status = ex.COMPLETED
        failure: BaseException | None = None
        with self._signals(), _long_lived_objects_frozen():
            try:
                await self._run_trials(runner)
            except (KeyboardInterrupt, asyncio.CancelledError):  # stopped at once: what finished can resume
                status = ex.INTERRUPTED
                raise
            except BaseException as exc:
                status, failure = ex.FAILED, exc
                raise
            finally:
                if status != ex.FAILED and self.stop.is_set():
                    status = ex.INTERRUPTED
                unsaved = self._save_what_finished(collector)
                if unsaved is not None:
                    status, failure = ex.FAILED, failure or unsaved
                self.progress.finish()
                recorded = self._record_end(status, failure)
                if unsaved is not None and (failure is unsaved or isinstance(failure, OSError)):
                    raise _store_write_failed(self.store, self.experiment.experiment_id, unsaved, recorded) from unsaved
        if status == ex.COMPLETED:
            compact(self.store, skip_if_busy=True)  # another compaction running will merge these files later
        self.experiment.summary = self.summary()
        return self.experiment

    async def _run_trials(self, runner: TrialRunner) -> None:
        queue = iter(self.plans)

        async def worker() -> None:
            for plan in queue:
                if self.stop.is_set():
                    return
                result = await runner.run(plan)
                # Appended after the await: housekeeping swaps ``pending`` for a new list meanwhile.
                self.pending.append(result)
                # An agent that never suspends (no I/O) would otherwise starve housekeeping: nothing
                # would be scored or saved until the very end, and memory would grow with the run.
                await asyncio.sleep(0)

        async def housekeeping() -> None:
            last_flush = time.monotonic()
            warned = False
            while True:
                asleep = time.monotonic()
                await asyncio.sleep(BATCH_SECONDS)
                late = time.monotonic() - asleep - BATCH_SECONDS
                if late >= BLOCKED_LOOP_SECONDS and not warned:
                    warned = True  # once a run: the trials that ran past their timeout say it each
                    self.progress.note(
                        f"the event loop was blocked for {late:.1f} s: an async agent is making a blocking call "
                        "(time.sleep, sync I/O), which holds up every trial and their timeouts"
                    )
                self._process()
                if time.monotonic() - last_flush >= FLUSH_SECONDS:
                    self._flush()
                    last_flush = time.monotonic()

        keeper = asyncio.create_task(housekeeping())
        workers = [asyncio.create_task(worker()) for _ in range(min(self.options.concurrency, len(self.plans) or 1))]
        stopper = asyncio.create_task(self.stop.wait())
        try:
            running = set(workers)
            while running:
                done, _ = await asyncio.wait(running | {stopper, keeper}, return_when=asyncio.FIRST_COMPLETED)
                for task in done & (running | {keeper}):
                    task.result()  # a failure of the harness itself (not of a trial) stops the run loudly
                running -= done
                if stopper in done:
                    for task in running:  # unfinished trials are re-run by --resume
                        task.cancel()
                    await asyncio.gather(*running, return_exceptions=True)
                    break
        finally:
            keeper.cancel()
            stopper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await keeper

    def _save_what_finished(self, collector: TrialCollector) -> OSError | None:
        """Score and write every trial that finished, then close the writers: each step is tried, so one
        that fails (a full disk) leaves the others to save what they can. The first storage error."""
        first: OSError | None = None
        steps: list[Callable[[], object]] = [
            lambda: self._process(late_spans=collector.close(self.experiment.experiment_id)),
            self._flush,
            self.span_writer.close,
            self.score_writer.close,
            self.trial_writer.close,
        ]
        if self.otlp is not None:
            steps.append(self.otlp.shutdown)  # sends what is queued, then stops
        for step in steps:
            try:
                step()
            except OSError as exc:
                first = first or exc
        return first

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

    def _process(self, late_spans: Sequence[Any] = ()) -> None:
        """Score and hand to the writers every finished trial (one Arrow encoding for all their spans)."""
        results, self.pending = self.pending, []
        spans = [span for result in results for span in result.spans] + list(late_spans)
        spans_batch = spans_to_batch(spans) if spans else None
        if spans_batch is not None:
            self.span_writer.append(spans_batch)
            if self.otlp is not None:
                for span in spans:
                    self.otlp.on_end(span)
        if not results:
            return
        judged = self._judge(results, spans_batch)
        outcomes = self.engine.outcomes(
            [r.plan.trial_id for r in results], [r.failure.type if r.failure else None for r in results], judged.table
        )
        trial_rows = []
        for result in results:
            outcome = outcomes[result.plan.trial_id]
            trial_rows.append(self._trial_row(result, outcome))
            self.counts[outcome] += 1
            if result.failure and result.failure.infrastructure:
                self.counts["infrastructure"] += 1
            self.progress.advance(outcome, bool(result.failure and result.failure.infrastructure))
        scores = score_table(self.experiment.experiment_id, judged, self.pass_id, time.time_ns())
        for batch in scores.to_batches():
            self.score_writer.append(batch)
        self.trial_writer.append(_trial_batch(trial_rows))

    def _judge(self, results: list[TrialResult], spans: pa.RecordBatch | None) -> Judgement:
        """:meth:`_score`; should the batch fail as a whole, trial by trial, so that one trial's odd value
        costs that trial an error score and the rest of the batch is judged as usual."""
        try:
            return self._score(results, spans)
        except Exception:
            pass
        parts = []
        for result in results:
            try:
                parts.append(self._score([result], spans))
            except Exception as exc:
                if result.failure is None:
                    plan = result.plan
                    message = f"this trial could not be scored: {capture.error_text(exc)}"
                    parts.append(
                        self.engine.failed([plan.trial_id], [plan.case.id], {plan.case.id: plan.case}, message)
                    )
        return Judgement.concat(parts)

    def _score(self, results: list[TrialResult], spans: pa.RecordBatch | None) -> Judgement:
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
                "trace_id": [r.trace_id for r in answered],
                "failure_type": pa.nulls(len(answered), pa.string()),
                "reply": [self._stored_reply(r) for r in answered],
                # The replies in memory: what scorers read when content capture keeps them out of the spans.
                "replies": pa.array([r.replies for r in answered], pa.list_(pa.string())),
            }
        )
        features = self.engine.features(trials, spans if spans is not None else SPAN_SCHEMA.empty_table())
        cases = {r.plan.case.id: r.plan.case for r in answered}
        return self.engine.judge(features, cases)

    @staticmethod
    def _stored_reply(result: TrialResult) -> str | None:
        return (result.replies[-1] if result.replies else None) if capture.config.enabled else None

    def _flush(self) -> None:
        # Order is the commit protocol: a trial row is published only after its spans and scores.
        self.span_writer.flush()
        self.score_writer.flush()
        self.trial_writer.flush()

    def _trial_row(self, result: TrialResult, outcome: str) -> dict[str, Any]:
        failure = result.failure
        return {
            "experiment_id": self.experiment.experiment_id,
            "trial_id": result.plan.trial_id,
            "case_id": result.plan.case.id,
            "attempt": result.plan.attempt,
            "trace_id": result.trace_id,
            "outcome": outcome,
            "passed": outcome == "passed",
            "failure_type": failure.type if failure else None,
            "infrastructure": failure.infrastructure if failure else None,
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

        Python delivers signals to the main thread only: a run started from another thread keeps
        the application's own handlers, and its caller stops it by other means.
        """
        loop = asyncio.get_running_loop()

        def on_signal(signum: int, frame: Any) -> None:
            if self.stop.is_set():
                raise StopNow  # a second Ctrl-C: stop at once
            loop.call_soon_threadsafe(self._stop_soon)

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

    def _stop_soon(self) -> None:
        self.stop.set()  # first: once the note is out, another Ctrl-C is a second one
        self.progress.note("stopping: finishing what is done; unfinished trials can be resumed")

    def summary(self) -> dict[str, Any]:
        """What the end of a run reports: outcomes, failures apart from wrong answers, and where to look."""
        figures = ex.summarize(self.store, self.experiment.experiment_id)
        return {
            "experiment_id": self.experiment.experiment_id,
            "name": self.experiment.name,
            "status": self.experiment.status,
            "dataset": self.experiment.dataset_name,
            "version": self.experiment.version,
            **figures,
            "this_run": {"trials": sum(self.counts[o] for o in ("passed", "wrong", "failed")), **dict(self.counts)},
            "report": f"agenteval report {self.experiment.experiment_id}",
            "resume": f"agenteval run --resume {self.experiment.experiment_id}"
            if self.experiment.status == ex.INTERRUPTED
            else None,
        }


_INT64 = range(-(2**63), 2**63)


def _store_write_failed(store: Store, experiment_id: str, error: OSError, recorded: bool) -> StoreNotWritable:
    status = "its status is saved as failed" if recorded else "its status could not be saved (it still says running)"
    return StoreNotWritable(
        f"the run stopped: the store at {store.root} could not be written ({error}). The trials saved before are "
        f"intact and {status}; free space or fix the store's permissions, then run "
        f"`agenteval run --resume {experiment_id}` to run the rest"
    )


def _trial_batch(rows: list[dict[str, Any]]) -> pa.RecordBatch:
    """Trial rows as a batch; values the table cannot hold (a lone surrogate, an integer past 64 bits,
    both from agent or user code) are repaired or dropped in the rows they are in, not the batch."""
    try:
        return pa.RecordBatch.from_pylist(rows, schema=TRIALS)
    except (pa.ArrowInvalid, pa.ArrowTypeError, OverflowError, UnicodeEncodeError):
        return pa.RecordBatch.from_pylist([_storable_row(row) for row in rows], schema=TRIALS)


def _storable_row(row: dict[str, Any]) -> dict[str, Any]:
    out = {}
    for name, value in row.items():
        if isinstance(value, str):
            value = storable_text(value)
        elif isinstance(value, int) and not isinstance(value, bool) and value not in _INT64:
            value = None
        out[name] = value
    return out


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


def _chosen_cases(dataset: Dataset, options: RunOptions) -> list[Case]:
    """The cases the run asks for; an empty dataset, or a sample larger than the dataset, is said out loud."""
    if not dataset.cases:
        raise RunRefused(f"the dataset {dataset.name} ({dataset.path}) has no cases: nothing to run")
    if not options.sample:
        return list(dataset.cases)
    if options.sample >= len(dataset.cases):
        warnings.warn(
            f"--sample {options.sample} asks for at least as many cases as the dataset {dataset.name} has "
            f"({len(dataset.cases)}): running all of them",
            stacklevel=4,
        )
    return sample_cases(dataset.cases, options.sample, options.sample_seed)


def _dataset_ref(spec: str | Path | Dataset, dataset: Dataset) -> str:
    """How a resume finds the dataset again: a built-in's name, or a file's absolute path."""
    if isinstance(spec, Dataset):
        return spec.path if Path(spec.path).is_file() else spec.name
    text = str(spec)
    return text if text in builtin_names() else str(Path(text).resolve())


_TRIAL_SEQUENCE = itertools.count(secrets.randbits(32))


def _trial_id() -> str:
    """Sortable by when the trial was planned, unique across machines: the time, then a sequence
    that starts at random in each process (a uuid4 each cost a sixth of planning 100,000 trials).
    Spans files are in time order too, so a range of trial ids maps onto few row groups, and
    rescoring a batch skips the rest by statistics."""
    return f"{time.time_ns():016x}{next(_TRIAL_SEQUENCE) & 0xFFFFFFFF:08x}"


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


def _resumable(store: Store, experiment_id: str | None) -> tuple[ex.Experiment, Lease]:
    """The experiment to resume, and its lease, now held by this process."""
    # A run killed with SIGKILL never recorded "interrupted": its newest row still says "running".
    found = ex.find(store, experiment_id, None if experiment_id else (ex.INTERRUPTED, ex.RUNNING, ex.FAILED))
    if found is None:
        what = f"no experiment {experiment_id}" if experiment_id else "no interrupted experiment"
        raise RunRefused(f"cannot resume: there is {what} in {store.root}")
    lease = experiment_lease(store.root, found.experiment_id)
    if not lease.acquire():  # its run is alive: two processes would run the same trials
        raise RunRefused(
            f"cannot resume {found.experiment_id}: it is still running ({lease.holder()}); "
            "wait for it to finish, or stop it (Ctrl-C) and resume it then"
        )
    return found, lease


def _check_resumable(previous: ex.Experiment, agent: LoadedAgent, dataset: Dataset) -> None:
    if previous.version != agent.version:
        raise RunRefused(
            f"cannot resume {previous.experiment_id}: the agent changed (version {previous.version} -> "
            f"{agent.version}); its trials would mix two agents. Start a new run instead."
        )
    if previous.dataset_hash != dataset.hash:
        raise RunRefused(
            f"cannot resume {previous.experiment_id}: the dataset {dataset.name} changed since it started "
            "(its content hash differs). Start a new run instead."
        )


def _missing_plans(
    store: Store, experiment_id: str, cases: Sequence[Case], attempts: int, retry_failed: str | None
) -> list[TrialPlan]:
    done = {(row["case_id"], row["attempt"]): row for row in ex.done_trials(store, experiment_id)}
    plans = []
    for case in cases:
        for attempt in range(1, attempts + 1):
            row = done.get((case.id, attempt))
            if row is None:
                plans.append(TrialPlan(case, attempt, _trial_id()))
            elif row["outcome"] == "failed" and (
                retry_failed == "all" or retry_failed == "infra" and row["infrastructure"]
            ):
                plans.append(TrialPlan(case, attempt, _trial_id(), supersedes=row["trial_id"]))
    return plans
