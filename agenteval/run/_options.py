"""What a run is asked to do, and the defaults the Python API and the command line share (runs,
rescoring, the gate, power, audits): no heavy imports, so the command line reads them from here."""

from __future__ import annotations

import dataclasses
import math
import numbers
from collections.abc import Callable
from typing import Any

from ..dataset._limits import MAX_CORPUS_MB
from ..errors import UsageError

MIN_CASES_PER_CATEGORY = 5
"""Below this a category's pass rate is too uncertain to act on (one case moves it 20 points)."""
NEAR_DUPLICATE_SIMILARITY = 0.8
"""Jaccard similarity of two inputs' word sets from which they count as near-duplicates."""

DEFAULT_ATTEMPTS = 3
DEFAULT_CONCURRENCY = 4
DEFAULT_TIMEOUT = 120.0
DEFAULT_RESCORE_BATCH = 50_000
"""Trials a rescore judges at a time: memory is bounded by this, not by the experiment."""
DEFAULT_ALPHA = 0.05
"""Significance level of the one-sided paired tests (gate, power)."""
MAX_ALPHA = 0.5
"""The level must be below this: a one-sided test at 0.5 or more rejects "no drop" for a candidate no worse than its
baseline, and its 1 - 2 alpha interval has a level of 0 or less."""
DEFAULT_TARGET_POWER = 0.8
"""The chance of catching a drop that power analysis plans for."""
DEFAULT_PASS_RATE = 0.85
"""The baseline pass rate power analysis assumes when no experiment is given."""
DEFAULT_MAX_DROP = 0.02
"""Drops in pass rate the gate tolerates."""
DEFAULT_MAX_INFRA = 0.10
"""Share of infrastructure failures beyond which the gate refuses to judge."""
DEFAULT_MAX_STEPS = 8
"""Model calls the reference agent may make for one user turn (tool rounds included) before it gives up."""
DEFAULT_JUDGE_CONCURRENCY = 8
"""Judge calls in flight at once while a batch of trials is graded."""
DEFAULT_REQUEST_TIMEOUT = 60.0
"""Seconds one model request may take before it is given up on (a trial's own timeout still bounds it all); for a
streamed answer, the longest silence before its first event and between two (keep-alives are silence)."""
DEFAULT_MAX_RETRIES = 5
"""How many times a model request that failed transiently (a 429, a 5xx, a dropped connection, a timeout) is sent
again before the failure stands."""


def check_request_limits(request_timeout: float, max_retries: int) -> None:
    """Refuse a model request timeout that is not a positive number of seconds, or a negative number of retries."""
    if not (isinstance(request_timeout, numbers.Real) and math.isfinite(request_timeout) and request_timeout > 0):
        raise UsageError(f"--request-timeout must be a positive number of seconds, not {request_timeout!r}")
    if isinstance(max_retries, bool) or not isinstance(max_retries, numbers.Integral) or max_retries < 0:
        raise UsageError(f"--max-retries must be a whole number, 0 or more, not {max_retries!r}")


WHOLE_NUMBER_OPTIONS = (
    "attempts",
    "concurrency",
    "sample",
    "sample_seed",
    "cases",
    "max_steps",
    "max_tokens",
    "simulator_max_tokens",
    "max_retries",
)
NUMBER_OPTIONS = ("timeout", "max_corpus_mb", "temperature", "request_timeout")


