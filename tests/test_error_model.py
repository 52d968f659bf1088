"""One error model: what a user can get wrong is one line naming where and what to do, with exit 1 (2 for
an option that cannot work); a traceback only for a bug, or with --debug. Oddities are said out loud."""

from __future__ import annotations

import os
import resource
import subprocess
import sys

import pytest

from agenteval.dataset import DatasetError, load_file
from agenteval.errors import AgentevalError, UsageError


def agenteval(*args: str, store=None, cwd=None) -> subprocess.CompletedProcess:
    env = {**os.environ, **({"AGENTEVAL_STORE": str(store)} if store else {})}
    return subprocess.run(
        [sys.executable, "-m", "agenteval.cli", *args], capture_output=True, text=True, env=env, cwd=cwd, timeout=120
    )


def one_line_error(done: subprocess.CompletedProcess, code: int, *wanted: str) -> None:
    assert done.returncode == code, (done.returncode, done.stderr)
    assert "Traceback" not in done.stderr
    lines = [line for line in done.stderr.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1, done.stderr
    for text in wanted:
        assert text in lines[0], lines[0]


def test_the_errors_users_cause_are_agenteval_errors():
    from agenteval.analysis import NotComparable
    from agenteval.run import RunRefused
    from agenteval.store import StoreBusy

    for error in (DatasetError, RunRefused, NotComparable, StoreBusy, UsageError):
        assert issubclass(error, AgentevalError)
    assert UsageError.exit_code == 2 and AgentevalError.exit_code == 1


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ('print("hi"\n', "syntax error", ":1: syntax error"),
        ("import sys\nsys.exit(3)\n", "raised SystemExit: 3", ":2)"),
        ("import not_a_module_anywhere\n", "No module named 'not_a_module_anywhere'", ":1)"),
        ("def answer(q):\n    return q\nraise RuntimeError('no config')\n", "RuntimeError: no config", ":3)"),
        ("class Abort(BaseException):\n    pass\n\nraise Abort('stop here')\n", "Abort: stop here", ":4)"),
        ("raise GeneratorExit('closed')\n", "GeneratorExit: closed", ":1)"),
    ],
    ids=["syntax", "sys-exit", "import", "raises", "base-exception", "generator-exit"],
)
def test_an_agent_file_that_fails_to_import_names_its_file_and_line(tmp_path, body, field, message):
    agent_file = tmp_path / "broken_agent.py"
    agent_file.write_text(body)
    done = agenteval(
        "run", "--dataset", "arithmetic", "--cases", "2", "--agent", f"{agent_file}:answer", store=tmp_path
    )
    one_line_error(done, 1, f"--agent {agent_file}:answer", field, str(agent_file) + message)


SCORERS_MODULE = """
from agenteval.scorers import scorer


@scorer(requires=("expected_output",))
def strict(case, trial):
    return case.expected_output in trial.reply
"""


