"""A store that cannot be written: a run that hits a full disk (or a file-size limit) mid-way keeps every
trial it saved, records why it failed, and resumes; a read-only store refuses `run`, `rescore`, `compact`,
`doctor` and `prune` with one line (their `--dry-run`s read it), and no file changes. Each runs the command
line as a real process."""

from __future__ import annotations

import ctypes
import hashlib
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from agenteval.store import Store
from agenteval.store._snapshots import snapshot_folders

# An agent whose first second of replies is short, and whose later replies are 30 KB each: the first
# micro-batch fits under the file-size limit below, every later one does not, however fast the machine.
GROWING_AGENT = """
import os, time
started = None

async def answer(question):
    global started
    started = started or time.monotonic()
    if time.monotonic() - started < 1.5:
        time.sleep(0.01)
        return "short"
    return os.urandom(15_000).hex()
"""

FILE_SIZE_LIMIT = 200_000

# The run under a file-size limit: a write past it fails with EFBIG, as one on a full disk fails with
# ENOSPC (SIGXFSZ, which would kill the process instead, is ignored).
LIMITED = f"""
import resource, signal, sys
signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
resource.setrlimit(resource.RLIMIT_FSIZE, ({FILE_SIZE_LIMIT}, {FILE_SIZE_LIMIT}))
from agenteval.cli import main
sys.argv = ["agenteval", *sys.argv[1:]]
main()
"""


def agenteval(*args: str, limited: bool = False, unprivileged: bool = False) -> subprocess.CompletedProcess:
    command = [sys.executable, "-c", LIMITED] if limited else [sys.executable, "-m", "agenteval.cli"]
    return subprocess.run(
        [*command, *args],
        capture_output=True,
        text=True,
        timeout=300,
        preexec_fn=_without_root_powers if unprivileged else None,
    )


def _without_root_powers() -> None:
    """Tests may run as root, whom file permissions do not stop: drop every capability from the bounding
    set, so that after exec the process obeys permissions as any user would."""
    if os.geteuid() != 0:
        return
    prctl = ctypes.CDLL(None, use_errno=True).prctl
    pr_capbset_drop = 24
    for capability in range(64):
        prctl(pr_capbset_drop, capability, 0, 0, 0)  # fails past the last capability the kernel knows


def error_line(done: subprocess.CompletedProcess) -> str:
    assert done.returncode == 1, (done.returncode, done.stderr[-3000:])
    assert "Traceback" not in done.stderr, done.stderr[-3000:]
    lines = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1, done.stderr[-3000:]
    return lines[0]


def rows(store: Path, sql: str) -> list[tuple]:
    with Store(store).connect(read_only=True) as con:
        return con.execute(sql).fetchall()


def run_under_the_file_size_limit(
    tmp_path: Path, agent_source: str
) -> tuple[Path, list[str], subprocess.CompletedProcess]:
    """A 400-case run of the agent ``agent_source`` defines (its ``answer``), one trial at a time, under the
    file-size limit: the store, the run's arguments (to resume it with) and the finished process."""
    agent = tmp_path / "agent_under_test.py"
    agent.write_text(agent_source)
    store = tmp_path / "store"
    run = ["run", "-d", "arithmetic", "--cases", "400", "--attempts", "1", "-j", "1", "-q", "--store", str(store)]
    run += ["-a", f"{agent}:answer"]
    return store, run, agenteval(*run, limited=True)


def test_a_run_that_cannot_write_its_files_fails_with_its_reason_keeps_what_it_saved_and_resumes(tmp_path):
    store, run, failed = run_under_the_file_size_limit(tmp_path, GROWING_AGENT)

    line = error_line(failed)
    assert f"the store at {store} could not be written" in line and "File too large" in line, line
    [(experiment_id, status, error)] = rows(store, "SELECT experiment_id, status, error FROM experiments")
    assert status == "failed" and "File too large" in error, (status, error)
    assert f"agenteval run --resume {experiment_id}" in line
    saved = rows(store, "SELECT trial_id FROM trials")
    assert 0 < len(saved) < 400, len(saved)  # the first micro-batch was saved, the run stopped after it
    # What was saved is whole: each trial with its root span and its scores (trials are written last).
    assert rows(store, "SELECT count(*) FROM trials t ANTI JOIN spans s ON s.trial_id = t.trial_id")[0][0] == 0
    assert rows(store, "SELECT count(*) FROM trials t ANTI JOIN scores s USING (trial_id)")[0][0] == 0

    resumed = agenteval(*run, "--resume", experiment_id)

    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert rows(store, "SELECT status, error FROM experiments") == [("completed", None)]
    assert rows(store, "SELECT count(*), count(DISTINCT case_id) FROM trials") == [(400, 400)]
    assert rows(store, "SELECT count(*) FROM spans WHERE parent_span_id IS NULL") == [(400,)]


