"""agenteval generate: a dataset drafted from documents by a model (the real SDK against a loopback server),
checked deterministically, valid, and runnable with the reference agent and the search tool over its corpus."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading

import model_servers as ms
import pytest

from agenteval import evaluate
from agenteval.dataset import load_dataset, load_file
from agenteval.dataset._generate import (
    MAX_DOCUMENT_BYTES,
    MAX_TOTAL_MB,
    PASSAGE_CHARS,
    answer_check,
    normalised,
    split_passages,
)
from agenteval.store import Store

HANDBOOK = """# Returns

Customers may return unused products within 45 days of delivery. A restocking fee of 12% applies to opened items,
and refunds reach the original payment method within 7 business days.

# Shipping

Standard shipping takes 4 to 6 business days; express shipping costs 19.90 EUR and arrives the next working day
when ordered before 14:00.

# Warranty

Every kettle carries a warranty of 3 years. DROPME: the generator will be made to answer wrongly about this one,
so the deterministic check has something to drop.
"""

NOTES = """The staff canteen opens at 07:30 and closes at 15:00 on weekdays; on Saturdays it serves brunch only.

Parking permits cost 35 EUR a month and are issued by the facilities desk on the second floor of building C.
"""


def write_documents(folder):
    folder.mkdir()
    (folder / "handbook.md").write_text(HANDBOOK)
    (folder / "notes.txt").write_text(NOTES)
    (folder / "scan.pdf").write_bytes(b"%PDF- not text")  # neither .md nor .txt: left alone


def generator(request):
    if "You write evaluation questions" not in request.system_text():
        return ms.text("I don't know.")
    prompt = request.last_user_text()
    passage = prompt.split("):\n", 1)[1]
    if "would answer" in prompt:  # asked for an unanswerable question
        return ms.tool_call(
            "propose", {"question": f"Who wrote the passage starting {passage[:20]!r}?", "answer": "unknown"}
        )
    answer = "a refund of 99 years" if "DROPME" in passage else " ".join(passage.split()[3:6])
    return ms.tool_call("propose", {"question": f"What about: {passage[:40]}?", "answer": answer})


def generate(server, tmp_path, *extra):
    command = [
        sys.executable,
        "-m",
        "agenteval.cli",
        "generate",
        str(tmp_path / "docs"),
        "-n",
        "5",
        "-o",
        str(tmp_path / "cases.jsonl"),
        "--corpus-out",
        str(tmp_path / "corpus.jsonl"),
        "--model",
        "openai/generator",
        "--base-url",
        server.openai_url,
        *extra,
    ]
    return subprocess.run(command, capture_output=True, text=True, timeout=120)


def errors(done):
    """What the command said on stderr, without its progress lines."""
    return [line for line in done.stderr.strip().splitlines() if not line.startswith("asked ")]


def test_passages_are_split_by_heading_and_size_and_answers_checked_in_them(tmp_path):
    write_documents(tmp_path / "docs")
    passages = split_passages(tmp_path / "docs" / "handbook.md")
    assert [p.title for p in passages] == ["Returns", "Shipping", "Warranty"]
    assert [p.id for p in passages] == ["handbook-001", "handbook-002", "handbook-003"]
    assert answer_check("45 days", passages[0]) is None
    assert answer_check("19.90 EUR", passages[1]) is None and normalised("costs 19.90 EUR.") == "costs 19.90 eur"
    assert "does not appear" in answer_check("60 days", passages[0])


def test_generate_writes_valid_cases_and_a_corpus_drops_answers_not_in_their_passage_and_reminds(
    model_server, tmp_path
):
    write_documents(tmp_path / "docs")
    model_server.responder = generator
    done = generate(model_server, tmp_path, "--unanswerable", "0.2", "--seed", "3")
    assert done.returncode == 0, done.stderr
    assert "asked 4/4 passages" in done.stderr  # progress (the documents hold 4 passages)
    assert "dropped 1: the answer does not appear in its passage" in done.stdout
    assert "drop the wrong or ambiguous ones" in done.stdout
    corpus = [json.loads(line) for line in (tmp_path / "corpus.jsonl").read_text().splitlines()]
    assert {d["id"] for d in corpus} == {"handbook-001", "handbook-002", "handbook-003", "notes-001"}
    valid = subprocess.run(
        [sys.executable, "-m", "agenteval.cli", "validate", str(tmp_path / "cases.jsonl")],
        capture_output=True,
        text=True,
    )
    assert valid.returncode == 0, valid.stderr
    cases = load_dataset(tmp_path / "cases.jsonl").cases
    assert len(cases) == 3  # 4 passages asked (all there are), 1 dropped
    unknown = [c for c in cases if c.expected_output == "unknown"]
    assert len(unknown) == 1 and unknown[0].relevant_docs is None
    for case in cases:
        if case.expected_output != "unknown":
            (doc,) = case.relevant_docs
            text = next(d["text"] for d in corpus if d["id"] == doc)
            assert normalised(case.expected_output) in normalised(text)
    again = generate(model_server, tmp_path, "--unanswerable", "0.2", "--seed", "3", "--force")
    assert again.returncode == 0
    assert [c.metadata["passage"] for c in load_dataset(tmp_path / "cases.jsonl").cases] == [
        c.metadata["passage"] for c in cases
    ]  # the same passages for the same seed


def test_a_generated_dataset_runs_with_the_reference_agent_searching_its_corpus(model_server, tmp_path):
    write_documents(tmp_path / "docs")
    model_server.responder = generator
    assert generate(model_server, tmp_path, "--unanswerable", "0").returncode == 0
    cases = load_dataset(tmp_path / "cases.jsonl").cases
    model_server.responder = ms.CaseResponder(cases)
    experiment = evaluate(
        "",
        str(tmp_path / "cases.jsonl"),
        model="openai/agent",
        base_url=model_server.openai_url,
        corpus=tmp_path / "corpus.jsonl",
        attempts=1,
        progress="none",
    )
    assert experiment.summary.failed == 0 and experiment.summary.trials == len(cases)
    store = Store()
    retrieved = store.rows(
        "SELECT json_extract_string(attributes, '$.\"agenteval.retrieval.document_ids\"') AS ids FROM spans "
        "WHERE experiment_id = ? AND operation = 'retrieval'",
        [experiment.experiment_id],
    )
    ids = {i for row in retrieved for i in json.loads(row["ids"])}
    assert ids and ids <= {"handbook-001", "handbook-002", "handbook-003", "notes-001"}  # the new corpus's
    recall = store.rows(
        "SELECT count(*) AS n FROM scores WHERE experiment_id = ? AND scorer = 'retrieval_recall'",
        [experiment.experiment_id],
    )
    assert recall[0]["n"] == len(cases)
    assert experiment.options["corpus"] == str((tmp_path / "corpus.jsonl").resolve())


def test_files_named_alike_in_two_folders_give_distinct_passage_ids_and_a_file_given_twice_counts_once(
    model_server, tmp_path
):
    """docs/en/handbook.md and docs/fr/handbook.md both gave handbook-001: the corpus held the id twice and a
    case's relevant_docs named either passage."""
    docs = tmp_path / "docs"
    (docs / "en").mkdir(parents=True)
    (docs / "fr").mkdir()
    (docs / "en" / "handbook.md").write_text(HANDBOOK)
    (docs / "fr" / "handbook.md").write_text(NOTES)
    model_server.responder = generator
    done = generate(model_server, tmp_path, str(docs / "en" / "handbook.md"))  # also inside docs/: once
    assert done.returncode == 0, done.stderr
    corpus = [json.loads(line) for line in (tmp_path / "corpus.jsonl").read_text().splitlines()]
    assert [d["id"] for d in corpus] == ["handbook-001", "handbook-002", "handbook-003", "handbook-2-001"]
    assert len(model_server.requests) == 4


