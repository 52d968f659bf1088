"""agenteval beside Pydantic Evals and Inspect AI: the same trivial cases, the same trivial agent, in one run.

Every side runs the same JSONL file of arithmetic cases (``--cases``, 2,000 by default, one attempt each: the
generated ``arithmetic`` questions without their expected tools, so each side checks the answer only) with an
agent that answers "42" at once (benchmarks/trivial_agents.py; ``--agent sync`` gives agenteval and Pydantic
Evals the plain-function twin; Inspect's solvers are coroutines either way), at a concurrency of 8.

Each measurement is a fresh subprocess that imports its tool, runs a 20-case warm-up evaluation (so first-use
imports and set-up are not counted) and then times one evaluation call over the whole file, loading the file
included. The sides run in rounds, the order rotated from round to round; the figures are medians over the
rounds with their range: trials per second of the timed call, its CPU time per trial (every thread of the
child; less sensitive than wall time to other work on the machine), the child's peak memory (``ru_maxrss``; how much
of it is shared libraries' pages, which the kernel shares between processes, is printed beneath),
and the seconds before the timed call (imports and the warm-up). The ratios against agenteval are paired within each
round: time per trial and peak memory, the side's over agenteval's (2.0x takes twice as long, or twice the
memory).

What each side does and does not do:

- agenteval: ``evaluate()`` into a store folder: a root span per trial through the OpenTelemetry SDK, encoded
  to Arrow, scored (``answer_match``) by its feature query in DuckDB, trials, spans, scores, cases and the
  experiment written to Parquet, the files compacted at the end. No OTLP export.
- Pydantic Evals: ``Dataset.evaluate`` (``evaluate_sync`` for the sync agent) with the ``EqualsExpected``
  evaluator; its results stay in the ``EvaluationReport`` it returns, as usual; nothing is written to disk.
  ``pydantic-evals``: the ``logfire`` package is hidden from the child, so Pydantic Evals' span calls go to
  ``logfire-api``'s no-op stand-in, as with pydantic-evals installed alone. ``pydantic-evals+otel``:
  ``logfire.configure(send_to_logfire=False, console=False)`` puts a real OpenTelemetry SDK TracerProvider
  behind them, with a BatchSpanProcessor feeding an exporter that counts the spans and drops them: the spans
  are recorded but, unlike agenteval's, never encoded or stored.
- Inspect AI: ``eval()`` of a Task over ``json_dataset`` with the ``exact()`` scorer and the offline
  ``mockllm/model``, no sandbox, ``display="none"``, writing its eval log (the default ``.eval`` file with every
  sample's messages and events, and its realtime sample buffer) to a temporary folder, as it normally does.
  ``inspect``: a solver sets the output without calling the model, as agenteval's trivial agent does.
  ``inspect+mockllm``: ``generate()``, so each sample goes through Inspect's model layer to the mock model,
  which gives the trivial agent's answer (with its token usage set, so that the mock does not count tokens
  with tiktoken, whose first use downloads an encoding). Inspect emits no OpenTelemetry spans.

Nothing leaves the machine. A peer that is not installed is left out with the command that installs it
(``pip install -e '.[bench]'``); the rest still run.

    python benchmarks/bench_peers.py [--cases 2000] [--rounds 7] [--agent async|sync] [--sides inspect ...]
"""

from __future__ import annotations

import argparse
import importlib.metadata
import importlib.util
import json
import os
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

CHILD_STARTED = time.perf_counter()
HERE = Path(__file__).resolve().parent
CONCURRENCY = 8
WARM_UP_CASES = 20
INSTALL_HINT = "pip install -e '.[bench]'"

Run = Callable[[Path, Path], tuple[int, dict[str, float]]]
"""One evaluation of a dataset file, with a work folder: (trials judged, facts such as spans recorded)."""


@dataclass(frozen=True)
class Side:
    name: str
    modules: tuple[str, ...]
    """Import names the side needs; a missing one leaves the side out."""
    distributions: tuple[str, ...]
    """Distributions whose versions the report names."""


