"""A dataset's card: who keeps it and when its cases were last reviewed, so that a review falls due."""

from __future__ import annotations

import datetime
import fcntl
import json
import os
import subprocess
import sys

import pytest
from click.testing import CliRunner

from agenteval.cli import main
from agenteval.dataset import DatasetCard, card_path, load_dataset, read_card, review_dataset
from agenteval.dataset._card import REVIEW_EVERY_DAYS, card_record
from agenteval.errors import UsageError

CASES = '{"id": "a", "input": "What is 2 + 2?", "expected_output": "4"}\n'
TODAY = datetime.date.today()


def cli(*args: str):
    return CliRunner().invoke(main, list(args), env={"COLUMNS": "400"})


def shown(result) -> str:
    return " ".join(result.output.split())


@pytest.fixture
def cases(tmp_path):
    path = tmp_path / "support.jsonl"
    path.write_text(CASES)
    return path


def write_card(cases, **fields):
    record = {"owner": "evals team", "created": "2026-01-05", "last_reviewed": "2026-01-05", **fields}
    card_path(cases).write_text(json.dumps(record))


def test_the_first_review_makes_the_card_and_a_change_to_the_cases_makes_the_next_one_a_new_version(cases):
    assert cli("review", str(cases), "--check").exit_code == 1  # no card yet: never reviewed
    done = cli("review", str(cases), "--owner", "evals team")
    assert done.exit_code == 0, done.output
    card = read_card(cases)
    assert card == DatasetCard(
        owner="evals team",
        created=TODAY,
        last_reviewed=TODAY,
        version=1,
        review_every_days=REVIEW_EVERY_DAYS,
        reviewed_sha256=load_dataset(str(cases)).hash,
    )
    assert cli("review", str(cases), "--check").exit_code == 0

    with cases.open("a") as handle:
        handle.write('{"id": "b", "input": "What is 3 + 3?", "expected_output": "6"}\n')
    check = cli("review", str(cases), "--check")
    assert check.exit_code == 1
    assert "the cases changed since the last review" in shown(check)

    assert cli("review", str(cases)).exit_code == 0  # the owner is kept
    again = read_card(cases)
    assert (again.version, again.owner, again.reviewed_sha256) == (2, "evals team", load_dataset(str(cases)).hash)
    assert cli("review", str(cases)).exit_code == 0  # reviewed again, unchanged: the same version
    assert read_card(cases).version == 2


def test_a_review_falls_due_after_its_interval_and_not_on_its_last_day(cases):
    card = DatasetCard(owner="o", created=TODAY, last_reviewed=TODAY)
    assert not card.needs_review(TODAY + datetime.timedelta(days=REVIEW_EVERY_DAYS))
    assert card.needs_review(TODAY + datetime.timedelta(days=REVIEW_EVERY_DAYS + 1))

    long_ago = (TODAY - datetime.timedelta(days=100)).isoformat()
    write_card(cases, created=long_ago, last_reviewed=long_ago)
    check = cli("review", str(cases), "--check")
    assert check.exit_code == 1
    assert f"last reviewed 100 days ago ({long_ago}), and it is reviewed every 90 days" in shown(check)
    # A card written by hand does not say which cases were reviewed: only the date can make a review due.
    status = json.loads(cli("review", str(cases), "--check", "--json").output)
    assert (status["due"], status["changed_since_review"], status["current"]) == (True, None, False)

    audited = shown(cli("audit", str(cases)))
    assert "Card: kept by evals team, version 1" in audited
    assert f"Review due: last reviewed 100 days ago ({long_ago})" in audited
    assert f"agenteval review {cases}" in audited
    assert json.loads(cli("audit", str(cases), "--json").output)["review"]["days_since_review"] == 100

    write_card(cases, created=long_ago, last_reviewed=long_ago, review_every_days=365)
    assert cli("review", str(cases), "--check").exit_code == 0