@pytest.mark.parametrize("name", ["Uncategorized", "unanswerable"])
def test_a_document_named_like_a_category_of_other_cases_gives_cases_of_its_own(model_server, tmp_path, name):
    """A case's category is its document's name. "uncategorized" is the name of cases without one, which validate
    refuses, so Uncategorized.md gave a file of cases its own validate refused; "unanswerable" is that of the
    questions the documents do not answer, so unanswerable.md's cases were counted with them in every report."""
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / f"{name}.md").write_text(HANDBOOK)
    model_server.responder = generator
    done = generate(model_server, tmp_path, "--unanswerable", "0")
    assert done.returncode == 0, done.stderr
    cases = load_file(tmp_path / "cases.jsonl")
    assert len(cases) == 2 and {case.category for case in cases} == {f"{name.lower()}-doc"}


def test_generate_keeps_what_is_saved_an_existing_output_the_same_file_twice_or_a_document_before_asking(
    model_server, tmp_path
):
    """-o over a curated dataset replaced it without a word; -o and --corpus-out naming one file wrote the corpus
    over the cases and said both were written; -o naming a document read replaced the document. Each is refused
    (exit 2, the option named) before any model call, and --force overwrites only what is not a document."""
    write_documents(tmp_path / "docs")
    model_server.responder = generator
    curated = '{"id": "mine", "input": "hand-written", "expected_output": "x"}\n'
    (tmp_path / "cases.jsonl").write_text(curated)
    kept = generate(model_server, tmp_path)
    assert kept.returncode == 2 and kept.stderr.strip() == (
        f"Error: -o {tmp_path / 'cases.jsonl'}: the file exists (cases or a corpus saved before); choose another or "
        "give --force"
    ), kept.stderr
    assert (tmp_path / "cases.jsonl").read_text() == curated and not (tmp_path / "corpus.jsonl").exists()
    same = generate(model_server, tmp_path, "--force", "--corpus-out", str(tmp_path / "cases.jsonl"))
    assert same.returncode == 2 and "-o and --corpus-out both name" in same.stderr, same.stderr
    document = tmp_path / "docs" / "notes.txt"
    for option in ("-o", "--corpus-out"):
        over = generate(model_server, tmp_path, "--force", option, str(document))
        assert over.returncode == 2 and f"{option} {document}: is one of the documents read" in over.stderr
    assert document.read_text() == NOTES and model_server.requests == []
    forced = generate(model_server, tmp_path, "--force")
    assert forced.returncode == 0, forced.stderr
    assert "mine" not in (tmp_path / "cases.jsonl").read_text() and (tmp_path / "corpus.jsonl").exists()