@dataclasses.dataclass
class RunOptions:
    """What a run was asked to do; stored with the experiment so ``--resume`` can repeat it."""

    attempts: int = DEFAULT_ATTEMPTS
    concurrency: int = DEFAULT_CONCURRENCY
    timeout: float = DEFAULT_TIMEOUT
    sample: int | None = None
    sample_seed: int = 0
    cases: int | None = None
    agent_options: dict[str, Any] = dataclasses.field(default_factory=dict)
    dataset: str = ""
    scorers: list[str | dict[str, Any]] = dataclasses.field(default_factory=list)
    """Scorers added to the built-ins (names, MODULE:ATTR, or a SQL scorer's definition: see
    ``agenteval.scorers._loading.scorer_spec``), so rescore and a resume can load them again."""
    model: str | None = None
    """``PROVIDER/MODEL`` of the built-in reference agent (``--model``); None for an agent of one's own."""
    base_url: str | None = None
    """Where the model is served, as recorded: no user or password, secrets in its query masked (see
    ``agenteval.models``)."""
    temperature: float | None = None
    max_tokens: int | None = None
    max_steps: int = DEFAULT_MAX_STEPS
    corpus: str | None = None
    """A corpus file for the ``search_documents`` tool, in place of the built-in rag corpus."""
    max_corpus_mb: float = MAX_CORPUS_MB
    """The most the corpus file may hold, in MB (``--max-corpus-mb``); it may change on resume."""
    corpus_hash: str | None = None
    """The corpus file's content hash when the run started (None: no corpus, or a run recorded before it was kept)."""
    judge: str | None = None
    """``PROVIDER/MODEL`` of the LLM judge, which then decides whether an answer is right."""
    judge_base_url: str | None = None
    simulate_users: str | None = None
    """``PROVIDER/MODEL`` playing the cases' simulated users."""
    simulator_base_url: str | None = None
    simulator_max_tokens: int | None = None
    """The most tokens one simulated user's message may have (None: the provider's default); a message cut there
    is the trial's ``simulator_error``."""
    skip_simulated: bool = False
    """Cases with a simulated user are left out (reported as not run) when no simulator is given."""
    cache: str | None = None
    """The response cache's folder (``--cache``), for development: relative to the store when it lies in the store,
    absolute otherwise (see ``agenteval.models._cache.recorded_cache``)."""
    user_simulator: str | None = None
    """The Python user simulator given to ``evaluate(user_simulator=...)``, by its qualified name and a hash of its
    code (:func:`simulator_name`), never its code itself; None when none was given (``simulate_users`` may name a
    model)."""
    shard: str | None = None
    """``K/N``: this run is the K-th of N disjoint slices of the experiment (see ``agenteval.run._shards``)."""
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT
    """Seconds one request of the run's models (``--model``, ``--judge``, ``--simulate-users``) may take."""
    max_retries: int = DEFAULT_MAX_RETRIES
    """How many times the run's models send a request again after a transient failure."""

    def __post_init__(self) -> None:
        self._numbers_as_numbers()
        if self.attempts < 1:
            raise UsageError("--attempts must be at least 1")
        if self.concurrency < 1:
            raise UsageError("--concurrency must be at least 1")
        # None is every case; 0 is not (it ran the whole dataset, as if no sample had been asked for).
        if self.sample is not None and self.sample < 1:
            raise UsageError(f"--sample must be at least 1, not {self.sample}; leave it out to run every case")
        if not (math.isfinite(self.timeout) and self.timeout > 0):  # nan passes a plain "<= 0" check
            raise UsageError(f"--timeout must be a positive number of seconds, not {self.timeout}")
        check_request_limits(self.request_timeout, self.max_retries)
        if not self.max_corpus_mb > 0:  # nan passes a plain "<= 0" check
            raise UsageError(f"--max-corpus-mb must be a positive number of MB, not {self.max_corpus_mb}")
        if self.max_steps < 1:
            raise UsageError("--max-steps must be at least 1")
        if self.temperature is not None and not (math.isfinite(self.temperature) and 0 <= self.temperature <= 2):
            raise UsageError(f"--temperature must be between 0 and 2, not {self.temperature}")
        for option, limit in (("--max-tokens", self.max_tokens), ("--simulator-max-tokens", self.simulator_max_tokens)):
            if limit is not None and limit < 1:
                raise UsageError(f"{option} must be at least 1, not {limit}")

    def _numbers_as_numbers(self) -> None:
        """Each number given from Python is one (a ``str``, or ``True`` for 1, was taken as it came: a TypeError
        deep in the run, or one attempt) and is stored as a plain ``int`` or ``float`` (numpy's would be recorded as
        text)."""
        kinds: tuple[tuple[tuple[str, ...], type, Callable[[Any], Any], str], ...] = (
            (WHOLE_NUMBER_OPTIONS, numbers.Integral, int, "a whole number"),
            (NUMBER_OPTIONS, numbers.Real, float, "a number"),
        )
        for names, kind, plain, said in kinds:
            for name in names:
                value = getattr(self, name)
                if value is not None:
                    if isinstance(value, bool) or not isinstance(value, kind):
                        raise UsageError(f"{flag(name)} ({name}=) must be {said}, not {value!r}")
                    setattr(self, name, plain(value))