def test_a_bad_card_is_named_field_by_field_and_never_written_over(cases):
    bad = {"owner": "", "created": "last spring", "last_reviewed": "2999-01-01", "version": 0, "notes": "x"}
    card_path(cases).write_text(json.dumps(bad))
    before = card_path(cases).read_text()

    validated = cli("validate", str(cases))
    assert validated.exit_code == 1
    said = validated.output
    card = str(card_path(cases))
    assert f"{card}: notes: unknown field" in said
    assert f"{card}: owner: must be a non-empty string" in said
    assert f'{card}: created: "last spring" is not a date; write it as YYYY-MM-DD' in said
    assert f"{card}: last_reviewed: 2999-01-01 is after today" in said
    assert f"{card}: version: must be a whole number from 1 to 1,000,000" in said
    assert f"{card}: 5 problems" in said

    refused = cli("review", str(cases), "--owner", "someone")
    assert refused.exit_code == 1
    assert "notes: unknown field" in refused.output
    assert card_path(cases).read_text() == before
    assert "notes: unknown field" in cli("audit", str(cases)).output

    card_path(cases).write_text("{not json")
    assert f"{card}:1: invalid JSON at column 2" in cli("validate", str(cases)).output


def test_a_first_review_needs_an_owner_and_the_cases_must_be_valid(cases, tmp_path):
    with pytest.raises(UsageError, match="give --owner"):
        review_dataset(cases)
    assert not card_path(cases).exists()
    no_owner = cli("review", str(cases))
    assert no_owner.exit_code == 2
    assert "has no card yet" in no_owner.output

    broken = tmp_path / "broken.jsonl"
    broken.write_text('{"input": "no expected output"}\n')
    refused = cli("review", str(broken), "--owner", "o")
    assert refused.exit_code == 1
    assert "broken.jsonl:1: expected_output" in refused.output
    assert not card_path(broken).exists()


def test_audit_of_a_file_without_a_card_says_how_to_make_one_and_a_builtin_has_none(cases):
    audited = shown(cli("audit", str(cases)))
    assert f"No card ({card_path(cases)}): agenteval review {cases} --owner NAME" in audited
    assert json.loads(cli("audit", str(cases), "--json").output)["review"] is None
    builtin = cli("audit", "hard")
    assert "card" not in builtin.output.lower()
    assert json.loads(cli("audit", "hard", "--json").output)["card"] is None


def test_an_owner_holding_control_characters_is_shown_escaped(cases):
    assert cli("review", str(cases), "--owner", "evil\x1b[2Jteam").exit_code == 0
    for result in (cli("review", str(cases), "--check"), cli("audit", str(cases))):
        assert "\x1b" not in result.output
        assert "evil\\x1b[2Jteam" in result.output


def test_the_card_sits_beside_the_cases_named_after_them(tmp_path):
    assert card_path(tmp_path / "support.jsonl") == tmp_path / "support.card.json"
    assert card_path(tmp_path / "v1.cases.jsonl") == tmp_path / "v1.cases.card.json"
    assert card_path(tmp_path / "cases") == tmp_path / "cases.card.json"


def test_a_run_records_its_datasets_card_and_the_report_says_where_its_review_stood(cases, tmp_path):
    from agenteval.analysis import build_report
    from agenteval.render import to_json, to_markdown
    from agenteval.run import evaluate
    from agenteval.store import Store

    store = Store(tmp_path / "store")
    assert cli("review", str(cases), "--owner", "evals team").exit_code == 0
    reviewed = evaluate("mock", str(cases), attempts=1, store=store, progress="none")
    with cases.open("a") as handle:
        handle.write('{"id": "b", "input": "What is 3 + 3?", "expected_output": "6"}\n')
    changed = evaluate("mock", str(cases), attempts=1, store=store, progress="none")

    first = build_report(store, reviewed.experiment_id)
    assert first.experiment.dataset_card == {
        "version": 1,
        "owner": "evals team",
        "last_reviewed": TODAY.isoformat(),
        "review_due": False,
        "changed_since_review": False,
    }
    said = to_markdown(first)
    assert f"card version 1, reviewed {TODAY.isoformat()})" in said
    later = to_markdown(build_report(store, changed.experiment_id))
    assert f"card version 1, reviewed {TODAY.isoformat()}, its cases changed since)" in later
    assert json.loads(to_json(first))["experiment"]["dataset_card"]["version"] == 1

    # A card that cannot be read stops no run: it is warned of and not recorded.
    card_path(cases).write_text('{"owner": ""}')
    with pytest.warns(UserWarning, match="the dataset's card is not recorded with the experiment: .*owner"):
        unread = evaluate("mock", str(cases), attempts=1, store=store, progress="none")
    assert unread.status == "completed"
    assert build_report(store, unread.experiment_id).experiment.dataset_card is None


