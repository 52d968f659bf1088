"""What a run will do, decided before anything runs: the cases, the trials (cases x attempts), and on
resume which trials are missing and which options may change. Pure: it reads what it is given (the
dataset, the stored experiment and its done trials) and writes nothing."""

from __future__ import annotations

import itertools
import secrets
import time
import warnings
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..agents._loading import CODE_MARK
from ..analysis import _experiments as ex
from ..dataset._cases import Case, Dataset
from ..dataset._catalog import builtin_names
from ..dataset._sampling import sample_cases
from ..errors import AgentevalError, UsageError
from ..scorers._base import Scorer
from ..scorers._loading import ScorerSpec, same_specs, scorer_specs, spec_label
from ._options import (
    CHANGEABLE_ON_RESUME,
    RunOptions,
    cache_recorded_now,
    changed_on_resume,
    masked_agent_options,
    masked_urls,
    queries_maybe_lost,
    same_simulator,
)
from ._prices import repriced
from ._trial import TrialPlan

if TYPE_CHECKING:
    from ..agents._loading import LoadedAgent


class RunRefused(AgentevalError, ValueError):
    """The run cannot start as asked (a resume of a changed agent or dataset, nothing to resume, ...)."""


def chosen_cases(dataset: Dataset, options: RunOptions) -> list[Case]:
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


MAX_TRIALS = 10_000_000
"""The most trials one process plans (cases x attempts): each plan is held for the run (about 220 bytes), so a
mistyped ``--attempts`` would otherwise fill the memory for minutes before the run failed."""


def check_size(cases: Sequence[Case], attempts: int, sharded: bool) -> None:
    """Refuse a run too large to plan in memory, before any of it is planned or written."""
    trials = len(cases) * attempts
    if trials > MAX_TRIALS:
        split = "more shards" if sharded else "shards (--shard K/N, see docs/scale.md)"
        raise UsageError(
            f"--attempts {attempts:,} over {len(cases):,} case(s) is {trials:,} trials; one run plans at most "
            f"{MAX_TRIALS:,} (each is held in memory for the run): give fewer --attempts or cases, or split it "
            f"into {split}"
        )


def new_trials(cases: Iterable[Case], attempts: int) -> list[TrialPlan]:
    """Every attempt at every case."""
    return [TrialPlan(case, attempt, trial_id()) for case in cases for attempt in range(1, attempts + 1)]


def missing_trials(
    done: Iterable[Mapping[str, Any]], cases: Sequence[Case], attempts: int, retry_failed: str | None
) -> list[TrialPlan]:
    """The trials a resume runs: each (case, attempt) with no ``done`` row, and with ``retry_failed``
    (``infra`` or ``all``) the failed ones too, each new attempt superseding the failed one. Only a trial that
    failed itself (its own ``failure_type``) is run again: one whose answer a scorer could not judge
    (``scorer_error``) has an answer, which ``agenteval rescore`` judges again without calling the agent."""
    by_key = {(row["case_id"], row["attempt"]): row for row in done}
    plans = []
    for case in cases:
        for attempt in range(1, attempts + 1):
            row = by_key.get((case.id, attempt))
            if row is None:
                plans.append(TrialPlan(case, attempt, trial_id()))
            elif row["failure_type"] is not None and (
                retry_failed == "all" or retry_failed == "infra" and row["infrastructure"]
            ):
                plans.append(TrialPlan(case, attempt, trial_id(), supersedes=row["trial_id"]))
    return plans