RECORD_VERSION_KEY = "record_version"
"""The key of the recorded options that says in which form they were recorded (see :data:`RECORD_VERSION`)."""
RECORD_VERSION = 3
"""The form :func:`recorded_options` records: 2 keeps a base URL's query (secrets masked); 3 records a cache folder
in the store relative to the store (see :func:`cache_recorded_now`). A record without the key is of version 1,
written before (2026-12): its base URLs lost their query, and an URL without one there may have had one."""
QUERIES_KEPT_SINCE = 2
"""The record version from which base URLs keep their query (:func:`keeps_queries`)."""
CACHE_IN_STORE_SINCE = 3
"""The record version from which a cache folder in the store is recorded relative to it."""


def recorded_options(options: RunOptions) -> dict[str, Any]:
    """``options`` as the experiment stores them: the agent's options with their secrets masked (an
    ``--agent-option api_key=...`` is used, never stored), so a resume is given those again; and the form they are
    recorded in (:data:`RECORD_VERSION`)."""
    # Not asdict's copy of the agent's options: it turns a dataclass among them into a dict, which the same object
    # given to a resume never equals.
    recorded = dataclasses.asdict(dataclasses.replace(options, agent_options={}))
    recorded["agent_options"] = mask_agent_options(options.agent_options)
    recorded[RECORD_VERSION_KEY] = RECORD_VERSION
    return recorded


def mask_agent_options(values: Any) -> Any:
    """An agent's options as recorded: a value JSON has no form of by its text, or a function by its name and the
    hash of its code (:func:`_as_recorded`), and secrets masked by
    :func:`~agenteval_instrumentation.masking.is_secret_option` (a bare ``key`` is a secret there) and in their text,
    at any depth."""
    from agenteval_instrumentation.masking import is_secret_option, mask_setting  # with logging: not at start-up

    return mask_setting("agent_options", _as_recorded(values), is_secret_option)


