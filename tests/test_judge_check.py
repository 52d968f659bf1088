"""agenteval judge-check: a judge measured against human verdicts, through the real SDK against a loopback server."""

from __future__ import annotations

import json
import subprocess
import sys

import model_servers as ms
import pytest

from agenteval import evaluate
from agenteval.analysis._stats import cohens_kappa
from agenteval.store import Store


def test_cohens_kappa_of_a_known_table_and_its_bootstrap_interval():
    human = [True, True, False, False] * 5
    judge = [True, False, False, False] * 5
    found = cohens_kappa(human, judge)
    assert found.agreement == 0.75 and found.kappa == pytest.approx(0.5)
    assert found.ci95[0] < 0.5 < found.ci95[1] and "bootstrap" in found.method
    assert cohens_kappa(human, judge) == found  # a fixed seed: the same interval every time
    assert cohens_kappa([True] * 4, [True] * 4).kappa is None  # one verdict throughout: undefined


def judge_server(server):
    """A judge that passes a reply when it states the expected answer."""

    def respond(request):
        prompt = json.dumps(request.messages)
        if "You grade an AI assistant" not in request.system_text():
            return ms.text("Canberra")
        expected = prompt.split("<expected_answer>\\n")[1].split("\\n")[0].split('"')[0]
        reply = prompt.split("<assistant>\\n")[1].split("\\n")[0]
        ok = expected.lower() in reply.lower()
        return ms.tool_call("grade", {"score": float(ok), "passed": ok, "reasoning": f"expected {expected}"})

    server.responder = respond


def test_judge_check_reports_agreement_kappa_and_the_disagreements_shown_safely(model_server, tmp_path):
    judge_server(model_server)
    experiment = evaluate(
        "", "mixed", model="openai/agent", base_url=model_server.openai_url, attempts=1, sample=2, progress="none"
    )
    (trial,) = Store().rows("SELECT trial_id FROM trials WHERE experiment_id = ? LIMIT 1", [experiment.experiment_id])
    case = {"id": "q1", "input": "Capital of Australia?", "expected_output": "Canberra"}
    lines = [
        {"case": case, "reply": "Canberra", "human": "pass"},
        {"case": case, "reply": "Sydney", "human": "fail"},
        {"case": case, "reply": "Canberra, I think", "human": "fail"},  # the judge passes it: a disagreement
        {"case": {**case, "id": "evil\x1b[2J"}, "reply": "Sydney\x1b]0;pwned\x07", "human": "pass"},
        {"trial_id": trial["trial_id"], "human": "fail"},
    ]
    labels = tmp_path / "labels.jsonl"
    labels.write_text("\n".join(json.dumps(line) for line in lines))
    command = [sys.executable, "-m", "agenteval.cli", "judge-check", str(labels), "--judge", "openai/judge"]
    command += ["--judge-base-url", model_server.openai_url]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    out = done.stdout
    assert "5 of 5 labelled items graded" in out and "Cohen's kappa:" in out and "95% CI" in out
    assert "line 3 · case q1: human fail, judge pass" in out
    assert "\x1b" not in out and "\\x1b" in out  # escape codes are shown, never sent raw
    as_json = subprocess.run(command + ["--json"], capture_output=True, text=True, timeout=120)
    result = json.loads(as_json.stdout)
    assert result["graded"] == 5 and {d["line"] for d in result["disagreements"]} >= {3, 4}


def test_a_bad_labels_line_is_one_error_naming_it(tmp_path, model_server):
    labels = tmp_path / "labels.jsonl"
    labels.write_text('{"case": {"id": "a", "input": "x", "expected_output": "y"}, "reply": "y", "human": "maybe"}\n')
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "agenteval.cli",
            "judge-check",
            str(labels),
            "--judge",
            "openai/j",
            "--judge-base-url",
            model_server.openai_url,
        ],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 1 and f"{labels}:1: human must be pass or fail" in done.stderr


def judge_check_on(labels, server, *extra):
    command = [sys.executable, "-m", "agenteval.cli", "judge-check", str(labels), "--judge", "openai/j", *extra]
    return subprocess.run([*command, "--judge-base-url", server.openai_url], capture_output=True, text=True, timeout=60)