def test_an_output_in_a_missing_folder_is_one_line_naming_it_before_the_model_is_asked(model_server, tmp_path):
    """-o or --corpus-out in a folder that does not exist ended in a FileNotFoundError traceback, after every
    passage had been asked (and paid for)."""
    write_documents(tmp_path / "docs")
    model_server.responder = generator
    for option, target in (("-o", tmp_path / "gone" / "cases.jsonl"), ("--corpus-out", tmp_path / "gone" / "c.jsonl")):
        command = [sys.executable, "-m", "agenteval.cli", "generate", str(tmp_path / "docs"), "-n", "5"]
        outputs = {"-o": str(tmp_path / "cases.jsonl"), "--corpus-out": str(tmp_path / "corpus.jsonl")}
        outputs[option] = str(target)
        command += [*(item for pair in outputs.items() for item in pair), "--model", "openai/generator"]
        done = subprocess.run([*command, "--base-url", model_server.openai_url], capture_output=True, text=True)
        assert done.returncode == 1 and done.stderr.strip().splitlines() == [
            f"Error: {option} {target}: cannot be written (No such file or directory); check that its folder "
            "exists and can be written, or choose another file"
        ], done.stderr
    assert model_server.requests == [] and not (tmp_path / "cases.jsonl").exists()


def test_a_document_that_is_not_utf8_is_refused_naming_it_and_its_first_bad_byte_before_the_model_is_asked(
    model_server, tmp_path
):
    """A Latin-1 (or UTF-16) document was read with replacement characters, silently: the model was sent
    mojibake, paid for, and the cases quoted it. Each such file is now named with its first bad byte (counted
    from 1, as `validate` counts them) before any passage is asked."""
    write_documents(tmp_path / "docs")
    latin1 = ("Kettles ship within 3 days. " * 4 + "Le café coûte 2,50 EUR au comptoir.").encode("latin-1")
    (tmp_path / "docs" / "menu.txt").write_bytes(latin1)
    (tmp_path / "docs" / "windows.md").write_text(HANDBOOK, encoding="utf-16")  # Notepad's "Unicode"
    model_server.responder = generator
    done = generate(model_server, tmp_path)
    first_bad = latin1.index("é".encode("latin-1")) + 1
    assert done.returncode == 1 and done.stderr.strip().splitlines() == [
        f"Error: {tmp_path / 'docs' / 'menu.txt'}: not valid UTF-8 at byte {first_bad}; save the file as UTF-8",
        f"{tmp_path / 'docs' / 'windows.md'}: the file is UTF-16 or UTF-32 (it starts with their byte order mark); "
        "save it as UTF-8",
    ], done.stderr
    assert model_server.requests == [] and not (tmp_path / "cases.jsonl").exists()
    assert not (tmp_path / "corpus.jsonl").exists()
    # A hostile file name (found by walking the folder) shows as its characters, on its own line.
    for name in ("menu.txt", "windows.md"):
        (tmp_path / "docs" / name).unlink()
    (tmp_path / "docs" / "x\nError: fake\x1b[2J.txt").write_bytes(latin1)
    done = generate(model_server, tmp_path)
    assert done.returncode == 1 and done.stderr.strip().splitlines() == [
        f"Error: {tmp_path / 'docs'}/x\\x0aError: fake\\x1b[2J.txt: not valid UTF-8 at byte {first_bad}; save the "
        "file as UTF-8"
    ], done.stderr
    assert model_server.requests == []
    # UTF-8 with a byte order mark and CRLF line ends (Windows editors) is read as the plain file is.
    (tmp_path / "windows.md").write_bytes(b"\xef\xbb\xbf" + HANDBOOK.replace("\n", "\r\n").encode())
    plain = [(p.title, p.text) for p in split_passages(tmp_path / "docs" / "handbook.md")]
    assert [(p.title, p.text) for p in split_passages(tmp_path / "windows.md")] == plain