@pytest.mark.parametrize(
    ("tail", "said"),
    [
        ('"owner": "someone else"', "owner: is given twice in one object; JSON keeps only the last, so say it once"),
        ('"metadata": {"x": NaN}', "metadata.x: NaN is not a number JSON allows"),
        ('"metadata": {"x": 1e999}', "metadata.x: 1e999 is not a number JSON allows"),
        ('"version": ' + "1" * 5000, "a whole number of more than 4,300 digits, more than Python reads"),
        ('"metadata": ' + "[" * 5000 + "]" * 5000, "JSON nested too deeply (more than 100 levels)"),
        ('"metadata": {"m": ' + "[" * 150 + "]" * 150 + "}", "metadata: JSON nested too deeply (more than 100"),
    ],
)
def test_a_card_is_read_as_strictly_as_a_case_line(cases, tail, said):
    """The case format refuses a key given twice, NaN, infinities, integers Python cannot read and deep nesting;
    the card took the last of two owners silently, carried NaN into the card it wrote back (JSON strict readers
    refuse), and ended validate in a traceback for the rest. Found by a hostile check of cards."""
    card_path(cases).write_text(
        '{"owner": "evals team", "created": "2026-01-05", "last_reviewed": "2026-01-05", ' + tail + "}"
    )
    before = card_path(cases).read_text()
    for command in ("validate", "review"):
        done = cli(command, str(cases))
        assert done.exit_code == 1 and isinstance(done.exception, SystemExit), (command, done.exception)
        assert f"{card_path(cases)}: {said}" in done.output, done.output
    assert card_path(cases).read_text() == before


@pytest.fixture
def machine_far_behind(monkeypatch):
    """The machine's clock in UTC-12, the last zone to reach a date: elsewhere it is always a day or two later."""
    import time

    monkeypatch.setenv("TZ", "Etc/GMT+12")
    time.tzset()
    yield datetime.date.today()
    monkeypatch.undo()
    time.tzset()


def test_a_card_reviewed_today_where_the_date_is_already_tomorrow_is_not_refused_as_in_the_future(
    cases, machine_far_behind
):
    """A colleague in Auckland reviews the dataset on their today, the machine's tomorrow: the card was refused as
    "after today", so validate, audit and review all failed and runs recorded no card. Dates are calendar days as
    written; a date is in the future only once no place on Earth has reached it. Found by a hostile check of
    cards."""
    today = machine_far_behind
    ahead = (today + datetime.timedelta(days=1)).isoformat()
    write_card(cases, created=ahead, last_reviewed=ahead)
    assert cli("validate", str(cases)).exit_code == 0
    status = json.loads(cli("review", str(cases), "--check", "--json").output)
    assert (status["days_since_review"], status["due"]) == (0, False)  # reviewed today, not -1 days ago
    assert "reviewed every 90 days" in shown(cli("audit", str(cases)))

    beyond = (today + datetime.timedelta(days=3)).isoformat()  # no zone is 3 days ahead of UTC-12
    write_card(cases, created=beyond, last_reviewed=beyond)
    refused = cli("validate", str(cases))
    assert refused.exit_code == 1
    assert f"created: {beyond} is after today everywhere on Earth; write the day it happened" in refused.output


@pytest.mark.parametrize("written", ["20260105", "2026-W02-1", "2026-01-05 ", "+2026-01-05"])
def test_a_card_date_is_written_as_the_docs_say(cases, written):
    """The docs say YYYY-MM-DD (a date and time is taken at the date it names), but Python read "20260105" and the
    ISO week date "2026-W02-1" as dates too, which no other reader of the card would: found by a hostile check."""
    write_card(cases, created=written)
    refused = cli("validate", str(cases))
    assert refused.exit_code == 1
    assert f"created: {json.dumps(written)} is not a date; write it as YYYY-MM-DD" in refused.output