def test_labels_are_read_as_datasets_are_and_a_line_that_cannot_be_is_one_error_naming_it(tmp_path, model_server):
    """A labels file in Latin-1 (or any bytes that are not UTF-8) and a line nested thousands deep ended in a
    traceback (UnicodeDecodeError, RecursionError); one saved with a byte order mark was refused as not JSON,
    though the dataset loader reads it."""
    judge_server(model_server)
    item = {"case": {"id": "q1", "input": "Capital of Australia?", "expected_output": "Canberra"}, "reply": "Canberra"}
    labels = tmp_path / "labels.jsonl"
    labels.write_bytes(b"\xef\xbb\xbf" + json.dumps({**item, "human": "pass"}).encode() + b"\r\n")
    done = judge_check_on(labels, model_server)
    assert done.returncode == 0 and "1 of 1 labelled items graded" in done.stdout, done.stderr
    cases = {
        b'{"case": {"id": "q1", "input": "caf\xe9", "expected_output": "x"}, "reply": "y", "human": "pass"}': (
            "not valid UTF-8 at byte 36; save the file as UTF-8"
        ),
        b"[" * 100_000: "JSON nested too deeply; write one flat object a line",
    }
    for data, message in cases.items():
        labels.write_bytes(json.dumps({**item, "human": "fail"}).encode() + b"\n" + data + b"\n")
        done = judge_check_on(labels, model_server)
        assert done.returncode == 1 and done.stderr == f"Error: {labels}:2: {message}\n", done.stderr


def test_a_utf16_labels_file_starting_with_a_blank_line_says_it_is_utf16(tmp_path, model_server):
    """Its NUL bytes begin line 2, past the check of line 1: "not JSON (Expecting value)", saying nothing of why."""
    item = {"case": {"id": "q1", "input": "Capital of Australia?", "expected_output": "Canberra"}, "reply": "Canberra"}
    labels = tmp_path / "labels.jsonl"
    labels.write_bytes(("\n" + json.dumps({**item, "human": "pass"}) + "\n").encode("utf-16-le"))
    done = judge_check_on(labels, model_server)
    assert done.returncode == 1 and done.stderr == (
        f"Error: {labels}:2: the file is UTF-16 or UTF-32 without a byte order mark (it starts with NUL bytes, "
        "which UTF-8 text does not); save it as UTF-8\n"
    ), done.stderr
    assert model_server.requests == []


def test_a_second_verdict_on_the_same_item_is_refused_naming_both_lines(tmp_path, model_server):
    """Two lines labelling one reply (a file concatenated twice, a second rater) were both counted: agreement and
    kappa weighed the item twice, and opposite verdicts made a disagreement no judge could avoid."""
    judge_server(model_server)
    item = {"case": {"id": "q1", "input": "Capital of Australia?", "expected_output": "Canberra"}, "reply": "Canberra"}
    other = {**item, "reply": "Sydney"}
    lines = [{**item, "human": "pass"}, {**other, "human": "fail"}, {**item, "human": "fail"}]
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps(line) + "\n" for line in lines))
    done = judge_check_on(labels, model_server)
    assert done.returncode == 1 and done.stderr == (
        f"Error: {labels}:3: the same case and reply as line 1; keep one human verdict per item\n"
    ), done.stderr
    assert model_server.requests == []


def test_a_judge_whose_api_fails_leaves_those_items_ungraded_and_if_all_one_error_not_a_traceback(
    tmp_path, model_server
):
    """A judge answering 500 (after the client's retries) ended judge-check in an InternalServerError traceback,
    whatever the other items had been graded; the items it failed on are now counted apart, as the docs say, and
    when it graded none, one line says so and what to check."""
    judge_server(model_server)
    graded = model_server.responder

    def failing_on_sydney(request):
        # Retried at once (Retry-After: 0), each try failing as before: what is tested is what judge-check makes of
        # an item the judge failed on, not the backoff between tries (test_models.py), which took 30 s here.
        return ms.server_error(500, retry_after=0) if "Sydney" in json.dumps(request.messages) else graded(request)

    model_server.responder = failing_on_sydney
    case = {"id": "q1", "input": "Capital of Australia?", "expected_output": "Canberra"}
    replies = [("Canberra", "pass"), ("Sydney", "fail"), ("Perth", "fail")]
    labels = tmp_path / "labels.jsonl"
    labels.write_text("".join(json.dumps({"case": case, "reply": r, "human": h}) + "\n" for r, h in replies))
    done = judge_check_on(labels, model_server)
    assert done.returncode == 0, done.stderr
    assert "2 of 3 labelled items graded" in done.stdout and "not graded (line 2): InternalServerError" in done.stdout
    labels.write_text(json.dumps({"case": case, "reply": "Sydney", "human": "fail"}) + "\n")
    done = judge_check_on(labels, model_server)
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    assert done.stderr.startswith(
        f"Error: --judge openai/j: graded none of the 1 labelled items in {labels}; the first: InternalServerError"
    ), done.stderr


def test_a_trial_id_with_no_store_there_says_there_is_no_store(tmp_path, model_server):
    """A mistyped --store said "no trial 'abc' in nostore", sending the user to check an id that was right."""
    labels = tmp_path / "labels.jsonl"
    labels.write_text(json.dumps({"trial_id": "abc", "human": "pass"}) + "\n")
    done = judge_check_on(labels, model_server, "--store", str(tmp_path / "nostore"))
    assert done.returncode == 1 and done.stderr == (
        f"Error: there is no store at {tmp_path / 'nostore'}: check --store (or AGENTEVAL_STORE), or run `agenteval "
        "run` first\n"
    ), done.stderr