def test_a_draft_that_keeps_no_question_writes_nothing_and_says_why(model_server, tmp_path):
    """A model that never calls the tool (a small local one, say) had every question dropped, and the command
    still wrote an empty cases file, exited 0 and said "run it with: agenteval run --dataset cases.jsonl", which
    validate and run refuse: a file of no case."""
    write_documents(tmp_path / "docs")
    model_server.responder = lambda request: ms.text("Here is a question: what is the refund window?")
    done = generate(model_server, tmp_path)
    assert done.returncode == 1, done.stdout + done.stderr
    error, *reasons = done.stderr.split("Error: ", 1)[1].splitlines()
    assert error.startswith("none of the 4 questions asked was kept, so nothing was written to ")
    assert "tool call" in error and reasons == [
        "  dropped 4: the model answered in text, not with the propose tool call (a refusal, or no tool calling)"
    ]
    assert "run it with" not in done.stdout
    assert not (tmp_path / "cases.jsonl").exists() and not (tmp_path / "corpus.jsonl").exists()


def test_a_document_that_cannot_be_read_is_named_with_the_others_before_the_model_is_asked(model_server, tmp_path):
    """A .md the operating system refuses to read (here a link to /proc/self/mem, which fails with EIO as a file
    without permission fails with EACCES) ended in an OSError traceback."""
    write_documents(tmp_path / "docs")
    (tmp_path / "docs" / "mem.md").symlink_to("/proc/self/mem")
    model_server.responder = generator
    done = generate(model_server, tmp_path)
    assert done.returncode == 1 and done.stderr == (
        f"Error: {tmp_path / 'docs' / 'mem.md'}: cannot be read (Input/output error); make it readable, or move it "
        "out of the folder\n"
    ), done.stderr
    assert model_server.requests == []