@pytest.mark.parametrize(
    ("option", "value"), [("--scorer", "my_scorers:strict"), ("--agent", "my_scorers:strict")], ids=["scorer", "agent"]
)
def test_a_module_in_the_current_folder_is_not_imported_and_the_error_says_how(tmp_path, option, value):
    """The scoring guide's `--scorer my_scorers:strict_capital`, with my_scorers.py beside the reader: the command's
    Python path holds no current folder (`python -P`, as the `agenteval` script runs), and the error said only
    "No module named 'my_scorers'". Following what it says now works."""
    (tmp_path / "my_scorers.py").write_text(SCORERS_MODULE)
    arguments = ["run", "--dataset", "arithmetic", "--cases", "2", "--attempts", "1", "-q"]
    arguments += ["--agent", "mock", option, value] if option == "--scorer" else [option, value]
    command = [sys.executable, "-P", "-m", "agenteval.cli", *arguments]
    env = {**os.environ, "AGENTEVAL_STORE": str(tmp_path / "store")}
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    one_line_error(done, 2 if option == "--scorer" else 1, f"{option} {value}", "PYTHONPATH=. for the current one")
    if option == "--agent":
        assert "or name its file (my_scorers.py:strict)" in done.stderr
        return
    env["PYTHONPATH"] = os.pathsep.join([".", env.get("PYTHONPATH", "")])
    done = subprocess.run(command, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert done.returncode == 0, done.stderr


def test_a_module_missing_inside_the_named_one_gets_no_such_advice(tmp_path):
    (tmp_path / "my_scorers.py").write_text("import not_a_module_anywhere\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), os.environ.get("PYTHONPATH", "")])}
    done = subprocess.run(
        [sys.executable, "-P", "-m", "agenteval.cli", "run", "-d", "arithmetic", "--cases", "2", "-a", "mock"]
        + ["--scorer", "my_scorers:strict", "--store", str(tmp_path / "store")],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    one_line_error(done, 2, "No module named 'not_a_module_anywhere'")
    assert "PYTHONPATH" not in done.stderr


def test_debug_shows_the_traceback(tmp_path):
    agent_file = tmp_path / "broken_agent.py"
    agent_file.write_text("raise RuntimeError('no config')\n")
    done = agenteval(
        "--debug", "run", "--dataset", "arithmetic", "--cases", "2", "--agent", f"{agent_file}:answer", store=tmp_path
    )
    assert done.returncode == 1 and "Traceback" in done.stderr and "AgentLoadError" in done.stderr


def test_json_lines_that_cannot_be_read_as_meant_are_refused_with_line_and_field(tmp_path):
    path = tmp_path / "cases.jsonl"
    deep = '{"input": "x", "expected_output": "1", "metadata": ' + "[" * 100_000 + "]" * 100_000 + "}"
    path.write_text(
        '{"input": "What is 1 + 1?", "expected_output": "2"}\n'
        '{"input": "a", "expected_output": "1", "input": "b"}\n'
        '{"input": "a", "turns": ["hello"], "expected_output": "1"}\n' + deep + "\n",
        encoding="utf-8",
    )
    with pytest.raises(DatasetError) as info:
        load_file(path)
    assert [(p.line, p.field) for p in info.value.problems] == [(2, "input"), (3, "input"), (4, None)]
    messages = [p.message for p in info.value.problems]
    assert "given twice" in messages[0] and "not both" in messages[1] and "nested too deeply" in messages[2]
    # The same file through `run`: one line per problem, no traceback.
    done = agenteval("run", "--dataset", str(path), "--agent", "mock", store=tmp_path / "store")
    assert done.returncode == 1 and "Traceback" not in done.stderr and "nested too deeply" in done.stderr


def test_a_dataset_path_that_is_a_folder_says_so(tmp_path):
    done = agenteval("run", "--dataset", str(tmp_path), "--agent", "mock", store=tmp_path / "store")
    assert done.returncode == 1 and "Traceback" not in done.stderr
    assert "is a folder; give the path of a JSONL file" in done.stderr


def test_options_that_cannot_work_are_usage_errors(tmp_path):
    nan = agenteval("run", "--dataset", "arithmetic", "--agent", "mock", "--timeout", "nan", store=tmp_path)
    one_line_error(nan, 2, "--timeout must be a positive number of seconds, not nan")
    huge = agenteval("run", "--dataset", "arithmetic", "--agent", "mock", "--cases", "100000000000", store=tmp_path)
    one_line_error(huge, 2, "--cases must be between 1 and 1,000,000")
    assert not (tmp_path / "experiments").exists()  # refused before anything was written


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["run", "-d", "arithmetic", "--agent", "mock", "--scorer", "no_such_scorer"], "--scorer 'no_such_scorer'"),
        (["run", "-d", "arithmetic", "--agent", "no_colon_here"], "--agent 'no_colon_here': expected mock"),
        (["run", "-d", "arithmetic", "--agent", "mock", "--agent-option", "bogus=1"], "unknown mock agent option"),
        (["run", "-d", "arithmetic", "--agent", "mock", "--prices", "bad.json"], "--prices bad.json"),
        (["power", "--pass-rate", "2"], "--pass-rate"),
        (["sql", "SELECT 1", "--format", "yaml"], "yaml"),
    ],
    ids=["scorer", "agent", "agent-option", "prices", "power", "format"],
)
def test_every_option_that_cannot_work_exits_2_with_one_line(tmp_path, args, message):
    (tmp_path / "bad.json").write_text('{"models": {"m": {"input": 1}}}')
    done = agenteval(*args, store=tmp_path, cwd=tmp_path)
    one_line_error(done, 2, message)