def resumed_options(previous: ex.Experiment, given: dict[str, Any], store_root: Any) -> RunOptions:
    """The options a resume runs with: the ones the run started with, but for those that may change
    (``concurrency``); any other option given with a different value is refused. An older record's cache folder is
    read as a run records it now (relative to ``store_root`` when it lies in the store)."""
    stored = cache_recorded_now(previous.options, store_root)
    changed = changed_on_resume(stored, given)
    if changed:
        raise RunRefused(
            f"cannot resume {previous.experiment_id} with other options than it ran with: "
            f"{'; '.join(changed)}. Leave them out to resume as it ran, or start a new run."
        )
    kept = {k: v for k, v in stored.items() if k in RunOptions.__dataclass_fields__}
    if "agent_options" in given:  # the same as recorded: the values given hold what the record masked
        kept["agent_options"] = given["agent_options"]
    elif masked := masked_agent_options(previous.options):
        raise RunRefused(
            f"cannot resume {previous.experiment_id}: its agent options {', '.join(masked)} hold secrets, which "
            "the run did not store; give all its agent options again (--agent-option NAME=VALUE)"
        )
    if urls := masked_urls(previous.options, given):
        raise RunRefused(
            f"cannot resume {previous.experiment_id}: the query of its {', '.join(urls)} held a secret, which the run "
            f"did not store; give {' and '.join(urls)} again, as the run was started with"
        )
    if urls := queries_maybe_lost(previous.options, given):
        raise RunRefused(
            f"cannot resume {previous.experiment_id}: it was recorded before base URLs kept their query string, so "
            f"its {', '.join(urls)} may have lost one (such as ?api-version=), and its resumed trials could call "
            "another endpoint than its first ones; give that option again, query and all, as the run was started with"
        )
    return RunOptions(**{**kept, **{k: v for k, v in given.items() if k in CHANGEABLE_ON_RESUME}})


def check_same_simulator(previous: ex.Experiment, given: str | None) -> None:
    """A resume plays the cases' simulated users with the Python simulator the run recorded (``given`` is the
    :func:`simulator_name` of the one given now), or is refused: the resumed trials' users would be played otherwise
    than the first ones'. A run recorded before simulators were (its options lack the key) is not checked."""
    if "user_simulator" not in previous.options:
        return
    recorded = previous.options["user_simulator"]
    if same_simulator(recorded, given):
        return
    eid = previous.experiment_id
    if recorded is None:
        raise RunRefused(
            f"cannot resume {eid} with a user simulator ({given}): the run had none (its simulated users, if any, "
            "were played by --simulate-users, or not at all). Leave user_simulator out to resume as it ran"
        )
    alike = given is not None and given.partition(CODE_MARK)[0] == recorded.partition(CODE_MARK)[0]
    other = " (of the same name, but other code: another lambda or function defined there, or its code changed)"
    raise RunRefused(
        f"cannot resume {eid}: its simulated users were played by the user simulator {recorded}, and "
        f"{given or 'none'}{other if alike else ''} is given now (user_simulator). Give "
        "evaluate(user_simulator=...) the same simulator again to resume as it ran, or start a new run"
    )


def resumed_scorers(previous: ex.Experiment, given: Sequence[Scorer | ScorerSpec]) -> Sequence[Scorer | ScorerSpec]:
    """The scorers a resume judges its trials with: the run's own (recorded by ``scorer_specs``), or the same ones
    given again (Scorer objects are then used as given). Others would judge the resumed trials but not the first
    ones, and the pass rate would mix two definitions of passing (a SQL scorer whose SQL changed is another)."""
    recorded = list(previous.options.get("scorers") or [])
    if given and not same_specs(scorer_specs(given), recorded):
        named = ", ".join(map(spec_label, scorer_specs(given)))
        raise RunRefused(
            f"cannot resume {previous.experiment_id} with other scorers than it ran with: "
            f"{named} given, {', '.join(map(spec_label, recorded)) or 'the built-ins alone'} in the run; "
            "they would judge only the resumed trials. Leave --scorer out to resume with the run's, then judge "
            f"every trial with another by agenteval rescore {previous.experiment_id} --scorer NAME"
        )
    return given or recorded


def check_judged_alike(previous: ex.Experiment, scorers: Sequence[Scorer], judged_by: Mapping[str, list[str]]) -> None:
    """A resume judges its trials with ``scorers``, as the run's trials were judged (``judged_by``: each scorer's
    versions in their current scores), or its pass rate would mix two definitions of passing: a scorer's logic
    changed since (another version), or a rescore judged the trials with a scorer the run does not record."""
    now = {s.name: s.version for s in scorers}
    changed = [
        f"{name} version {', '.join(versions)} ({now[name]} now)"
        for name, versions in judged_by.items()
        if name in now and versions != [now[name]]
    ]
    eid = previous.experiment_id
    if changed:
        raise RunRefused(
            f"cannot resume {eid}: its trials were judged by other versions of its scorers than this resume would "
            f"judge its trials with: {'; '.join(changed)}. Judge them all as the scorers are now with agenteval "
            f"rescore {eid} (with the run's --scorer and --judge), then resume it"
        )
    if missing := [name for name in judged_by if name not in now]:
        raise RunRefused(
            f"cannot resume {eid}: its trials were judged (by a rescore) with {', '.join(missing)}, which the run "
            "does not record and this resume would not judge its trials with; start a new run instead"
        )