# Short replies (so trial rows stay small) but, after the first second and a half, a 30 KB span per trial: the
# spans' file passes the file-size limit while the trials' file does not.
GROWING_SPANS_AGENT = """
import os, time
from opentelemetry import trace
started = None
tracer = trace.get_tracer("growing-spans")

async def answer(question):
    global started
    started = started or time.monotonic()
    if time.monotonic() - started < 1.5:
        time.sleep(0.01)
        return "short"
    with tracer.start_as_current_span("big", attributes={"blob": os.urandom(15_000).hex()}):
        return "short"
"""


def test_trial_rows_whose_spans_could_not_be_written_are_not_saved_so_resume_runs_them_again(tmp_path):
    """The spans' file fails and the trials' file would not: the run's last save wrote the trial rows of the
    trials whose spans it had just failed to write (302 of 400 with no span), and a resume, seeing rows, never
    ran them again."""
    store, run, failed = run_under_the_file_size_limit(tmp_path, GROWING_SPANS_AGENT)

    line = error_line(failed)
    assert "File too large" in line, line
    saved = rows(store, "SELECT count(*) FROM trials")[0][0]
    assert 0 < saved < 400, saved
    assert rows(store, "SELECT count(*) FROM trials t ANTI JOIN spans s ON s.trial_id = t.trial_id")[0][0] == 0
    assert rows(store, "SELECT count(*) FROM trials t ANTI JOIN scores s USING (trial_id)")[0][0] == 0
    [(experiment_id,)] = rows(store, "SELECT experiment_id FROM experiments")

    resumed = agenteval(*run, "--resume", experiment_id)

    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert rows(store, "SELECT count(*), count(DISTINCT case_id) FROM trials") == [(400, 400)]
    assert rows(store, "SELECT count(*) FROM trials t ANTI JOIN spans s ON s.trial_id = t.trial_id") == [(0,)]
    assert rows(store, "SELECT count(*) FROM spans WHERE parent_span_id IS NULL") == [(400,)]


def fingerprint(folder: Path) -> dict[str, str]:
    return {
        str(path.relative_to(folder)): hashlib.sha256(path.read_bytes()).hexdigest()
        for path in sorted(folder.rglob("*"))
        if path.is_file()
    }


def test_run_and_rescore_on_a_read_only_store_say_so_in_one_line_and_change_nothing(tmp_path):
    store = tmp_path / "store"
    done = agenteval(
        "run", "-d", "arithmetic", "--cases", "5", "--attempts", "1", "-a", "mock", "-q", "--store", str(store)
    )
    assert done.returncode == 0, done.stderr
    before = fingerprint(store)
    folders = [store, *(p for p in store.rglob("*") if p.is_dir())]
    for folder in folders:
        folder.chmod(0o555)
    try:
        for command in (
            ["run", "-d", "arithmetic", "--cases", "5", "-a", "mock", "-q"],
            ["rescore"],
            ["run", "--resume", "-a", "mock", "-d", "arithmetic", "--cases", "5", "-q"],
        ):
            refused = agenteval(*command, "--store", str(store), unprivileged=True)
            line = error_line(refused)
            assert f"the store at {store} cannot be written" in line and "permission" in line.lower(), line
        # Reading still works.
        listed = agenteval("experiments", "--store", str(store), unprivileged=True)
        assert listed.returncode == 0, listed.stderr
    finally:
        for folder in folders:
            folder.chmod(0o755)
    assert fingerprint(store) == before


def test_doctor_dry_run_reads_a_read_only_store_and_the_maintenance_commands_say_it_cannot_be_written(tmp_path):
    """A store copied read-only (`chmod -R a-w`, a read-only mount): the doctor's dry run, which only reads, checks
    it (it stopped on the compaction lock's file: '[Errno 13] Permission denied'), and compact, doctor and prune
    say in one line that the store cannot be written, as run and rescore do."""
    store = tmp_path / "store"
    done = agenteval(
        "run", "-d", "arithmetic", "--cases", "5", "--attempts", "1", "-a", "mock", "-q", "--store", str(store)
    )
    assert done.returncode == 0, done.stderr
    (store / "trials" / "experiment_id=x").mkdir()
    (store / "trials" / "experiment_id=x" / "part-0.parquet").write_bytes(b"cut short")
    before = fingerprint(store)
    paths = [store, *store.rglob("*")]
    for path in paths:
        path.chmod(0o555 if path.is_dir() else 0o444)
    try:
        checked = agenteval("doctor", "--dry-run", "--store", str(store), unprivileged=True)
        assert checked.returncode == 1 and "Traceback" not in checked.stderr, checked.stderr[-3000:]
        assert "part-0.parquet: unreadable" in checked.stdout and "left in place (--dry-run)" in checked.stdout
        listed = agenteval("prune", "--older-than", "30d", "--dry-run", "--store", str(store), unprivileged=True)
        assert listed.returncode == 0 and "Traceback" not in listed.stderr, listed.stderr[-3000:]
        for command in (["doctor"], ["compact"], ["prune", "--older-than", "30d"]):
            refused = agenteval(*command, "--store", str(store), unprivileged=True)
            line = error_line(refused)
            assert f"the store at {store} cannot be written" in line and "permission" in line.lower(), line
    finally:
        for path in paths:
            path.chmod(0o755 if path.is_dir() else 0o644)
    assert fingerprint(store) == before