@pytest.mark.parametrize(
    ("price", "shown"),
    [("null", "None"), ('"cheap"', "'cheap'"), ("NaN", "nan"), ("-5", "-5"), ("true", "True")],
    ids=["null", "text", "nan", "negative", "boolean"],
)
def test_a_price_that_is_not_a_finite_non_negative_number_is_one_line_naming_the_model(tmp_path, price, shown):
    # A NaN price printed "cost $nan" and made `report --format json` write NaN, which is not JSON; a negative one
    # a negative cost; null a traceback.
    (tmp_path / "prices.json").write_text(f'{{"models": {{"mock-model": {{"input": {price}, "output": 1}}}}}}')
    run = ["run", "-d", "arithmetic", "--cases", "2", "--agent", "mock", "--prices", "prices.json"]
    done = agenteval(*run, store=tmp_path, cwd=tmp_path)
    one_line_error(done, 2, "--prices prices.json: 'mock-model' input", f"not {shown}")
    assert not (tmp_path / "experiments").exists()


def _address_space_capped() -> None:
    """Run in the child: past 3 GB an allocation is a MemoryError, so a file read without end fails the test rather
    than the machine."""
    resource.setrlimit(resource.RLIMIT_AS, (3 * 1024**3, 3 * 1024**3))


ENDLESS = "a character device, not a regular file"


@pytest.mark.parametrize(
    ("args", "code", "message"),
    [
        (["validate", "endless.jsonl"], 1, f"endless.jsonl: {ENDLESS}; give the path of a JSONL file"),
        (["audit", "endless.jsonl"], 1, f"endless.jsonl: {ENDLESS}; give the path of a JSONL file"),
        (["run", "-d", "endless.jsonl", "--agent", "mock"], 1, f"endless.jsonl: {ENDLESS}"),
        (["run", "-d", "arithmetic", "-a", "mock", "--prices", "endless.json"], 2, f"--prices endless.json: {ENDLESS}"),
        (["judge-check", "endless.jsonl", "--judge", "openai/j", "--judge-base-url", "http://127.0.0.1:9"], 1, ENDLESS),
    ],
    ids=["validate", "audit", "run", "prices", "judge-check"],
)
def test_a_file_that_never_ends_is_refused_before_it_is_read(tmp_path, args, code, message):
    """A dataset, labels or prices file that is a link to /dev/zero is one line without end: read by lines or whole,
    it grew until the process was killed (here, a MemoryError traceback). Now it is refused by what it is."""
    for name in ("endless.jsonl", "endless.json"):
        os.symlink("/dev/zero", tmp_path / name)
    env = {**os.environ, "AGENTEVAL_STORE": str(tmp_path / "store")}
    done = subprocess.run(
        [sys.executable, "-m", "agenteval.cli", *args],
        capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120, preexec_fn=_address_space_capped,
    )  # fmt: skip
    assert done.returncode == code, (done.returncode, done.stderr[-2000:])
    assert "Traceback" not in done.stderr and message in done.stdout + done.stderr
    assert not (tmp_path / "store").exists()


def test_a_prices_file_that_is_not_utf8_is_one_line_naming_it(tmp_path):
    # Read with read_text, bytes that are not UTF-8 raised UnicodeDecodeError: a traceback.
    (tmp_path / "prices.json").write_bytes(b'{"models": {"mock-model": {"input": 1, "output": 2}}, "note": "\xe9"}')
    run = ["run", "-d", "arithmetic", "--cases", "2", "--agent", "mock", "--prices", "prices.json"]
    done = agenteval(*run, store=tmp_path / "store", cwd=tmp_path)
    one_line_error(done, 2, "--prices prices.json: not valid UTF-8 at byte 64; save the file as UTF-8")