SIDES = (
    Side("agenteval", ("agenteval",), ("agenteval", "opentelemetry-sdk", "duckdb", "pyarrow")),
    Side("pydantic-evals", ("pydantic_evals",), ("pydantic-evals", "logfire-api")),
    Side("pydantic-evals+otel", ("pydantic_evals", "logfire"), ("pydantic-evals", "logfire", "opentelemetry-sdk")),
    Side("inspect", ("inspect_ai",), ("inspect-ai",)),
    Side("inspect+mockllm", ("inspect_ai",), ("inspect-ai",)),
)
BASELINE = SIDES[0].name


def write_dataset(path: Path, count: int) -> None:
    """The generated arithmetic questions, one JSON object a line, with only what every side reads."""
    from agenteval.dataset import load_dataset

    with path.open("w") as out:
        for case in load_dataset("arithmetic", cases=count).cases:
            record = {"id": case.id, "input": case.input, "expected_output": case.expected_output}
            out.write(json.dumps(record | {"category": case.category}) + "\n")


def trivial_agent(kind: str) -> Callable[[str], object]:
    sys.path.insert(0, str(HERE))
    import trivial_agents

    return trivial_agents.answer if kind == "sync" else trivial_agents.answer_async


def folder_mb(folder: Path) -> float:
    return sum(p.stat().st_size for p in folder.rglob("*") if p.is_file()) / 1e6


# Each prepare_* imports its tool and sets it up, in the child; the Run it returns is what is timed.


def prepare_agenteval(agent: str) -> Run:
    import duckdb

    from agenteval import evaluate

    task = trivial_agent(agent)

    def run(dataset: Path, work: Path) -> tuple[int, dict[str, float]]:
        store = work / "store"
        experiment = evaluate(task, dataset, attempts=1, concurrency=CONCURRENCY, store=store, progress="none")
        ((spans,),) = duckdb.sql(f"SELECT count(*) FROM read_parquet('{store}/spans/**/*.parquet')").fetchall()
        return experiment.summary.trials, {"spans": spans, "stored_mb": folder_mb(store)}

    return run


def _pydantic_run(agent: str) -> Run:
    import asyncio

    from pydantic_evals import Case, Dataset
    from pydantic_evals.evaluators import EqualsExpected

    task = trivial_agent(agent)

    def run(dataset: Path, work: Path) -> tuple[int, dict[str, float]]:
        records = [json.loads(line) for line in dataset.read_text().splitlines()]
        cases = [Case(name=r["id"], inputs=r["input"], expected_output=r["expected_output"]) for r in records]
        evaluation = Dataset(name="arithmetic", cases=cases, evaluators=[EqualsExpected()])
        if agent == "sync":
            report = evaluation.evaluate_sync(task, max_concurrency=CONCURRENCY, progress=False)
        else:
            report = asyncio.run(evaluation.evaluate(task, max_concurrency=CONCURRENCY, progress=False))
        assert not report.failures, report.failures[:1]
        return len(report.cases), {}

    return run


def prepare_pydantic_evals(agent: str) -> Run:
    sys.modules["logfire"] = None  # type: ignore[assignment]  # as if only logfire-api were installed
    return _pydantic_run(agent)


def prepare_pydantic_evals_otel(agent: str) -> Run:
    import logfire
    from opentelemetry.sdk.trace.export import BatchSpanProcessor, SpanExporter, SpanExportResult

    class CountingExporter(SpanExporter):
        spans = 0

        def export(self, spans):
            CountingExporter.spans += len(spans)
            return SpanExportResult.SUCCESS

    logfire.configure(
        send_to_logfire=False, console=False, additional_span_processors=[BatchSpanProcessor(CountingExporter())]
    )
    evaluate = _pydantic_run(agent)

    def run(dataset: Path, work: Path) -> tuple[int, dict[str, float]]:
        logfire.force_flush()
        before = CountingExporter.spans
        trials, facts = evaluate(dataset, work)
        logfire.force_flush()
        return trials, facts | {"spans": CountingExporter.spans - before}

    return run