def test_a_date_and_time_in_another_zone_is_taken_at_the_date_it_names(cases):
    write_card(cases, created="2026-01-05T23:30:00-12:00", last_reviewed="2026-01-06T00:30:00+14:00")
    card = read_card(cases)
    assert (card.created, card.last_reviewed) == (datetime.date(2026, 1, 5), datetime.date(2026, 1, 6))


def test_a_check_of_a_file_that_is_not_there_says_so_and_a_builtin_name_is_told_it_has_no_card(tmp_path, monkeypatch):
    """`review --check missing.jsonl` said "no card: record the first review with agenteval review missing.jsonl
    --owner NAME", advice that then failed with "no such file"; `review hard` said "hard: no such file" and
    `review hard --check` gave the same wrong advice. Found by a hostile check of cards."""
    monkeypatch.chdir(tmp_path)
    for args in (["missing.jsonl", "--check"], ["missing.jsonl", "--owner", "o"]):
        done = cli("review", *args)
        assert done.exit_code == 1 and "missing.jsonl: no such file" in done.output, done.output
        assert "--owner NAME" not in done.output
    for args in (["hard", "--check"], ["hard", "--owner", "o"], ["hard", "--check", "--json"]):
        done = cli("review", *args)
        assert done.exit_code == 2, done.output
        assert "hard is a built-in dataset: built-in datasets have no card" in shown(done), done.output
    assert list(tmp_path.iterdir()) == []


def test_a_builtin_datasets_own_file_is_not_reviewed_and_runs_of_it_record_no_card(tmp_path):
    """Audit said a built-in has no card, but `review` of the built-in's file wrote one into agenteval's own
    folder, and runs of it would have recorded it: one rule for all three now."""
    from agenteval.dataset._catalog import datasets_dir

    builtin = datasets_dir() / "hard.jsonl"
    assert not card_path(builtin).exists()
    try:
        done = cli("review", str(builtin), "--owner", "o")
        assert done.exit_code == 2 and "is a built-in dataset" in shown(done), done.output
        assert not card_path(builtin).exists()
    finally:  # before the fix, the review wrote it into the checkout
        card_path(builtin).unlink(missing_ok=True)
    assert card_record(load_dataset("hard")) is None


JSON_KEYS = [
    "owner",
    "description",
    "created",
    "last_reviewed",
    "version",
    "review_every_days",
    "reviewed_sha256",
    "metadata",
    "days_since_review",
    "due",
    "changed_since_review",
    "current",
    "reasons",
]


def test_the_json_of_a_review_has_the_same_keys_whatever_the_card_holds(cases):
    """`description` and `metadata` were left out of review --json and audit --json when the card had none, so a
    script reading status["description"] failed on some cards only. Found by a hostile check of cards."""
    plain = json.loads(cli("review", str(cases), "--owner", "o", "--json").output)
    assert list(plain) == JSON_KEYS and (plain["description"], plain["metadata"]) == ("", {})
    assert list(json.loads(cli("review", str(cases), "--check", "--json").output)) == JSON_KEYS
    assert list(json.loads(cli("audit", str(cases), "--json").output)["review"]) == JSON_KEYS
    assert "description" not in json.loads(card_path(cases).read_text())  # the card itself holds what it has
    write_card(cases, description="support questions", metadata={"team": "x"})
    assert list(json.loads(cli("review", str(cases), "--check", "--json").output)) == JSON_KEYS


def test_a_card_that_cannot_be_opened_is_one_line_and_stops_no_run(cases, tmp_path):
    """A card that is a link to itself (ELOOP) was a traceback from validate, audit and review, and stopped a run."""
    from agenteval.run import evaluate
    from agenteval.store import Store

    card_path(cases).symlink_to(card_path(cases).name)
    said = cli("validate", str(cases))
    assert said.exit_code == 1 and "cannot be read as a card (Too many levels of symbolic links)" in said.output
    assert "Traceback" not in said.output and "Traceback" not in cli("audit", str(cases)).output
    with pytest.warns(UserWarning, match="cannot be read as a card"):
        done = evaluate("mock", str(cases), attempts=1, store=Store(tmp_path / "store"), progress="none")
    assert done.status == "completed"


def test_a_blank_owner_is_refused_as_blank_not_as_missing(cases):
    said = cli("review", str(cases), "--owner", "  ")
    assert said.exit_code == 2 and "--owner: must not be empty" in said.output
    assert not card_path(cases).exists()


