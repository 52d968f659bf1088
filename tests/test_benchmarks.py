"""The side-by-side benchmarks run in their smallest setting, so they cannot rot; nothing here is timed.

The peers come from the ``bench`` extra, which the tests do not install (inspect-ai alone brings about 60
packages): without them each script must still measure agenteval and say how to install the rest; with them,
it measures them too.
"""

from __future__ import annotations

import importlib.util
import re
import subprocess
import sys
from pathlib import Path

BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"
INSTALL_HINT = "pip install -e '.[bench]'"


def installed(*modules: str) -> bool:
    return all(importlib.util.find_spec(m) is not None for m in modules)


def run_benchmark(tmp_path: Path, script: str, *arguments: str) -> list[str]:
    done = subprocess.run(
        [sys.executable, str(BENCHMARKS / script), *arguments],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    return done.stdout.splitlines()


def row(lines: list[str], name: str) -> str | None:
    return next((line for line in lines if line.split(" ", 1)[0] == name), None)


def test_bench_peers_measures_agenteval_and_each_installed_peer(tmp_path):
    lines = run_benchmark(tmp_path, "bench_peers.py", "--cases", "20", "--rounds", "1")

    agenteval = row(lines, "agenteval")
    assert agenteval is not None and re.match(r"agenteval +[\d,]+ \([\d,]+-[\d,]+\)", agenteval), lines
    assert "trials/s" in next(line for line in lines if line.startswith("side")), lines
    facts = lines[lines.index(agenteval) + 1]
    pages = r"shared libraries' pages \d+ \(\d+-\d+\) MB of the peak"
    assert re.fullmatch(rf" +{pages}; \d+\.\d spans a trial; \d+\.\d MB written", facts), lines
    assert next(line for line in lines if line.startswith("versions:")).startswith("versions: agenteval ")
    peers = {
        "pydantic-evals": ("pydantic_evals",),
        "pydantic-evals+otel": ("pydantic_evals", "logfire"),
        "inspect": ("inspect_ai",),
        "inspect+mockllm": ("inspect_ai",),
    }
    for name, modules in peers.items():
        measured = row(lines, name)
        if installed(*modules):
            assert measured is not None and re.search(r"\d\.\d\dx \(", measured), (name, lines)
        else:
            assert measured is None
            assert f"{name}: not installed" in "\n".join(lines) and INSTALL_HINT in "\n".join(lines), lines


def test_bench_decorators_peers_measures_agenteval_and_each_installed_peer(tmp_path):
    lines = run_benchmark(tmp_path, "bench_decorators.py", "--peers", "--rounds", "1", "--calls", "200")

    assert row(lines, "agenteval") is not None, lines
    for name, module in {"logfire": "logfire", "openinference": "openinference", "langfuse": "langfuse"}.items():
        if installed(module):
            assert row(lines, name) is not None, (name, lines)
        else:
            assert any(line.startswith(f"{name}: not installed") and INSTALL_HINT in line for line in lines), lines


def test_bench_dashboard_fetches_every_page_of_a_small_store(tmp_path):
    lines = run_benchmark(tmp_path, "bench_dashboard.py", "--trials", "300", "--repeats", "1")
    for page in ("experiments", "experiment", "trial", "compare"):
        assert row(lines, page) is not None, page


def test_bench_startup_measures_every_figure_it_names(tmp_path):
    lines = run_benchmark(tmp_path, "bench_startup.py", "--repeats", "1", "--run-repeats", "1", "--run-cases", "20")
    names = ("agenteval --help", "import the decorators", "agenteval report, 150 trials", "20-case run, peak RSS")
    for name in (*names, "of which shared libraries' pages"):
        assert any(re.match(rf" +{re.escape(name)} +[\d.]+ (ms|MB) \(range", line) for line in lines), (name, lines)
    floors = [
        line for line in lines if re.match(r" +(held before any trial|the same, pandas not installed) +[\d.]+ MB", line)
    ]
    assert len(floors) == 2, lines


def test_bench_collect_sends_over_http_and_grpc_and_counts_every_span(tmp_path):
    lines = run_benchmark(
        tmp_path, "bench_collect.py", "--spans", "2048", "--repeats", "1", "--clients", "1", "--warm-up", "0"
    )
    rows = [line for line in lines if re.match(r"(http|grpc) +\d process", line)]
    assert [line.split(" spans/s")[0].split()[:3] for line in rows] == [
        ["http", "1", "process"],
        ["http", "2", "processes"],
        ["grpc", "1", "process"],
    ], lines
    for measured in rows:
        assert re.search(r"process(es)? +[\d,]+ spans/s .* the 100,000 spans/s target", measured), measured
    assert sum("collector CPU" in line for line in lines) == 3, lines


def test_bench_audit_times_the_search_and_its_baseline_and_checks_they_agree(tmp_path):
    # The baseline is this checkout's own code (HEAD): any clone has it, however shallow; the default revision is
    # for measuring, here only the comparison's path is run.
    arguments = ("--sizes", "300", "--baseline", "HEAD", "--baseline-sizes", "300", "--templated", "40")
    arguments += ("--repeats", "1")
    lines = run_benchmark(tmp_path, "bench_audit.py", *arguments)
    for name in ("300", "templated 40"):
        assert any(re.match(rf" *{name} now +wall +[\d.]+ s", line) for line in lines), (name, lines)
        assert any(re.match(rf" *{name} baseline wall .* \(the same pairs, total, groups\)", line) for line in lines)
        assert any(re.match(rf" *{name} baseline / now: wall [\d.]+x, cpu [\d.]+x", line) for line in lines), lines


def test_the_continuous_interval_simulation_runs_and_names_each_interval(tmp_path):
    """benchmarks/sim_continuous_interval.py at 20 runs a setting: its table has the interval before and agenteval's
    (the script checks that its logit interval is agenteval's own, run by run)."""
    lines = run_benchmark(tmp_path, "sim_continuous_interval.py", "--runs", "20")
    assert lines[0].startswith("1260 settings, 20 runs each"), lines
    assert any(line.startswith("t (before) ") for line in lines) and any(
        line.startswith("logit t + floor ") for line in lines
    ), lines
