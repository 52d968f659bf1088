"""Start-up and small-run costs: what a person pays before any real work.

Each figure is the median of repeated fresh processes (the spread is printed beside it):

- ``agenteval --help``: the whole command, interpreter start included (target <= 80 ms);
- ``from agenteval_instrumentation import llm_call, tool``: the import alone, timed inside a fresh interpreter
  (what every decorated production app pays before its first call; target <= 25 ms), and
  ``import opentelemetry.trace`` alone, and the import with one decorated call (which loads the API), for
  comparison;
- ``agenteval report`` on a small store (50 cases x 3 attempts, figures and report saved by the run): the whole
  command (target <= 250 ms); the same with the saved report removed, so computed with DuckDB from the saved
  figures (what a report costs after a write that saves none); and beside them what no computed report can go
  below here: the interpreter's start and the import of the libraries it reads and prints with (DuckDB, click,
  rich), timed in a fresh interpreter;
- a 2,000-case run of the mock agent (1 attempt): peak RSS of the process (target <= 130 MB; Pydantic Evals
  took 118 MB on the same dataset, see bench_peers.py), and how much of that peak is shared libraries' pages
  (file-backed: DuckDB's and Arrow's code, shared between processes); beside it, what any run holds before its
  first trial: the run's modules, pyarrow's first conversion of Python values (which imports pandas where it is
  installed) and DuckDB's first connection, in a fresh process that does nothing else (with and without pandas).

    python benchmarks/bench_startup.py [--repeats 15] [--run-repeats 3] [--run-cases 2000]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

BIN = Path(sys.executable).parent
ROOT = Path(__file__).resolve().parent.parent
AGENTEVAL = str(BIN / "agenteval")
SOURCES = [ROOT / "agenteval", ROOT / "exporters" / "src", ROOT / "instrumentation" / "src"]
TIMED_IMPORT = "import time; t = time.perf_counter(); {statement}; print(time.perf_counter() - t)"
RUN_FLOOR = (
    "import os; os.environ['ARROW_DEFAULT_MEMORY_POOL'] = 'system'\n"
    "import agenteval.run._runner, duckdb, pyarrow as pa\n"
    "pa.array(['x']); duckdb.connect().execute('SELECT 1').fetchall()"
)
"""What a run loads before its first trial, as ``agenteval run`` loads it (the system allocator for Arrow)."""
HIDE_PANDAS = (
    "import sys\n"
    "class Hidden:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name == 'pandas': raise ImportError('hidden')\n"
    "sys.meta_path.insert(0, Hidden())\n"
)


def wall(command: list[str], env: dict[str, str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    return time.perf_counter() - started


def imported(statement: str, env: dict[str, str]) -> float:
    done = subprocess.run(
        [sys.executable, "-c", TIMED_IMPORT.format(statement=statement)],
        env=env,
        check=True,
        capture_output=True,
        text=True,
    )
    return float(done.stdout)


def peak_rss_mb(command: list[str], env: dict[str, str]) -> float:
    """Peak RSS of one child process (``wait4``'s rusage: that child alone, not the children before it)."""
    return peak_memory(command, env)[0]


def peak_memory(command: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Peak RSS of one child process, and its file-backed part at the highest RSS sampled (every 2 ms from
    ``/proc``): the pages of shared libraries' code and data it touched, which the kernel shares between processes
    and can drop and read again, unlike the process's own (anonymous) memory."""
    child = subprocess.Popen(command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    highest, file_backed = 0, 0
    while True:
        pid, status, usage = os.wait4(child.pid, os.WNOHANG)  # not Popen.poll: it would reap the rusage
        if pid:
            break
        sample = _resident(child.pid)
        if sample and sample[0] > highest:
            highest, file_backed = sample
        time.sleep(0.002)
    child.returncode = os.waitstatus_to_exitcode(status)
    if child.returncode:
        raise SystemExit(f"{command} exited {child.returncode}")
    return usage.ru_maxrss / 1024, file_backed / 1024


def _resident(pid: int) -> tuple[int, int] | None:
    """(VmRSS, RssFile) of a live process in kB, or None once it is gone."""
    try:
        fields = dict(line.split(":", 1) for line in Path(f"/proc/{pid}/status").read_text().splitlines())
        return int(fields["VmRSS"].split()[0]), int(fields["RssFile"].split()[0])
    except (OSError, KeyError, ValueError):
        return None


def line(name: str, values: list[float], unit: str, scale: float, target: str) -> str:
    median = statistics.median(values) * scale
    low, high = min(values) * scale, max(values) * scale
    return f"  {name:38s} {median:8.1f} {unit} (range {low:.1f}-{high:.1f})   target {target}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=15)
    parser.add_argument("--run-repeats", type=int, default=3, help="Repeats of the 2,000-case run.")
    parser.add_argument("--run-cases", type=int, default=2000, help="Cases of that run (the target is for 2,000).")
    options = parser.parse_args()
    with tempfile.TemporaryDirectory() as scratch:
        env = {**os.environ, "AGENTEVAL_STORE": str(Path(scratch) / "small")}
        # An installed wheel comes with its bytecode compiled; with PYTHONDONTWRITEBYTECODE set (some
        # containers set it) an editable install would compile every module of ours in every process, which
        # once added tens of milliseconds to each figure here.
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        subprocess.run([sys.executable, "-m", "compileall", "-q", *map(str, SOURCES)], check=True)
        computed_env = {**env, "AGENTEVAL_STORE": str(Path(scratch) / "computed")}
        for store_env in (env, computed_env):
            subprocess.run(
                [AGENTEVAL, "run", "--dataset", "arithmetic", "--agent", "mock", "--cases", "50", "--quiet"],
                env=store_env,
                check=True,
                stdout=subprocess.DEVNULL,
            )
        shutil.rmtree(Path(computed_env["AGENTEVAL_STORE"]) / ".snapshots" / "reports")
        figures: dict[str, list[float]] = {
            "help": [],
            "instrumentation": [],
            "otel": [],
            "first call": [],
            "report": [],
            "computed": [],
            "python": [],
            "libraries": [],
            "run": [],
            "run, library pages": [],
            "floor": [],
            "floor without pandas": [],
        }
        for _ in range(options.repeats):  # in turns, so a busy moment costs every figure alike
            figures["help"].append(wall([AGENTEVAL, "--help"], env))
            # What a decorated app pays at import: the decorators load the API on their first call.
            figures["instrumentation"].append(imported("from agenteval_instrumentation import llm_call, tool", env))
            figures["otel"].append(imported("import opentelemetry.trace", env))
            first_call = "from agenteval_instrumentation import tool; add = tool(lambda a, b: a + b); add(1, 2)"
            figures["first call"].append(imported(first_call, env))
            figures["report"].append(wall([AGENTEVAL, "report"], env))
            figures["computed"].append(wall([AGENTEVAL, "report"], computed_env))
            figures["python"].append(wall([sys.executable, "-c", "pass"], env))
            figures["libraries"].append(imported("import duckdb, click, rich.console", env))
        run_env = {**env, "AGENTEVAL_STORE": str(Path(scratch) / "run")}
        run = [AGENTEVAL, "run", "--dataset", "arithmetic", "--agent", "mock", "--cases", str(options.run_cases)]
        run += ["--attempts", "1"]
        for _ in range(options.run_repeats):
            peak, file_backed = peak_memory([*run, "--quiet"], run_env)
            figures["run"].append(peak)
            figures["run, library pages"].append(file_backed)
            figures["floor"].append(peak_rss_mb([sys.executable, "-c", RUN_FLOOR], env))
            figures["floor without pandas"].append(peak_rss_mb([sys.executable, "-c", HIDE_PANDAS + RUN_FLOOR], env))
    print(f"median of {options.repeats} fresh processes ({options.run_repeats} for the run)")
    print(line("agenteval --help", figures["help"], "ms", 1000, "<= 80 ms"))
    print(line("import the decorators", figures["instrumentation"], "ms", 1000, "<= 25 ms"))
    print(line("import opentelemetry.trace alone", figures["otel"], "ms", 1000, "(for comparison)"))
    print(line("  import, decorate, call once", figures["first call"], "ms", 1000, "(for comparison)"))
    print(line("agenteval report, 150 trials", figures["report"], "ms", 1000, "<= 250 ms"))
    print(line("  the same, computed", figures["computed"], "ms", 1000, "(for comparison)"))
    print(line("  python -c pass", figures["python"], "ms", 1000, "(for comparison)"))
    print(line("  import duckdb, click, rich.console", figures["libraries"], "ms", 1000, "(for comparison)"))
    print(line(f"{options.run_cases:,}-case run, peak RSS", figures["run"], "MB", 1, "<= 130 MB"))
    print(line("  of which shared libraries' pages", figures["run, library pages"], "MB", 1, "(for comparison)"))
    print(line("  held before any trial", figures["floor"], "MB", 1, "(for comparison)"))
    print(line("  the same, pandas not installed", figures["floor without pandas"], "MB", 1, "(for comparison)"))


if __name__ == "__main__":
    main()