def test_a_review_from_a_date_behind_the_last_ones_never_dates_the_card_back(cases):
    """A card made where the date is already tomorrow, then reviewed where it is still today: the review was dated
    before the card's creation, a card that validate then refused."""
    write_card(cases, created=TODAY.isoformat(), last_reviewed=TODAY.isoformat())
    reviewed = review_dataset(cases, today=TODAY - datetime.timedelta(days=1))  # the reviewer a day behind
    assert reviewed.last_reviewed == TODAY
    assert cli("validate", str(cases)).exit_code == 0


PAUSE_BEFORE_WRITING = """\
import os

if "REVIEW_PAUSE_FDS" in os.environ:  # a review that says when it is about to write its card, and waits to be told to
    import agenteval.dataset._card as card

    said, told = (int(fd) for fd in os.environ["REVIEW_PAUSE_FDS"].split(","))
    write = card.write_text

    def paused(*args, **kwargs):
        os.write(said, b"w")
        os.read(told, 1)  # a byte, or the test's end closed
        return write(*args, **kwargs)

    card.write_text = paused
"""


def review_process(cases, tmp_path, *args: str, pause: tuple[int, int] | None = None) -> subprocess.Popen:
    """``agenteval review`` as a process of its own; with ``pause`` (the write end of one pipe, the read end of
    another), it says on the first when it has read the card and is about to write it, and waits for a byte on the
    second (a sitecustomize in ``tmp_path`` wraps the card's writer: the review's own code runs)."""
    (tmp_path / "sitecustomize.py").write_text(PAUSE_BEFORE_WRITING)
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), *sys.path])}
    if pause is not None:
        env["REVIEW_PAUSE_FDS"] = ",".join(map(str, pause))
    return subprocess.Popen(
        [sys.executable, "-m", "agenteval", "review", str(cases), *args],
        env=env,
        pass_fds=pause or (),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def finished(process: subprocess.Popen) -> None:
    out, err = process.communicate()
    assert process.returncode == 0, err


def test_a_review_holds_the_dataset_locked_from_reading_the_card_to_writing_it(cases, tmp_path):
    # Two reviews at once each read the card and wrote back their change: the second's write lost the first's.
    assert cli("review", str(cases), "--owner", "evals team").exit_code == 0
    with cases.open("a") as handle:
        handle.write('{"id": "b", "input": "What is 3 + 3?", "expected_output": "6"}\n')
    said_r, said_w = os.pipe()
    told_r, told_w = os.pipe()
    first = review_process(cases, tmp_path, "--owner", "support team", pause=(said_w, told_r))
    os.close(said_w)
    os.close(told_r)
    try:
        assert os.read(said_r, 1) == b"w"  # the card read and changed, not yet written back
        with open(cases, "rb") as dataset:  # read-only, as a review opens it
            with pytest.raises(BlockingIOError):
                fcntl.flock(dataset, fcntl.LOCK_EX | fcntl.LOCK_NB)
        second = review_process(cases, tmp_path, "--description", "questions support gets")
    finally:
        os.close(told_w)  # the paused review goes on (a read at the end of a pipe), whatever happened here
        os.close(said_r)
    with open(cases, "rb") as dataset:
        finished(first)
        finished(second)
        fcntl.flock(dataset, fcntl.LOCK_EX | fcntl.LOCK_NB)  # both done: nothing holds it
    card = read_card(cases)
    assert (card.owner, card.description, card.version) == ("support team", "questions support gets", 2)


def test_a_review_waits_for_the_lock_and_then_reads_the_card_as_it_is(cases, tmp_path):
    assert cli("review", str(cases), "--owner", "evals team").exit_code == 0
    with open(cases, "rb") as dataset:
        fcntl.flock(dataset, fcntl.LOCK_EX)  # another review, in the middle of its change
        waiting = review_process(cases, tmp_path, "--owner", "support team")
        assert waiting.stderr is not None
        # It says it waits (a silent wait looks like a hang), and does: the card is changed only after it said so.
        assert "waiting for another review of it to finish" in waiting.stderr.readline()
        record = json.loads(card_path(cases).read_text())
        card_path(cases).write_text(json.dumps({**record, "description": "changed while the lock was held"}))
        fcntl.flock(dataset, fcntl.LOCK_UN)
        finished(waiting)
    card = read_card(cases)
    assert (card.owner, card.description) == ("support team", "changed while the lock was held")


def test_concurrent_reviews_each_keep_their_change(cases, tmp_path):
    assert cli("review", str(cases), "--owner", "evals team").exit_code == 0
    with cases.open("a") as handle:
        handle.write('{"id": "b", "input": "What is 3 + 3?", "expected_output": "6"}\n')
    reviews = [review_process(cases, tmp_path, "--description", f"line {n}") for n in range(4)]
    reviews.append(review_process(cases, tmp_path, "--owner", "support team"))
    for process in reviews:
        finished(process)
    card = read_card(cases)
    # One change of cases since the last review: one new version, however many reviewed it at once.
    assert (card.owner, card.version) == ("support team", 2)
    assert card.description in {f"line {n}" for n in range(4)}


def test_a_linked_datasets_card_sits_beside_the_file_it_links_to_for_every_command_and_run(tmp_path):
    # The card was looked for beside the link: a shared dataset linked into two checkouts had a card in each, so a
    # review by its owner in one was not seen from the other, and runs of the same cases recorded different cards.
    from agenteval.analysis import build_report
    from agenteval.run import evaluate
    from agenteval.store import Store

    shared = tmp_path / "shared" / "support.jsonl"
    shared.parent.mkdir()
    shared.write_text(CASES)
    checkouts = [tmp_path / name / "cases.jsonl" for name in ("one", "two")]
    for link in checkouts:
        link.parent.mkdir()
        link.symlink_to(shared)
    one, two = checkouts
    assert card_path(one) == card_path(two) == shared.parent / "support.card.json"

    done = cli("review", str(one), "--owner", "evals team")
    assert done.exit_code == 0, done.output
    assert f"({shared.parent / 'support.card.json'})" in shown(done)
    assert sorted(p.name for p in shared.parent.iterdir()) == ["support.card.json", "support.jsonl"]
    assert not card_path(one).with_name("cases.card.json").exists()
    assert read_card(two) == read_card(shared)
    assert cli("review", str(two), "--check").exit_code == 0
    assert f"{card_path(shared)}: valid, version 1, kept by evals team" in shown(cli("validate", str(two)))
    assert json.loads(cli("audit", str(two), "--json").output)["review"]["owner"] == "evals team"
    store = Store(tmp_path / "store")
    run = evaluate("mock", str(two), attempts=1, store=store, progress="none")
    assert build_report(store, run.experiment_id).experiment.dataset_card["owner"] == "evals team"


def test_a_card_left_beside_a_link_is_named_with_where_it_belongs(tmp_path):
    shared = tmp_path / "shared.jsonl"
    shared.write_text(CASES)
    link = tmp_path / "checkout" / "cases.jsonl"
    link.parent.mkdir()
    link.symlink_to(shared)
    beside_the_link = link.with_name("cases.card.json")
    beside_the_link.write_text(json.dumps({"owner": "o", "created": "2026-01-05", "last_reviewed": "2026-01-05"}))
    refused = cli("review", str(link))
    assert refused.exit_code == 1
    assert f"{beside_the_link}: a card beside the link" in shown(refused)
    assert f"move it to {tmp_path / 'shared.card.json'}" in shown(refused)
    assert not (tmp_path / "shared.card.json").exists()


def test_a_review_stopped_while_it_waits_for_the_lock_leaves_no_descriptor_open(cases):
    # Found by the review of 73ea46f: a review interrupted while it waited (Ctrl-C in a notebook, an on_wait that
    # raises) left its descriptor of the dataset open, one per interrupted review, for the life of the process.
    class Stopped(Exception):
        pass

    def stop() -> None:
        raise Stopped

    assert cli("review", str(cases), "--owner", "evals team").exit_code == 0
    open_before = sorted(os.listdir("/proc/self/fd"))
    with open(cases, "rb") as dataset:
        fcntl.flock(dataset, fcntl.LOCK_EX)  # another review, in the middle of its change
        with pytest.raises(Stopped):
            review_dataset(cases, on_wait=stop)
    assert sorted(os.listdir("/proc/self/fd")) == open_before
