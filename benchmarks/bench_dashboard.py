"""The dashboard over a large experiment: how long its pages take to come back, over real HTTP.

A store with one experiment of N trials of the mock agent (100,000 by default: 33,334 cases of the generated
arithmetic dataset, 3 attempts each), written by the runner as a user's run is (its figures saved at the end),
and a second of 1/10 the size to compare against. A real ``agenteval dashboard`` process serves it on loopback;
each page is fetched ``--repeats`` times after one warm-up fetch, and the median wall time of a full response is
printed with the range, and its ratio to the issue's target of about a second for an experiment's page.

- ``experiments``: the list, with every experiment's pass rate and interval;
- ``experiment``: an experiment's page: the report with its plots, and the first page of 50 cases;
- ``experiment page 500``: a page deep into the cases (OFFSET in SQL);
- ``experiment filtered``: cases with a failed attempt, sorted by pass rate;
- ``trial``: one trial with its conversation, scores and span tree;
- ``compare``: the comparison and the gate's decision (on the cases both ran);
- ``sql``: the SQL page running a short statement (a count of the experiment's trials) in its worker.

    python benchmarks/bench_dashboard.py [--trials 100000] [--repeats 7] [--keep DIR]
"""

from __future__ import annotations

import argparse
import math
import re
import shutil
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import quote

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from dashboard_server import dashboard

from agenteval.run import evaluate

TARGET_SECONDS = 1.0
ATTEMPTS = 3


def make_store(root: Path, trials: int) -> tuple[str, str]:
    """The big experiment and a tenth-size one on the same dataset; their ids."""
    cases = math.ceil(trials / ATTEMPTS)
    big = evaluate(
        "mock",
        "arithmetic",
        cases=cases,
        attempts=ATTEMPTS,
        store=root,
        progress="none",
        concurrency=64,
        agent_options={"wrong_rate": "0.1", "fail_rate": "0.02"},
    ).id
    small = evaluate(
        "mock",
        "arithmetic",
        cases=max(cases // 10, 10),
        attempts=ATTEMPTS,
        store=root,
        progress="none",
        concurrency=64,
        agent_options={"wrong_rate": "0.2", "seed": "2"},
    ).id
    return big, small


def measure(client: httpx.Client, path: str, repeats: int) -> list[float]:
    first = client.get(path)
    assert first.status_code == 200, (path, first.status_code, first.text[:300])
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        response = client.get(path)
        times.append(time.perf_counter() - start)
        assert response.status_code == 200
    return times


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=100_000)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--keep", type=Path, help="Reuse (or make and keep) the store in this folder.")
    args = parser.parse_args()
    folder = args.keep or Path(tempfile.mkdtemp(prefix="bench-dashboard-"))
    ids_file = folder / "ids.txt"
    try:
        if ids_file.exists():
            big, small = ids_file.read_text().split()
        else:
            start = time.perf_counter()
            big, small = make_store(folder / "store", args.trials)
            ids_file.write_text(f"{big} {small}")
            print(f"# wrote the store in {time.perf_counter() - start:.0f} s", flush=True)
        with dashboard(str(folder / "store")) as site, httpx.Client(base_url=site, timeout=120) as client:
            page = client.get(f"/experiments/{big}").text
            trial = re.search(r'href="(/experiments/[^"]+/trials/[^"]+)"', page)
            assert trial is not None
            count_trials = f"SELECT count(*) FROM trials WHERE experiment_id = '{big}'"
            pages = {
                "experiments": "/",
                "experiment": f"/experiments/{big}",
                "experiment page 500": f"/experiments/{big}?page=500",
                "experiment filtered": f"/experiments/{big}?outcome=failed&sort=pass_rate&order=desc",
                "trial": trial.group(1),
                "compare": f"/compare/{small}/{big}",
                "sql": "/sql?q=" + quote(count_trials),
            }
            trials = client.get(pages["sql"])
            count = re.search(r"<td>(\d+)</td>", trials.text)
            print(f"# {count.group(1) if count else '?'} trials in the experiment; medians of {args.repeats} fetches")
            print(f"{'page':<22} {'median':>9} {'range':>20} {'vs 1 s':>7}")
            for name, path in pages.items():
                times = measure(client, path, args.repeats)
                median = statistics.median(times)
                spread = f"{min(times) * 1000:,.0f}-{max(times) * 1000:,.0f} ms"
                print(f"{name:<22} {median * 1000:>6,.0f} ms {spread:>20} {median / TARGET_SECONDS:>6.2f}x", flush=True)
    finally:
        if args.keep is None:
            shutil.rmtree(folder, ignore_errors=True)


if __name__ == "__main__":
    main()
