"""A corpus for the search tool (``run --corpus``): hostile content is refused before the run starts, naming the
file, the line and the field and saying what to do; a corpus over the size limit is refused before it is read;
and one whose index cannot be built is said once, before the first trial, not as every trial's tool error."""

from __future__ import annotations

import gc
import hashlib
import json
import os
import subprocess
import sys

import model_servers as ms
import pytest

from agenteval.agents import reference_agent
from agenteval.dataset import load_dataset
from agenteval.dataset._catalog import RAG_CORPUS, datasets_dir
from agenteval.dataset._limits import MAX_CORPUS_MB, MAX_PASSAGE_CHARS
from agenteval.errors import UsageError
from agenteval.models import Model
from agenteval.run import evaluate
from agenteval.tools import read_corpus
from agenteval.tools._search import corpora_in_use, corpus_hash, search_tool

SHAPE = "each line is one JSON object with an id and a text (and optionally a title)"
GOOD = '{"id": "returns", "title": "Returns", "text": "Unused products may be returned within 45 days."}\n'


def refused(path, content: bytes | str) -> str:
    """What reading a corpus of ``content`` says."""
    path.write_bytes(content.encode() if isinstance(content, str) else content)
    with pytest.raises(UsageError) as raised:
        read_corpus(path)
    return str(raised.value)


@pytest.mark.parametrize(
    ("line", "said"),
    [
        ('{"id": "a", "text": "x"', f"not JSON (Expecting ',' delimiter, column 24); {SHAPE}"),
        ('["a", "text"]', f"an array, not a JSON object; {SHAPE}"),
        ('{"id": "a", "body": "x"}', f'no "text" field; {SHAPE}'),
        ('{"text": "x"}', f'no "id" field; {SHAPE}'),
        (
            '{"id": "", "text": "x"}',
            '"id" is empty; give each document an id (a string) the cases\' relevant_docs name',
        ),
        (
            '{"id": null, "text": "x"}',
            '"id" is JSON null; give each document an id (a string) the cases\' relevant_docs name',
        ),
        ('{"id": "a", "text": null}', '"text" is JSON null, not a string'),  # was searched and shown as "None"
        ('{"id": "a", "text": "x", "title": ["T"]}', '"title" is an array, not a string'),
    ],
)
def test_a_corpus_line_that_is_not_a_document_is_named_with_its_file_line_and_field(tmp_path, line, said):
    """ "a corpus document needs an id and a text" said neither which was missing nor what was wrong with it, and a
    text or title that was no string (null, a list) was searched and returned as its Python text ("None")."""
    path = tmp_path / "corpus.jsonl"
    assert refused(path, GOOD + "\n" + line + "\n") == f"{path}:3: {said}"


def test_an_id_given_twice_a_huge_text_bad_utf8_or_no_document_is_refused_saying_what_to_do(tmp_path):
    """Two documents with one id were both kept: a search hit for it could be either, so a case's relevant_docs
    named two passages; a 100 MB text was loaded and would go whole into the agent's prompt at each hit; a line
    that was not UTF-8 ended in a UnicodeDecodeError with no file or line; an empty corpus failed in every trial's
    search ("max() arg is an empty sequence")."""
    path = tmp_path / "corpus.jsonl"
    twice = GOOD + '{"id": "faq", "text": "a"}\n' + GOOD.replace("45 days", "60 days")
    assert refused(path, twice) == f"{path}:3: the id 'returns' again (first at line 1); give each document its own id"
    huge = json.dumps({"id": "dump", "text": "word " * 20_000_001}) + "\n"  # 100 MB on one line
    assert refused(path, GOOD + huge) == (
        f'{path}:2: "text" holds 100,000,005 characters, more than a document may ({MAX_PASSAGE_CHARS:,}: a search '
        "result goes whole into the agent's prompt); split it into passages (agenteval generate cuts documents into "
        "passages of about 1,200)"
    )
    latin1 = GOOD.encode() + '{"id": "menu", "text": "Crème brûlée"}\n'.encode("latin-1")
    assert refused(path, latin1) == f"{path}:2: not valid UTF-8 at byte 27 of the line; save the file as UTF-8"
    assert refused(path, "\n \n") == f"--corpus {path}: no document in it; {SHAPE}"