def check_same_cases(previous: ex.Experiment, chosen: Sequence[Case], recorded: set[str]) -> None:
    """A resume runs the cases the run chose (``recorded``: the ids of its cases snapshot, or of its shard's), or
    its trials would cover cases the run left out (one with a simulated user, skipped without a simulator then and
    given one now) or never finish the ones it chose."""
    now = {case.id for case in chosen}
    if not recorded or now == recorded:  # a run that saved no snapshot: nothing to compare with
        return
    differences = []
    if added := sorted(now - recorded):
        differences.append(f"{len(added)} case(s) it left out ({listed(added)})")
    if dropped := sorted(recorded - now):
        differences.append(f"not {len(dropped)} case(s) it chose ({listed(dropped)})")
    raise RunRefused(
        f"cannot resume {previous.experiment_id}: it would run other cases than the run chose: "
        f"{' and '.join(differences)}; was a user simulator given to one and not the other? Resume it as it ran, "
        "or start a new run instead."
    )


def listed(case_ids: Sequence[str], shown: int = 5) -> str:
    """Case ids for a message: the first ``shown`` of them, and how many more."""
    more = f" and {len(case_ids) - shown} more" if len(case_ids) > shown else ""
    return ", ".join(case_ids[:shown]) + more


def check_prices(previous: ex.Experiment, prices_file: str | Path | None) -> None:
    """A ``--prices`` file given to a resume must price the run's models as the run recorded: its trials, the
    resumed ones included, are priced by its record, so other prices would be ignored without a word."""
    if prices_file is None:
        return
    if changed := repriced(previous.prices or {}, prices_file):
        raise RunRefused(
            f"cannot resume {previous.experiment_id} with --prices {prices_file}: it prices {listed(changed)} "
            "otherwise than the run recorded, and every trial of a run is priced as it recorded; leave --prices "
            "out, or start a new run with these prices"
        )


def check_resumable(
    previous: ex.Experiment, agent: LoadedAgent, dataset: Dataset, corpus_hash: str | None = None
) -> None:
    """A resume must run the same agent over the same dataset (and corpus, ``corpus_hash`` its content's hash
    now), or its trials would mix two."""
    if not agent.is_version(previous.version, previous.agent):
        raise RunRefused(
            f"cannot resume {previous.experiment_id}: the agent changed (version {previous.version} -> "
            f"{agent.version}); its trials would mix two agents. Start a new run instead."
        )
    if previous.dataset_hash != dataset.hash:
        raise RunRefused(
            f"cannot resume {previous.experiment_id}: the dataset {dataset.name} changed since it started "
            "(its content hash differs). Start a new run instead."
        )
    check_same_corpus(previous, corpus_hash)


def check_same_corpus(previous: ex.Experiment, corpus_hash: str | None) -> None:
    """A resume must search the corpus its run recorded (``corpus_hash``: its content's hash now)."""
    recorded = previous.options.get("corpus_hash")
    if recorded and recorded != corpus_hash:
        raise RunRefused(
            f"cannot resume {previous.experiment_id}: the corpus {previous.options.get('corpus')} changed since it "
            "started (its content hash differs); its search tool would answer the resumed trials from other "
            "documents. Start a new run instead."
        )


def dataset_ref(spec: str | Path | Dataset, dataset: Dataset) -> str:
    """How a resume finds the dataset again: a built-in's name, or a file's absolute path."""
    if isinstance(spec, Dataset):
        return spec.path if Path(spec.path).is_file() else spec.name
    text = str(spec)
    return text if text in builtin_names() else str(Path(text).resolve())


_TRIAL_SEQUENCE = itertools.count(secrets.randbits(32))


def trial_id() -> str:
    """Sortable by when the trial was planned, unique across machines: the time, then a sequence
    that starts at random in each process (a uuid4 each cost a sixth of planning 100,000 trials).
    Spans files are in time order too, so a range of trial ids maps onto few row groups, and
    rescoring a batch skips the rest by statistics."""
    return f"{time.time_ns():016x}{next(_TRIAL_SEQUENCE) & 0xFFFFFFFF:08x}"