def _inspect_run(call_model: bool) -> Run:
    from inspect_ai import Task, eval
    from inspect_ai.dataset import FieldSpec, json_dataset
    from inspect_ai.model import ChatMessage, ModelOutput, ModelUsage, get_model
    from inspect_ai.scorer import exact
    from inspect_ai.solver import Generate, TaskState, generate, solver

    answer = trivial_agent("sync")

    def mock_reply(messages: list[ChatMessage], *_: object) -> ModelOutput:
        output = ModelOutput.from_content("mockllm/model", str(answer(messages[-1].text)))
        output.usage = ModelUsage(input_tokens=10, output_tokens=1, total_tokens=11)
        return output

    @solver
    def trivial_solver():
        async def solve(state: TaskState, generate: Generate) -> TaskState:
            state.output = ModelOutput.from_content("trivial", str(answer(state.input_text)))
            return state

        return solve

    model = get_model("mockllm/model", custom_outputs=mock_reply)

    def run(dataset: Path, work: Path) -> tuple[int, dict[str, float]]:
        samples = json_dataset(str(dataset), FieldSpec(input="input", target="expected_output", id="id"))
        task = Task(dataset=samples, solver=generate() if call_model else trivial_solver(), scorer=exact())
        logs = work / "logs"
        (log,) = eval(task, model=model, log_dir=str(logs), display="none", max_samples=CONCURRENCY)
        assert log.status == "success", log.error
        return len(log.samples or []), {"stored_mb": folder_mb(logs)}

    return run


def prepare_inspect(agent: str) -> Run:
    return _inspect_run(call_model=False)


def prepare_inspect_mockllm(agent: str) -> Run:
    return _inspect_run(call_model=True)


PREPARE: dict[str, Callable[[str], Run]] = {
    "agenteval": prepare_agenteval,
    "pydantic-evals": prepare_pydantic_evals,
    "pydantic-evals+otel": prepare_pydantic_evals_otel,
    "inspect": prepare_inspect,
    "inspect+mockllm": prepare_inspect_mockllm,
}


def child(side: str, dataset: Path, agent: str) -> None:
    """One measurement, in this fresh process: prints one JSON line."""
    run = PREPARE[side](agent)
    with tempfile.TemporaryDirectory() as folder:
        work = Path(folder)
        warm_up = work / "warm_up.jsonl"
        warm_up.write_text("".join(dataset.read_text().splitlines(keepends=True)[:WARM_UP_CASES]))
        (work / "warm_up").mkdir()
        run(warm_up, work / "warm_up")
        (work / "timed").mkdir()
        started, cpu_started = time.perf_counter(), time.process_time()
        trials, facts = run(dataset, work / "timed")
        seconds, cpu_seconds = time.perf_counter() - started, time.process_time() - cpu_started
    peak_kb = max(resource.getrusage(who).ru_maxrss for who in (resource.RUSAGE_SELF, resource.RUSAGE_CHILDREN))
    measured = {
        "trials": trials,
        "seconds": seconds,
        "cpu_seconds": cpu_seconds,
        "start_seconds": started - CHILD_STARTED,
    }
    print(json.dumps(measured | {"peak_mb": peak_kb / 1024, "library_mb": library_pages_mb()} | facts))