def scorer_figures(store: Path) -> dict[str, tuple[int, float, int]]:
    """Each scorer's scored count, pass rate and errors, as ``agenteval report`` gives them."""
    done = agenteval("report", "--format", "json", "--store", str(store))
    assert done.returncode == 0, done.stderr[-3000:]
    scorers = json.loads(done.stdout)["scorers"]
    return {s["scorer"]: (s["scored"], s["pass_rate"], s["errors"]) for s in scorers}


def test_scores_of_tries_whose_trial_rows_were_never_written_are_not_counted_after_resume(tmp_path):
    """A run stopped after publishing its trials' scores and before their rows (here the trials' folder cannot be
    written; a run killed between the two, or a Ray worker lost mid-task, leaves the same) is resumed, and the
    trials run again under new ids. The report's scorer table counted the lost tries' scores beside theirs:
    "scored 180" for 90 trials, while the pass rate counted 90."""
    store = tmp_path / "store"
    Store(store).ensure()
    (store / "trials").chmod(0o555)
    run = ["run", "-d", "arithmetic", "-a", "mock", "--cases", "30", "--attempts", "3", "-q", "--store", str(store)]
    run += ["--agent-option", "wrong_rate=0.3"]
    assert "Permission denied" in error_line(agenteval(*run, unprivileged=True))
    (store / "trials").chmod(0o755)
    [(experiment_id,)] = rows(store, "SELECT experiment_id FROM experiments")
    assert rows(store, "SELECT count(*) FROM trial_history") == [(0,)]
    assert rows(store, "SELECT count(*) FROM score_history")[0][0] > 0  # the lost tries' scores, kept as written

    resumed = agenteval(*run, "--resume", experiment_id)

    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert rows(store, "SELECT count(*) FROM trials") == [(90,)]
    by_hand = agenteval(
        "sql", "--format", "json", "--store", str(store),
        "SELECT scorer, count(*) AS scored, avg(s.passed::INT) AS pass_rate, count(s.error) AS errors "
        "FROM score_history s JOIN trials t USING (experiment_id, trial_id) GROUP BY scorer",
    )  # fmt: skip
    assert by_hand.returncode == 0, by_hand.stderr
    expected = {r["scorer"]: (r["scored"], r["pass_rate"], r["errors"]) for r in json.loads(by_hand.stdout)}
    assert {scorer: figures[0] for scorer, figures in expected.items()} == {"answer_match": 90, "tool_use": 90}
    assert snapshot_folders(Store(store))
    assert scorer_figures(store) == expected  # saved by the resume
    shutil.rmtree(store / ".snapshots")
    assert scorer_figures(store) == expected  # computed
    assert rows(store, "SELECT scorer, count(*) FROM scores GROUP BY scorer ORDER BY scorer") == [
        ("answer_match", 90),
        ("tool_use", 90),
    ]


def test_a_compaction_whose_merged_copy_cannot_be_written_says_so_not_that_a_file_is_unreadable(tmp_path):
    """`agenteval compact` under a file-size limit (as on a full disk) left the partition whose merged copy was too
    large as it was, said "a file could not be read; run agenteval doctor", which found nothing, and exited 0 (found
    by a hostile check). It now says the store cannot be written, exits 1, and every row is still there once."""
    store = Store(tmp_path / "s")
    rows = 0
    for i in range(16):  # 16 files of about 20 KB each: each fits under the limit, their merged copy does not
        store.write("trials", [{**row, "error_message": os.urandom(20_000).hex()} for row in _trials("big", i)])
        rows += 1
    for i in range(3):  # a small partition, which the limit leaves alone
        store.write("trials", _trials("small", i))
    compacted = agenteval("compact", "--store", str(store.root), limited=True)
    assert compacted.returncode == 1, compacted.stderr
    assert "could not be read" not in compacted.stderr and "doctor" not in compacted.stderr
    assert f"the store at {store.root} cannot be written (File too large: 1 partition(s) left as they were)" in (
        compacted.stderr
    )
    assert "compacted 1 partition(s): 3 files -> 1" in compacted.stdout
    assert len(list((store.root / "trials" / "experiment_id=big").glob("*.parquet"))) == 16
    counted = store.query("SELECT experiment_id, count(*) n FROM trials GROUP BY ALL ORDER BY ALL").to_pylist()
    assert counted == [{"experiment_id": "big", "n": rows}, {"experiment_id": "small", "n": 3}]


def _trials(experiment: str, i: int) -> list[dict]:
    return [
        {
            "experiment_id": experiment,
            "trial_id": f"{experiment}-t{i}",
            "case_id": "c",
            "attempt": 1,
            "outcome": "wrong",
            "passed": False,
            "started_at": 0,
            "ended_at": 1,
        }
    ]