def test_ctrl_c_half_way_writes_the_cases_drafted_by_then_and_exits_130(model_server, tmp_path):
    """Ctrl-C after most passages were answered (and paid for) lost them all: the answers were kept in memory
    until the last one came, and nothing was written."""
    docs = tmp_path / "docs"
    docs.mkdir()
    paragraphs = [
        f"Item {i} of the catalogue weighs {i + 10} kilograms and ships from warehouse {i} " * 2 for i in range(6)
    ]
    (docs / "catalogue.md").write_text("\n\n".join(f"# Item {i}\n\n{text}" for i, text in enumerate(paragraphs)))
    release = threading.Event()

    def answer_two(request):
        passage = request.last_user_text().split("):\n", 1)[1]
        reply = ms.tool_call("propose", {"question": f"How heavy? {passage[:9]}", "answer": passage.split()[6]})
        if passage.startswith(("Item 0 ", "Item 1 ")):
            return reply
        held = ms.slow(600, reply)
        held.hold = release  # answered only once the test ends
        return held

    model_server.responder = answer_two
    command = [sys.executable, "-m", "agenteval.cli", "generate", str(docs), "-n", "6", "--unanswerable", "0"]
    command += ["-o", str(tmp_path / "cases.jsonl"), "--corpus-out", str(tmp_path / "corpus.jsonl")]
    command += ["--model", "openai/generator", "--base-url", model_server.openai_url]
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        seen = []
        for line in process.stderr:
            seen.append(line)
            if line.startswith("asked 2/6"):
                break
        process.send_signal(signal.SIGINT)
        out, err = process.communicate(timeout=60)
        err = "".join(seen) + err
    finally:
        release.set()
        process.kill()
    assert process.returncode == 130, err
    assert "interrupted after 2 passages were answered: wrote the cases drafted by then" in err
    cases = load_dataset(tmp_path / "cases.jsonl").cases
    assert sorted(c.metadata["passage"] for c in cases) == ["catalogue-001", "catalogue-002"]
    assert len((tmp_path / "corpus.jsonl").read_text().splitlines()) == 6


def test_each_answer_without_a_question_is_dropped_saying_why_in_words_that_say_what_to_change(model_server, tmp_path):
    """A refusal in text, an empty answer, a call cut at the token limit and a call whose arguments are not JSON
    were all dropped as "the model's output could not be read": nothing told a token limit from a refusal."""
    write_documents(tmp_path / "docs")
    model_server.script(
        ms.text("I cannot help with that."),
        ms.text(""),
        ms.truncated(),
        ms.tool_call("propose", '{"question": "cut'),
    )
    done = generate(model_server, tmp_path, "--unanswerable", "0")
    assert done.returncode == 1, done.stderr
    assert sorted(line.strip() for line in done.stderr.splitlines() if "dropped 1:" in line) == [
        "dropped 1: the answer was cut at the model's token limit (finish reason length)",
        "dropped 1: the model answered in text, not with the propose tool call (a refusal, or no tool calling)",
        "dropped 1: the model's answer was empty",
        "dropped 1: the propose call's arguments are not a JSON object with a question and an answer",
    ]


def test_an_output_the_system_will_not_let_be_written_is_refused_before_the_model_is_asked(model_server, tmp_path):
    """An output in a folder that exists but cannot be written (here /sys, refused even to root) was found out
    after every passage had been asked and paid for."""
    write_documents(tmp_path / "docs")
    model_server.responder = generator
    done = generate(model_server, tmp_path, "--corpus-out", "/sys/corpus.jsonl")
    assert done.returncode == 1 and done.stderr.strip().splitlines() == [
        "Error: --corpus-out /sys/corpus.jsonl: cannot be written (Permission denied); check that its folder exists "
        "and can be written, or choose another file"
    ], done.stderr
    assert model_server.requests == [] and not (tmp_path / "cases.jsonl").exists()


