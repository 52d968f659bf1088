"""The models a run uses, built from its options before anything runs: the reference agent's, the LLM judge's
and the simulated users'; one response cache for all of them; and their closing at the end of the run."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, Any

from agenteval_exporters.storefs import StoreRoot

from ..agents._loading import LoadedAgent, load_agent
from ..agents._reference import NAME as REFERENCE
from ..agents._reference import reference_agent
from ..dataset._cases import Dataset
from ..errors import UsageError
from ..scorers._base import Scorer
from ._options import RunOptions

if TYPE_CHECKING:
    from ..models._model import Model


@dataclasses.dataclass
class RunModels:
    agent: LoadedAgent | None = None
    judge: Scorer | None = None
    simulator: Any = None
    models: list[Any] = dataclasses.field(default_factory=list)
    cache: Any = None

    @classmethod
    def build(
        cls, options: RunOptions, dataset: Dataset, urls: dict[str, str | None], store_root: StoreRoot
    ) -> RunModels:
        """The run's models (a missing SDK or key is said here, before anything is written)."""
        if not (options.model or options.judge or options.simulate_users):
            return cls()
        from ..models._cache import ResponseCache, cache_of_run
        from ..models._model import named_model
        from ..models._names import as_stored
        from ..models._simulator import ModelUserSimulator
        from ..scorers._judge import llm_judge

        found = cls(cache=ResponseCache(cache_of_run(options.cache, store_root)) if options.cache else None)

        recorded = {"model": options.base_url, "judge": options.judge_base_url, "simulator": options.simulator_base_url}

        def model(name: str, option: str, role: str, **settings: Any) -> Model:
            """``role``'s model, called at its URL as given (else as recorded), its settings recording the URL as the
            run's options do: a resumed run's record may hold an older form of it."""
            url = urls.get(role) or recorded[role]
            made = named_model(
                name,
                option,
                base_url=url,
                cache=found.cache,
                request_timeout=options.request_timeout,
                max_retries=options.max_retries,
                **settings,
            )
            made.recorded_base_url = as_stored(made.recorded_base_url, recorded[role])
            found.models.append(made)
            return made

        if options.model:
            settings = {"temperature": options.temperature, "max_tokens": options.max_tokens}
            chosen = model(options.model, "--model", "model", **settings)
            found.agent = reference_agent(
                chosen,
                dataset,
                corpus=options.corpus,
                max_corpus_mb=options.max_corpus_mb,
                max_steps=options.max_steps,
                corpus_hash=options.corpus_hash,  # the driver's and every worker's read: the documents hashed
            )
        if options.judge:
            found.judge = llm_judge(model(options.judge, "--judge", "judge"))
        if options.simulate_users:
            max_tokens = options.simulator_max_tokens
            simulator = model(options.simulate_users, "--simulate-users", "simulator", max_tokens=max_tokens)
            found.simulator = ModelUserSimulator(simulator)
        return found

    async def close(self) -> None:
        """Close every model's client of this event loop."""
        for made in self.models:
            await made.aclose()


def own_agent(spec: str | Any, options: RunOptions) -> LoadedAgent:
    """The agent a run names when it is not the reference agent (which ``--model`` chooses)."""
    if spec == REFERENCE:
        raise UsageError("--agent reference needs --model PROVIDER/MODEL (e.g. --model openai/gpt-4o-mini)")
    if not spec:
        raise UsageError("an agent is required: --agent NAME|MODULE:ATTR|FILE.py:ATTR, or --model PROVIDER/MODEL")
    return load_agent(spec, options.agent_options)


def check_agent_and_model(spec: str | Any, options: RunOptions) -> None:
    if options.model and spec not in (None, "", REFERENCE):
        raise UsageError(
            f"--model {options.model} runs the built-in reference agent; your own agent ({spec}) chooses its "
            "model itself (pass it with --agent-option)"
        )