def test_an_empty_dataset_is_refused_and_a_large_sample_is_said_out_loud(tmp_path):
    empty = tmp_path / "empty.jsonl"
    empty.write_text("\n")
    done = agenteval("run", "--dataset", str(empty), "--agent", "mock", store=tmp_path / "store")
    one_line_error(done, 1, "has no cases: nothing to run")
    sampled = agenteval(
        "run",
        "--dataset",
        "arithmetic",
        "--cases",
        "8",
        "--sample",
        "100",
        "--agent",
        "mock",
        "--attempts",
        "1",
        store=tmp_path / "store",
    )
    assert sampled.returncode == 0, sampled.stderr
    assert "warning: --sample 100 asks for at least as many cases as the dataset arithmetic has (8)" in sampled.stderr


def test_cases_with_a_dataset_file_is_refused_and_points_to_sample(tmp_path):
    # --cases sizes the generated dataset only; `hard` once ran all 55 cases when 20 were asked for.
    done = agenteval("run", "--dataset", "hard", "--cases", "20", "--agent", "mock", store=tmp_path / "store")
    one_line_error(done, 2, "--cases sets the size of the generated arithmetic dataset")
    assert "--sample N" in done.stderr


def _closed_port() -> int:
    import socket

    with socket.socket() as sock:  # bound, then closed: nothing listens there
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.parametrize("credentials", [False, True], ids=["no-credentials", "unreachable-endpoint"])
@pytest.mark.parametrize("args", [["report"], ["sql", "SELECT 1"], ["compact"]], ids=["report", "sql", "compact"])
def test_a_store_on_object_storage_that_cannot_be_reached_is_one_line(tmp_path, credentials, args):
    """Without credentials, or with an endpoint where no server answers, every command ended in botocore's
    traceback (NoCredentialsError, EndpointConnectionError)."""
    pytest.importorskip("s3fs")
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("AWS_")},
        "AWS_ENDPOINT_URL": f"http://127.0.0.1:{_closed_port()}",
        "AWS_MAX_ATTEMPTS": "1",
        "AWS_EC2_METADATA_DISABLED": "true",
        "AWS_CONFIG_FILE": str(tmp_path / "none"),
        "AWS_SHARED_CREDENTIALS_FILE": str(tmp_path / "none"),
        **({"AWS_ACCESS_KEY_ID": "AKIAEXAMPLE", "AWS_SECRET_ACCESS_KEY": "secret-never-shown"} if credentials else {}),
    }
    done = subprocess.run(
        [sys.executable, "-m", "agenteval.cli", *args, "--store", "s3://evals/team"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
    )
    wanted = "EndpointConnectionError" if credentials else "NoCredentialsError"
    one_line_error(done, 1, "the store on object storage cannot be used", wanted, "AWS_ENDPOINT_URL")
    assert "secret-never-shown" not in done.stderr + done.stdout


def test_a_store_url_without_a_bucket_is_one_line():
    one_line_error(agenteval("report", "--store", "s3://"), 1, "'s3://' names no bucket")


def test_a_reader_that_stops_early_is_no_error(tmp_path):
    # `agenteval sql ... | head -1` printed "Error: [Errno 32] Broken pipe": the reader took what it wanted,
    # which is nothing to report. The command stops quietly instead (exit 1, as Python advises for a closed pipe).
    from agenteval.run import evaluate

    store = tmp_path / "s"
    evaluate("mock", "arithmetic", cases=2, attempts=1, store=store, progress="none")
    command = [sys.executable, "-m", "agenteval.cli", "sql", "SELECT * FROM range(3000000)", "--format", "csv"]
    env = {**os.environ, "AGENTEVAL_STORE": str(store)}
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env) as reading:
        assert reading.stdout.readline() == b"range\n"
        reading.stdout.close()  # as `head -1` does once it has its line
        errors = reading.stderr.read().decode()
        code = reading.wait(timeout=120)
    assert errors == "" and code == 1, (code, errors)