def test_a_corpus_over_the_size_limit_or_not_a_file_is_refused_before_the_run_reads_it_or_asks_the_model(
    model_server, tmp_path
):
    """The corpus was read whole, then again, and indexed in memory whatever its size (a 500 MB corpus took 2.6
    GB at its peak and 8 minutes to index, in the first trial's search, past its timeout); a pipe was waited on."""
    corpus = tmp_path / "corpus.jsonl"
    with open(corpus, "wb") as sparse:  # over the default limit, taking no disk
        sparse.truncate(int(MAX_CORPUS_MB * 1_000_000) + 1)
    command = [sys.executable, "-m", "agenteval.cli", "run", "--dataset", "rag", "--sample", "2", "--attempts", "1"]
    command += ["--model", "openai/test-model", "--base-url", model_server.openai_url, "--corpus", str(corpus)]
    command += ["--store", str(tmp_path / "store")]
    done = subprocess.run(command, capture_output=True, text=True, timeout=120)
    size = f"{(MAX_CORPUS_MB * 1_000_000 + 1) / 1e6:,.1f}"
    assert done.returncode == 2 and done.stderr.strip().splitlines() == [
        f"Error: --corpus {corpus}: {size} MB, more than --max-corpus-mb {MAX_CORPUS_MB:g} allows (a run holds the "
        "corpus and its search index in memory, about 4 times its size, and indexes it before it starts); give a "
        "smaller corpus, or raise --max-corpus-mb"
    ], done.stderr
    assert model_server.requests == [] and not (tmp_path / "store").exists()
    corpus.write_text((datasets_dir() / RAG_CORPUS).read_text(encoding="utf-8"), encoding="utf-8")
    done = subprocess.run([*command, "--max-corpus-mb", "0.001"], capture_output=True, text=True, timeout=120)
    assert done.returncode == 2 and "more than --max-corpus-mb 0.001 allows" in done.stderr, done.stderr
    os.mkfifo(tmp_path / "feed.jsonl")
    with pytest.raises(UsageError, match="feed.jsonl: a pipe, not a regular file; give a corpus JSONL file"):
        read_corpus(tmp_path / "feed.jsonl")


def test_a_corpus_with_no_word_to_search_is_refused_before_the_first_trial_not_in_each(model_server, tmp_path):
    """Its index was built in the first search: a corpus whose texts held only common words failed in every
    trial's search (a tool error, "max() arg is an empty sequence"). The index is built when the tool is made."""
    corpus = tmp_path / "corpus.jsonl"
    corpus.write_text('{"id": "a", "text": "the and of"}\n{"id": "b", "text": ""}\n', encoding="utf-8")
    cases = load_dataset("rag").cases
    model_server.responder = ms.CaseResponder(cases)
    run = dict(model="openai/test-model", base_url=model_server.openai_url, corpus=corpus, attempts=1, sample=2)
    with pytest.raises(UsageError) as raised:
        evaluate("", "rag", store=tmp_path / "s", progress="none", **run)
    assert str(raised.value) == (
        f"--corpus {corpus}: no word to search in its documents (their texts are empty, or only common words such "
        'as "the"); give documents with text to search'
    )
    assert model_server.requests == [] and not (tmp_path / "s").exists()


def test_the_corpus_hash_is_the_one_runs_recorded_before_it_was_computed_a_document_at_a_time(tmp_path):
    """A resume compares the hash with the one its run recorded: computing it without holding the corpus must
    give the same value, or every earlier run with a corpus would refuse to resume."""
    path = datasets_dir() / RAG_CORPUS
    digest = hashlib.sha256()
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            digest.update(json.dumps({k: str(v) for k, v in json.loads(line).items()}, sort_keys=True).encode())
            digest.update(b"\n")
    assert corpus_hash(path) == digest.hexdigest()
    assert search_tool(path)("return policy")  # the tool searches what it was given


def test_a_process_that_reads_other_documents_than_the_run_recorded_refuses_to_search_them(tmp_path):
    """The driver hashed the corpus, then each process building the agent (the driver, every Ray task on every
    node) read the file again and searched whatever it found there: a file edited during the run, or another copy
    on a worker node, answered some trials from other documents, unseen. Each read is now checked against the run's
    record."""
    path = tmp_path / "corpus.jsonl"
    documents = (datasets_dir() / RAG_CORPUS).read_text(encoding="utf-8")
    path.write_text(documents, encoding="utf-8")
    recorded = corpus_hash(path)
    assert search_tool(path, expected_hash=recorded)("return policy")
    path.write_text("".join(documents.splitlines(keepends=True)[1:]), encoding="utf-8")  # one document less
    with pytest.raises(UsageError, match=f"--corpus {path}: its documents here are not the ones the run recorded"):
        search_tool(path, expected_hash=recorded)
    with pytest.raises(UsageError, match="not the ones the run recorded"):
        reference_agent(
            Model("openai/m", base_url="http://127.0.0.1:9"),
            load_dataset("rag"),
            corpus=str(path),
            corpus_hash=recorded,
        )


def test_a_process_indexes_an_unchanged_corpus_file_once_while_a_search_tool_holds_it(tmp_path):
    """A cluster's worker process runs a run's tasks one after another, and each task's agent read and indexed the
    corpus file again (about 5 s for 11 MB). The index is now shared while a tool holds it (a worker keeps the last
    task's), read again when the file changed, and let go with the last tool."""
    path = tmp_path / "corpus.jsonl"
    documents = (datasets_dir() / RAG_CORPUS).read_text(encoding="utf-8")
    path.write_text(documents, encoding="utf-8")
    recorded = corpus_hash(path)
    first = search_tool(path, expected_hash=recorded)
    second = search_tool(path, expected_hash=recorded)
    assert len(corpora_in_use()) == 1 and first("return policy") == second("return policy")
    path.write_text("".join(documents.splitlines(keepends=True)[1:]), encoding="utf-8")  # one document less
    with pytest.raises(UsageError, match="not the ones the run recorded"):
        search_tool(path, expected_hash=recorded)  # read again, and checked again
    shorter = search_tool(path)
    assert len(corpora_in_use()) == 2 and shorter("return policy")
    del first, second, shorter
    gc.collect()
    assert corpora_in_use() == []  # a process that no longer searches a corpus holds none
