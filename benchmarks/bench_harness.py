"""The whole harness: the arithmetic dataset, the mock agent at zero latency, end to end (spans, scoring,
Parquet, compaction), in trials per second and peak memory, each size in a fresh process.

Targets on the project's 2-core machine class: at least 2,000 trials/s, and memory flat as trials grow
(100,000 trials under 500 MB peak RSS). benchmarks/bench_peers.py runs Pydantic Evals and Inspect AI beside
agenteval on the same cases.

    python benchmarks/bench_harness.py [--sizes 1000 10000 100000] [--repeats 3] [--agent mock|sync|async]
    python benchmarks/bench_harness.py --twins [--sizes 10000] [--repeats 9]

``--agent sync`` and ``--agent async`` run a trivial agent (benchmarks/trivial_agents.py) written as a plain
function or as a coroutine instead of the (async) mock. ``--agent model`` runs the reference agent with the real
``openai`` SDK against the loopback OpenAI server of the tests (tests/model_servers.py) in a process of its own:
each trial is two chat-completions calls over HTTP (a calculator tool call, then the answer) and a tool span.
``--twins`` runs both in turns, each size in a fresh process per run, and prints the median of the per-round
ratios of their speeds: what a sync agent costs over its async twin (target: at most 1.3x).

``--ablate gc_freeze`` measures what freezing the run's long-lived objects buys instead (see benchmarks/ablate.py):
trials per second with the freeze on and off (``AGENTEVAL_ABLATE=gc_freeze``), for each size.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

HERE = Path(__file__).resolve().parent

AGENTS = {
    "mock": "mock",
    "model": "model",
    "sync": f"{HERE / 'trivial_agents.py'}:answer",
    "async": f"{HERE / 'trivial_agents.py'}:answer_async",
}

ONE_RUN = """
import json, os, resource, shutil, sys, tempfile, time
from agenteval import evaluate
trials, agent = int(sys.argv[1]), sys.argv[2]
store = tempfile.mkdtemp()
model = {"model": "openai/bench-model", "base_url": os.environ["BENCH_MODEL_URL"]} if agent == "model" else {}
started = time.perf_counter()
experiment = evaluate(
    "" if model else agent, "arithmetic", cases=trials, attempts=1, store=store, progress="none", concurrency=8, **model
)
elapsed = time.perf_counter() - started
summary = experiment.summary  # a dict on a baseline from before typed summaries
assert (summary["trials"] if isinstance(summary, dict) else summary.trials) == trials, summary
peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
shutil.rmtree(store)
print(json.dumps({"trials": trials, "seconds": elapsed, "peak_mb": peak_mb}))
"""


SERVER = """
import sys
sys.path.insert(0, sys.argv[2])
import model_servers as ms
from agenteval.dataset import load_dataset
server = ms.ModelServer(ms.CaseResponder(load_dataset("arithmetic", cases=int(sys.argv[1])).cases))
print(server.openai_url, flush=True)
server.serve_forever()
"""


def run_once(trials: int, ablate: str | None = None, agent: str = "mock") -> dict:
    env = {k: v for k, v in os.environ.items() if k != "AGENTEVAL_ABLATE"}
    if ablate:
        env["AGENTEVAL_ABLATE"] = ablate
    if agent != "model":
        return _measured(trials, agent, env)
    # The stand-in model answers from a process of its own, as a model server would: it does not share the
    # harness's interpreter.
    server = subprocess.Popen(
        [sys.executable, "-c", SERVER, str(trials), str(HERE.parent / "tests")], stdout=subprocess.PIPE, text=True
    )
    try:
        assert server.stdout is not None
        env["BENCH_MODEL_URL"] = server.stdout.readline().strip()
        env["OPENAI_API_KEY"] = "sk-bench-loopback"
        return _measured(trials, agent, env)
    finally:
        server.terminate()
        server.wait()


def _measured(trials: int, agent: str, env: dict[str, str]) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", ONE_RUN, str(trials), AGENTS[agent]],
        capture_output=True,
        text=True,
        check=True,
        cwd=tempfile.gettempdir(),
        env=env,
    )
    return json.loads(done.stdout)


def ablate(name: str, sizes: list[int], repeats: int) -> None:
    from ablate import in_turns, summary

    for size in sizes:
        on, off = in_turns(lambda on, size=size: size / run_once(size, None if on else name)["seconds"], repeats)
        print(f"{size:>8,} trials  " + summary(name, on, off, "trials/s", higher_is_better=True))


def twins(sizes: list[int], repeats: int) -> None:
    """The sync agent against its async twin, in turns: how much a plain function costs the harness."""
    from ablate import in_turns

    print(f"{'trials':>8} {'sync/s':>9} {'async/s':>9} {'async over sync':>16}   (paired rounds, {repeats} each)")
    for size in sizes:
        sync, asynchronous = in_turns(
            lambda is_sync, size=size: size / run_once(size, agent="sync" if is_sync else "async")["seconds"], repeats
        )
        ratios = [a / s for s, a in zip(sync, asynchronous, strict=True)]
        print(
            f"{size:>8,} {statistics.median(sync):>9,.0f} {statistics.median(asynchronous):>9,.0f} "
            f"{statistics.median(ratios):>15.2f}x   range {min(ratios):.2f}-{max(ratios):.2f}"
        )
    print("target: the sync agent within 1.3x of its async twin")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[1_000, 10_000, 100_000])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--ablate", choices=["gc_freeze"])
    parser.add_argument("--agent", choices=sorted(AGENTS), default="mock")
    parser.add_argument("--twins", action="store_true", help="The sync agent against its async twin, in turns.")
    options = parser.parse_args()
    if options.twins:
        twins(options.sizes, options.repeats)
        return
    if options.ablate:
        ablate(options.ablate, options.sizes, options.repeats)
        return
    print(f"{'trials':>8} {'trials/s':>10} {'seconds':>9} {'peak RSS':>10}   (median of {options.repeats} runs)")
    for size in options.sizes:
        runs = [run_once(size, agent=options.agent) for _ in range(options.repeats)]
        seconds = statistics.median(r["seconds"] for r in runs)
        peak = statistics.median(r["peak_mb"] for r in runs)
        print(f"{size:>8,} {size / seconds:>10,.0f} {seconds:>9.2f} {peak:>8.0f} MB")
    print("targets: >= 2,000 trials/s; 100,000 trials under 500 MB peak RSS")


if __name__ == "__main__":
    main()