def library_pages_mb() -> float:
    """This process's file-backed resident pages now: the shared libraries' code and data it has touched, which
    the kernel shares between processes; they only grow during a run, so this is about their share of the peak."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("RssFile:"):
            return int(line.split()[1]) / 1024
    return float("nan")


def measure(side: str, dataset: Path, agent: str) -> dict:
    done = subprocess.run(
        [sys.executable, str(Path(__file__).resolve()), "--child", side, "--dataset", str(dataset), "--agent", agent],
        capture_output=True,
        text=True,
        cwd=tempfile.gettempdir(),
        env={k: v for k, v in os.environ.items() if not k.startswith(("AGENTEVAL_", "OTEL_", "INSPECT_", "LOGFIRE_"))},
    )
    if done.returncode != 0:
        raise SystemExit(f"{side} failed (exit {done.returncode}):\n{done.stderr[-3000:]}")
    return json.loads(done.stdout.strip().splitlines()[-1])


def missing_modules(side: Side) -> list[str]:
    return [m for m in side.modules if importlib.util.find_spec(m) is None]


def version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def spread(values: list[float], fmt: str, unit: str = "") -> str:
    return f"{statistics.median(values):{fmt}}{unit} ({min(values):{fmt}}-{max(values):{fmt}})"


def report(runs: dict[str, list[dict]], cases: int) -> None:
    base = runs[BASELINE]
    print(
        f"\n{'side':20} {'trials/s':>21} {'CPU ms/trial':>17} {'peak RSS MB':>15} {'start s':>15}"
        f" {'time/trial vs agenteval':>24} {'memory vs agenteval':>22}"
    )
    for name, side_runs in runs.items():
        assert all(r["trials"] == cases for r in side_runs), (name, [r["trials"] for r in side_runs])
        speed = [cases / r["seconds"] for r in side_runs]
        cpu = [r["cpu_seconds"] / cases * 1000 for r in side_runs]
        peak = [r["peak_mb"] for r in side_runs]
        start = [r["start_seconds"] for r in side_runs]
        time_ratio = [r["seconds"] / b["seconds"] for r, b in zip(side_runs, base, strict=True)]
        memory_ratio = [r["peak_mb"] / b["peak_mb"] for r, b in zip(side_runs, base, strict=True)]
        ratios = ("", "") if name == BASELINE else (spread(time_ratio, ".2f", "x"), spread(memory_ratio, ".2f", "x"))
        print(
            f"{name:20} {spread(speed, ',.0f'):>21} {spread(cpu, '.2f'):>17} {spread(peak, '.0f'):>15}"
            f" {spread(start, '.1f'):>15} {ratios[0]:>24} {ratios[1]:>22}"
        )
        facts = [f"shared libraries' pages {spread([r['library_mb'] for r in side_runs], '.0f')} MB of the peak"]
        facts += [f"{side_runs[0]['spans'] / cases:.1f} spans a trial"] if "spans" in side_runs[0] else []
        facts += [f"{side_runs[0]['stored_mb']:.1f} MB written"] if "stored_mb" in side_runs[0] else []
        print(f"{'':20} {'; '.join(facts)}")
    print(
        "medians over the rounds (min-max); CPU time counts every thread of the child; ratios paired within each"
        " round, the side's over agenteval's"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--cases", type=int, default=2_000)
    parser.add_argument("--rounds", type=int, default=7)
    parser.add_argument("--agent", choices=["async", "sync"], default="async")
    parser.add_argument("--sides", nargs="+", choices=[s.name for s in SIDES], default=[s.name for s in SIDES])
    parser.add_argument("--child", choices=list(PREPARE), help=argparse.SUPPRESS)
    parser.add_argument("--dataset", type=Path, help=argparse.SUPPRESS)
    options = parser.parse_args()
    if options.child:
        child(options.child, options.dataset, options.agent)
        return

    present = []
    for side in (s for s in SIDES if s.name == BASELINE or s.name in options.sides):
        if missing := missing_modules(side):
            print(f"{side.name}: not installed ({', '.join(missing)} missing); install the peers with {INSTALL_HINT}")
        else:
            present.append(side)
    distributions = dict.fromkeys(d for s in present for d in s.distributions)
    print("versions: " + ", ".join(f"{d} {version(d)}" for d in distributions) + f"; Python {sys.version.split()[0]}")
    print(f"{options.cases:,} cases, 1 attempt each, {options.agent} agent, concurrency {CONCURRENCY}")

    runs: dict[str, list[dict]] = {s.name: [] for s in present}
    with tempfile.TemporaryDirectory() as folder:
        dataset = Path(folder) / "cases.jsonl"
        write_dataset(dataset, options.cases)
        for round_ in range(options.rounds):
            order = present[round_ % len(present) :] + present[: round_ % len(present)]
            for side in order:
                runs[side.name].append(measure(side.name, dataset, options.agent))
            print(f"round {round_ + 1}: " + ", ".join(s.name for s in order), flush=True)
    report(runs, options.cases)


if __name__ == "__main__":
    main()