def test_a_corpus_that_cannot_be_written_leaves_no_new_cases_file_and_an_older_one_as_it_was(model_server, tmp_path):
    """The cases were written first: when the corpus then failed (its folder gone, a full disk), the cases file
    was left linking passages of a corpus that did not exist, and with --force the cases it replaced were lost.
    The two are staged, then put in place together; a failure puts back what the first had replaced."""
    write_documents(tmp_path / "docs")
    elsewhere = tmp_path / "corpora"
    elsewhere.mkdir()
    corpus = elsewhere / "corpus.jsonl"

    def folder_removed_meanwhile(request):
        if elsewhere.exists():
            elsewhere.rmdir()  # checked writable before the model was asked; gone by the time it is written
        return generator(request)

    model_server.responder = folder_removed_meanwhile
    done = generate(model_server, tmp_path, "--corpus-out", str(corpus))
    cases = tmp_path / "cases.jsonl"
    assert done.returncode == 1 and errors(done) == [
        f"Error: --corpus-out {corpus}: cannot be written (No such file or directory); check that its folder "
        f"exists and can be written, or choose another file; -o {cases} was not written either (the files are "
        "written together or not at all)"
    ], done.stderr
    assert model_server.requests and sorted(p.name for p in tmp_path.iterdir()) == ["docs"]  # nothing staged left

    # With --force over an older dataset: a folder now stands where the corpus goes, found only at its rename.
    curated = '{"id": "mine", "input": "hand-written", "expected_output": "x"}\n'
    cases.write_text(curated)
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"id": "old", "text": "the corpus saved with it"}\n')

    def folder_made_meanwhile(request):
        if corpus.is_file():
            corpus.unlink()
            corpus.mkdir()
        return generator(request)

    model_server.responder = folder_made_meanwhile
    done = generate(model_server, tmp_path, "--force")
    assert done.returncode == 1 and errors(done) == [
        f"Error: --corpus-out {corpus}: cannot be written (Is a directory); check that its folder exists and can "
        f"be written, or choose another file; -o {cases} was left as it was (the files are written together or "
        "not at all)"
    ], done.stderr
    assert cases.read_text() == curated and corpus.is_dir()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["cases.jsonl", "corpus.jsonl", "docs"]


def test_a_file_that_appears_at_an_output_while_the_model_is_asked_is_not_written_over_without_force(
    model_server, tmp_path
):
    """The outputs were checked before the model was asked, then renamed over whatever was there at the end: a
    dataset saved meanwhile (another run, an editor) was replaced without --force, and without a word."""
    write_documents(tmp_path / "docs")
    cases = tmp_path / "cases.jsonl"
    saved = '{"id": "mine", "input": "saved meanwhile", "expected_output": "x"}\n'

    def saved_meanwhile(request):
        if not cases.exists():
            cases.write_text(saved)
        return generator(request)

    model_server.responder = saved_meanwhile
    done = generate(model_server, tmp_path)
    assert done.returncode == 1 and errors(done) == [
        f"Error: -o {cases}: a file appeared there while this command ran and was not written over; choose another "
        f"or give --force; --corpus-out {tmp_path / 'corpus.jsonl'} was not written either (the files are written "
        "together or not at all)"
    ], done.stderr
    assert cases.read_text() == saved and sorted(p.name for p in tmp_path.iterdir()) == ["cases.jsonl", "docs"]