def test_the_python_api_says_which_argument_is_not_a_number_and_which_experiment_is_missing(tmp_path):
    """From Python, ``evaluate(attempts="3")`` or ``attempts=2.5`` ended in a TypeError deep in the run, and
    ``attempts=True`` ran one attempt; ``build_report`` and ``rescore`` of a mistyped id raised a
    plain ValueError. Each is now an AgentevalError naming the argument or the experiment, and nothing is written."""
    import numpy as np

    from agenteval.analysis import build_report
    from agenteval.run import evaluate
    from agenteval.scorers import rescore
    from agenteval.store import Store

    store = tmp_path / "s"
    for argument, value, wanted in [
        ("attempts", "3", "--attempts (attempts=) must be a whole number, not '3'"),
        ("attempts", True, "--attempts (attempts=) must be a whole number, not True"),
        ("attempts", 2.5, "--attempts (attempts=) must be a whole number, not 2.5"),
        ("concurrency", float("nan"), "--concurrency (concurrency=) must be a whole number, not nan"),
        ("timeout", "5", "--timeout (timeout=) must be a number, not '5'"),
    ]:
        with pytest.raises(UsageError) as refused:
            evaluate("mock", "arithmetic", cases=2, store=store, progress="none", **{argument: value})
        assert str(refused.value) == wanted
    assert not store.exists()
    ran = evaluate("mock", "arithmetic", cases=2, attempts=np.int64(2), timeout=np.float32(30), store=store)
    assert ran.summary.trials == 4 and ran.options["attempts"] == 2 and ran.options["timeout"] == 30.0
    for call in (lambda: build_report(Store(store), "nope"), lambda: rescore(Store(store), "nope")):
        with pytest.raises(AgentevalError, match="no experiment 'nope' in "):
            call()


@pytest.mark.parametrize(
    ("args", "option", "value"),
    [
        (["power", "--json", "--alpha"], "--alpha", "٠.٠٥"),  # Arabic-Indic 0.05: FloatRange
        (["power", "--json", "--cases"], "--cases", "５５"),  # full-width 55: IntRange
        (["sql", "SELECT 1", "--memory-limit"], "--memory-limit", "٣GB"),  # a size
        (["generate", "doc.txt", "-o", "c.jsonl", "--corpus-out", "k.jsonl", "--seed"], "--seed", "٧"),  # INT
    ],
    ids=["float-range", "int-range", "size", "int"],
)
def test_a_number_in_other_digits_is_refused_naming_the_option(tmp_path, monkeypatch, args, option, value):
    """Python's float() and int() read any script's digits, so `--alpha ٣` was 3.0 and `--memory-limit ٣GB` 3GB:
    a look-alike pasted from elsewhere was taken as a figure nobody meant."""
    from click.testing import CliRunner

    from agenteval.cli import main

    monkeypatch.chdir(tmp_path)
    (tmp_path / "doc.txt").write_text("a passage")
    result = CliRunner().invoke(main, [*args, value])
    assert result.exit_code == 2, result.output
    assert result.output.strip().splitlines()[-1] == (
        f"Error: Invalid value for '{option}': {value!r} is not a number written with the digits 0-9"
    )
    assert sorted(p.name for p in tmp_path.iterdir()) == ["doc.txt"]


@pytest.mark.parametrize(
    ("args", "option"), [(["prune", "--older-than"], "--older-than"), (["report", "--traces", "--since"], "--since")]
)
def test_an_age_in_other_digits_is_refused_naming_the_option(tmp_path, args, option):
    done = agenteval(*args, "٣d", store=tmp_path)
    one_line_error(done, 2, f"{option} '٣d': give ")


def test_every_number_option_refuses_other_digits():
    """Each number option's type is one of the CLI's own, which refuse other scripts' digits; one declared with
    click's own (type=float, click.IntRange) would take them again."""
    import click

    from agenteval.cli import AsciiNumber, main

    def commands(group: click.Group):
        for command in group.commands.values():
            yield command
            if isinstance(command, click.Group):
                yield from commands(command)

    numbers = [
        (f"{command.name} {param.name}", param.type)
        for command in commands(main)
        for param in command.params
        if isinstance(param.type, click.types._NumberParamTypeBase)
    ]
    assert len(numbers) > 20
    assert [name for name, kind in numbers if not isinstance(kind, AsciiNumber)] == []