def _as_recorded(value: Any) -> Any:
    """``value`` with each value in it that JSON has no form of as :func:`~agenteval.agents._loading.option_text`
    gives it, as the agent's version hashes it: a function by its ``callable_name`` (its text would hold its memory
    address, another in every process, so a run given one could never be resumed), anything else (a dataclass, a
    callable object that says how it is set) by its text."""
    if isinstance(value, dict):
        return {key: _as_recorded(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [_as_recorded(item) for item in value]
    if value is None or isinstance(value, str | int | float):
        return value
    from ..agents._loading import option_text  # inspect and hashlib: not for the command line's start

    return option_text(value)


def _compared(options: dict[str, Any]) -> dict[str, Any]:
    """Options as a resume compares them: secrets masked by name and in their text, the agent's as recorded."""
    from agenteval_instrumentation.masking import mask_setting

    masked = mask_setting("options", options)
    if "agent_options" in options:
        masked["agent_options"] = mask_agent_options(options["agent_options"])
    return masked


def keeps_queries(stored: dict[str, Any]) -> bool:
    """Whether a run's recorded options keep their base URLs' queries: a base URL recorded without one had none."""
    return record_version(stored) >= QUERIES_KEPT_SINCE


def record_version(stored: dict[str, Any]) -> int:
    """The form a run's options were recorded in (:data:`RECORD_VERSION`)."""
    return int(stored.get(RECORD_VERSION_KEY) or 1)


def cache_recorded_now(stored: dict[str, Any], store_root: Any) -> dict[str, Any]:
    """A run's recorded options with its cache folder as a run records it now, so a resume compares and uses it
    alike: a record before :data:`CACHE_IN_STORE_SINCE` holds the folder as given (the store's own absolute, a
    relative ``--cache`` as typed, taken under today's directory as the run took it under its own)."""
    if not stored.get("cache") or record_version(stored) >= CACHE_IN_STORE_SINCE:
        return stored
    from pathlib import Path

    from ..models._cache import recorded_cache  # storefs: not for the command line's start

    return {**stored, "cache": recorded_cache(Path(stored["cache"]), store_root)}


def masked_agent_options(stored: dict[str, Any]) -> list[str]:
    """The names of the agent options a run stored masked: a resume cannot take them from the store."""
    from agenteval_instrumentation.masking import MASK

    return [name for name, value in (stored.get("agent_options") or {}).items() if MASK in str(value)]


def masked_urls(stored: dict[str, Any], given: dict[str, Any]) -> list[str]:
    """The options of the base URLs a run stored with a secret masked and a resume does not give again: called as
    stored, they would send the mask for the secret."""
    from ..models._names import holds_masked  # urllib.parse: not for the command line's start

    return [flag(name) for name in URL_OPTIONS if name not in given and holds_masked(stored.get(name))]


CHANGEABLE_ON_RESUME = frozenset({"concurrency", "max_corpus_mb", "request_timeout", "max_retries"})
"""Options a resume may set anew: how fast trials run, how long a model request may take and how often it is sent
again (a run whose slow local model timed out is resumed with a longer ``--request-timeout``), or how large a corpus
may be, not what they are. Not
``cache``: a cache hands a trial an answer recorded before (by an earlier run, perhaps of an older snapshot of the
model) where none would get a fresh one, and another folder other answers, so a run's trials would mix replayed and
fresh answers."""
URL_OPTIONS = ("base_url", "judge_base_url", "simulator_base_url")
"""The options that hold a base URL, recorded by ``agenteval.models._names.recordable_url``."""


def queries_maybe_lost(stored: dict[str, Any], given: dict[str, Any]) -> list[str]:
    """The base URLs (``name: URL`` as recorded) of a run recorded before queries were kept that a resume does not
    give again: each may have lost a query (Azure's ``?api-version=``), and called as recorded would go elsewhere."""
    if keeps_queries(stored):
        return []
    return [f"{flag(name)} {stored[name]}" for name in URL_OPTIONS if name not in given and stored.get(name)]


def changed_on_resume(stored: dict[str, Any], given: dict[str, Any]) -> list[str]:
    """The options ``given`` for a resume that differ from what the run stored, as ``name (given, stored)``."""
    # Compared as recorded, secrets masked on both sides: the values given are not shown, nor compared with a
    # stored one of a run recorded before agent options were masked. A URL given to a run recorded before queries
    # were kept is compared without its query, as that run recorded it; one recorded since kept its query, so a
    # query added to it is another endpoint.
    from ..models._names import as_stored  # urllib.parse: not for the command line's start

    old_record = not keeps_queries(stored)
    given, stored = _compared(given), _compared(stored)
    given = {
        name: as_stored(value, stored.get(name)) if old_record and name in URL_OPTIONS else value
        for name, value in given.items()
    }
    changed = []
    for name, value in given.items():
        if name in CHANGEABLE_ON_RESUME or name not in RunOptions.__dataclass_fields__ or value == stored.get(name):
            continue
        note = "" if old_record else _query_added(name, value, stored.get(name))
        changed.append(f"{name} ({value!r} given, {stored.get(name)!r} in the run{note})")
    return changed


def _query_added(name: str, given: Any, stored: Any) -> str:
    """What a refusal adds for a base URL given with a query the run's record (which keeps queries) has none of."""
    if name not in URL_OPTIONS or not isinstance(given, str) or given.partition("?")[0] != stored:
        return ""
    return f", which called it with no query: leave {flag(name)} out, or give it as the run recorded it"


def simulator_name(simulator: Any) -> str:
    """What a run records of a Python user simulator: ``MODULE:QUALNAME#HASH`` of the function, method or (for a
    callable object) class, ``HASH`` a hash of its code (:func:`~agenteval.agents._loading.code_digest`), so two
    lambdas of one function, which share the qualified name, are told apart while the same one in a fresh process
    is the same; or, when the object says it, what it plays with (its ``recorded_name``, such as
    ``ModelUserSimulator``'s model). Never code or a secret."""
    import functools

    named = simulator
    while isinstance(named, functools.partial):
        named = named.func
    own = getattr(named, "recorded_name", None)
    if isinstance(own, str):
        return own
    from ..agents._loading import callable_name  # inspect and hashlib: not for the command line's start

    return callable_name(simulator)


def same_simulator(recorded: str | None, given: str | None) -> bool:
    """Whether the simulator ``given`` (:func:`simulator_name`) is the one a run ``recorded``; a name recorded
    before simulators' code was hashed (no ``#HASH``) is compared by name alone."""
    from ..agents._loading import CODE_MARK

    if recorded is None or given is None or CODE_MARK in recorded:
        return given == recorded
    return given.partition(CODE_MARK)[0] == recorded


def flag(name: str) -> str:
    """An option's name as the command line spells it: ``base_url`` is ``--base-url``."""
    return f"--{name.replace('_', '-')}"