def test_a_document_over_the_size_limit_is_refused_naming_it_before_it_is_read_whole(model_server, tmp_path):
    """Each document was read whole into memory, then copied while split: a 2 GB log or dump named .txt took
    several times that in memory before the model was asked (or the machine ran out)."""
    write_documents(tmp_path / "docs")
    big = tmp_path / "docs" / "export.txt"
    paragraph = "Order 1234 shipped to the warehouse in Lyon on Monday morning by the usual carrier.\n\n"
    big.write_text(paragraph * (MAX_DOCUMENT_BYTES // len(paragraph) + 1))
    model_server.responder = generator
    done = generate(model_server, tmp_path)
    limit = f"{MAX_DOCUMENT_BYTES // 1_000_000} MB"
    assert done.returncode == 1 and done.stderr.strip().splitlines() == [
        f"Error: {big}: larger than {limit}, the most a document may hold; split it into smaller files, or give "
        "only the part to draft questions from"
    ], done.stderr
    assert model_server.requests == [] and not (tmp_path / "cases.jsonl").exists()
    big.unlink()
    with open(tmp_path / "docs" / "dump.md", "wb") as sparse:  # 2 GB that take no disk (a hole reads as zeros)
        sparse.truncate(2 * 1024**3)
    done = generate(model_server, tmp_path)
    assert done.returncode == 1 and f"dump.md: larger than {limit}" in done.stderr, done.stderr


def test_a_pipe_or_device_given_as_a_document_is_named_as_not_a_regular_file_and_never_waited_on(
    model_server, tmp_path
):
    """A named pipe or a device given as a document was "no such file or folder" (it is there); one in a
    folder was left out without a word. Each is named as what it is, without being opened: a pipe with no
    writer would wait for ever, /dev/zero never ends."""
    write_documents(tmp_path / "docs")
    os.mkfifo(tmp_path / "docs" / "feed.md")
    os.mkfifo(tmp_path / "pipe.txt")
    (tmp_path / "docs" / "zero.txt").symlink_to("/dev/zero")
    (tmp_path / "docs" / ".#notes.txt").symlink_to("root@host.4242")  # Emacs's lock: a link to nothing, left out
    model_server.responder = generator
    done = generate(model_server, tmp_path, str(tmp_path / "pipe.txt"), "/dev/null")
    tail = "not a regular file; give a document as a .md or .txt file (save what it holds in one)"
    assert done.returncode == 1 and done.stderr.strip().splitlines() == [
        f"Error: {tmp_path / 'docs' / 'feed.md'}: a pipe, {tail}",
        f"{tmp_path / 'docs' / 'zero.txt'}: a character device, {tail}",
        f"{tmp_path / 'pipe.txt'}: a pipe, {tail}",
        f"/dev/null: a character device, {tail}",
    ], done.stderr
    assert model_server.requests == [] and not (tmp_path / "cases.jsonl").exists()


def test_an_output_that_is_a_pipe_is_refused_even_with_force_and_a_replaced_file_keeps_its_permissions(
    model_server, tmp_path
):
    """--force renamed the new file over whatever the output named: a pipe a reader waited on was replaced by a
    file (and -o /dev/null, as root, replaced the device for everyone); and the file replaced lost its
    permissions: a dataset kept private (0600) or shared with a group (0660) came back with the umask's."""
    write_documents(tmp_path / "docs")
    model_server.responder = generator
    pipe = tmp_path / "cases.jsonl"
    os.mkfifo(pipe)
    done = generate(model_server, tmp_path, "--force")
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        f"Error: -o {pipe}: a pipe, not a regular file; give the name of a file to write"
    ], done.stderr
    assert model_server.requests == [] and pipe.is_fifo() and not (tmp_path / "corpus.jsonl").exists()
    pipe.unlink()
    (tmp_path / "cases.jsonl").write_text('{"id": "mine", "input": "shared", "expected_output": "x"}\n')
    (tmp_path / "cases.jsonl").chmod(0o660)
    assert generate(model_server, tmp_path, "--force").returncode == 0
    assert (tmp_path / "cases.jsonl").stat().st_mode & 0o777 == 0o660


def test_documents_over_the_total_limit_are_refused_with_the_figures_and_the_option_before_any_is_read(
    model_server, tmp_path
):
    """Each document was limited, their total was not: a folder of 5,000 files of 9 MB each was read whole (45 GB)
    and put in the corpus. The total is checked from the files' sizes before any is read or the model asked, and
    the message gives the figures and the option that raises the limit."""
    write_documents(tmp_path / "docs")
    for number in range(MAX_TOTAL_MB // 9 + 1):  # 9 MB each that take no disk (a hole reads as zeros)
        with open(tmp_path / "docs" / f"part-{number:02d}.txt", "wb") as sparse:
            sparse.truncate(9_000_000)
    files = MAX_TOTAL_MB // 9 + 3
    total = (MAX_TOTAL_MB // 9 + 1) * 9_000_000 + len(HANDBOOK) + len(NOTES)
    model_server.responder = generator
    done = generate(model_server, tmp_path)
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        f"Error: the {files} documents hold {total / 1e6:,.1f} MB, more than --max-total-mb {MAX_TOTAL_MB} allows; "
        "give fewer documents (only the files to draft questions from), or raise --max-total-mb"
    ], done.stderr
    assert model_server.requests == [] and not (tmp_path / "cases.jsonl").exists()
    for sparse in (tmp_path / "docs").glob("part-*.txt"):
        sparse.unlink()
    small = generate(model_server, tmp_path, "--max-total-mb", "1")
    assert small.returncode == 0, small.stderr  # the two documents, well under 1 MB
    (tmp_path / "docs" / "more.txt").write_text("Returns are free within the first 30 days of a purchase.\n\n" * 20_000)
    done = generate(model_server, tmp_path, "--max-total-mb", "1", "--force")
    assert done.returncode == 2 and "more than --max-total-mb 1 allows" in done.stderr, done.stderr


def test_a_paragraph_longer_than_a_passage_is_cut_so_no_prompt_or_search_result_holds_a_whole_file(tmp_path):
    """A passage gathered paragraphs up to PASSAGE_CHARS, but one paragraph longer than that was a passage whole:
    a 2 MB export with no blank line was one passage, sent whole to the model (about 500,000 tokens) and returned
    whole by the search tool. It is cut at line ends, else at spaces, into passages of at most PASSAGE_CHARS."""
    lines = [f"Order {n} shipped to the warehouse in Lyon on Monday by the usual carrier." for n in range(30_000)]
    unbroken = "x" * (PASSAGE_CHARS * 2 + 100)  # no line end or space: cut where the size says
    (tmp_path / "export.txt").write_text("# Orders\n\n" + "\n".join(lines) + "\n\n" + unbroken + "\n")
    passages = split_passages(tmp_path / "export.txt")
    assert max(len(p.text) for p in passages) <= PASSAGE_CHARS and len(passages) > 1_000
    assert {p.title for p in passages} == {"Orders"}
    text = "\n".join(p.text for p in passages)
    assert text.split("\n")[: len(lines)] == lines and text.endswith(unbroken[-10:])  # nothing lost or cut in a line
    assert "".join(p.text for p in passages[-3:]).endswith(unbroken)


def test_force_onto_a_link_writes_the_file_it_names_and_leaves_the_link(model_server, tmp_path):
    """--force renamed the new file over the link itself: a dataset kept elsewhere and linked in (a shared folder,
    a dotfiles repository) stayed old while the link became a copy. ``report -o`` writes through a link; now so do
    the JSONL outputs, the way ``cp`` and editors that save atomically do."""
    write_documents(tmp_path / "docs")
    model_server.responder = generator
    kept = tmp_path / "kept"
    kept.mkdir()
    for name in ("cases.jsonl", "corpus.jsonl"):
        (kept / name).write_text('{"id": "old", "input": "q", "expected_output": "a"}\n')
        (tmp_path / name).symlink_to(kept / name)
    done = generate(model_server, tmp_path, "--force")
    assert done.returncode == 0, done.stderr
    for name in ("cases.jsonl", "corpus.jsonl"):
        assert (tmp_path / name).is_symlink() and os.readlink(tmp_path / name) == str(kept / name)
        assert '"old"' not in (kept / name).read_text() and (kept / name).read_text().strip()
    assert sorted(p.name for p in kept.iterdir()) == ["cases.jsonl", "corpus.jsonl"]  # nothing staged left
