"""Search over a corpus of documents (BM25, from the ``[rag]`` extra), recording retrieved document ids.

The rag dataset's corpus is built in; any other corpus in the same format (JSONL, one document per line with
``id`` and ``text``, optionally ``title``), such as one ``agenteval generate`` writes, gets a tool of the same
name and shape from :func:`search_tool`.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import weakref
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

from agenteval_instrumentation import retriever, tool

from ..dataset._file_kinds import NotRegularFile, open_regular
from ..dataset._limits import MAX_CORPUS_MB, MAX_PASSAGE_CHARS
from ..errors import UsageError
from ..render._text_safety import visible

DEFAULT_K = 3


LINE_SHAPE = "each line is one JSON object with an id and a text (and optionally a title)"
_JSON_KINDS = {dict: "an object", list: "an array", str: "a string", int: "a number", float: "a number"}


def _kind(value: object) -> str:
    """What a JSON value is, in words (never the value: it may be anything, of any size)."""
    if value is None or isinstance(value, bool):
        return f"JSON {json.dumps(value)}"
    return _JSON_KINDS.get(type(value), type(value).__name__)


def _document(raw: bytes, where: str) -> dict[str, str] | None:
    """The document on one line (``where`` is its file and line), None for a blank line, or a :class:`UsageError`
    naming the field that is wrong and what to do."""
    try:
        line = raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise UsageError(
            f"{where}: not valid UTF-8 at byte {exc.start + 1} of the line; save the file as UTF-8"
        ) from None
    if not line.strip():
        return None
    try:
        document = json.loads(line.rstrip("\r\n"))  # a column past the end read as line 2's first
    except json.JSONDecodeError as exc:
        raise UsageError(f"{where}: not JSON ({exc.msg}, column {exc.colno}); {LINE_SHAPE}") from None
    if not isinstance(document, dict):
        raise UsageError(f"{where}: {_kind(document)}, not a JSON object; {LINE_SHAPE}")
    for field in ("id", "text"):
        if field not in document:
            raise UsageError(f'{where}: no "{field}" field; {LINE_SHAPE}')
    found = document["id"]
    if isinstance(found, bool) or not isinstance(found, (str, int)) or not str(found).strip():
        what = "empty" if isinstance(found, str) else _kind(found)
        raise UsageError(f'{where}: "id" is {what}; give each document an id (a string) the cases\' relevant_docs name')
    for field in ("text", "title"):
        if field in document and not isinstance(document[field], str):
            # str() of it was searched and shown: a null text was the word "None"
            raise UsageError(f'{where}: "{field}" is {_kind(document[field])}, not a string')
    if len(document["text"]) > MAX_PASSAGE_CHARS:
        raise UsageError(
            f'{where}: "text" holds {len(document["text"]):,} characters, more than a document may '
            f"({MAX_PASSAGE_CHARS:,}: a search result goes whole into the agent's prompt); split it into passages "
            "(agenteval generate cuts documents into passages of about 1,200)"
        )
    return {k: str(v) for k, v in document.items()}


def _open_corpus(path: str | os.PathLike[str], max_mb: float) -> BinaryIO:
    """The corpus file at ``path`` opened, or a :class:`UsageError`: not a regular file (a pipe would be waited on),
    larger than ``max_mb`` (said before it is read, with the option that raises the limit), not readable."""
    try:
        handle = open_regular(path)  # closed by the caller's with
    except NotRegularFile as exc:
        raise UsageError(f"--corpus {path}: {exc.strerror}; give a corpus JSONL file") from exc
    except OSError as exc:
        raise UsageError(f"--corpus {path}: {exc.strerror or exc}") from exc
    size = os.fstat(handle.fileno()).st_size
    if size > max_mb * 1_000_000:
        handle.close()
        raise UsageError(
            f"--corpus {path}: {size / 1e6:,.1f} MB, more than --max-corpus-mb {max_mb:g} allows (a run holds the "
            "corpus and its search index in memory, about 4 times its size, and indexes it before it starts); give "
            "a smaller corpus, or raise --max-corpus-mb"
        )
    return handle


def _documents(path: str | os.PathLike[str], max_mb: float) -> Iterator[dict[str, str]]:
    """The documents of the corpus at ``path`` one at a time, each checked (:func:`_document`), ids unique."""
    first_at: dict[str, int] = {}
    with _open_corpus(path, max_mb) as handle:
        try:
            for number, raw in enumerate(handle, 1):
                document = _document(raw, f"{path}:{number}")
                if document is None:
                    continue
                if document["id"] in first_at:  # a search hit for it could be either: relevant_docs is ambiguous
                    shown = visible(document["id"][:80])
                    raise UsageError(
                        f"{path}:{number}: the id {shown!r} again (first at line {first_at[document['id']]}); give "
                        "each document its own id"
                    )
                first_at[document["id"]] = number
                yield document
        except OSError as exc:
            raise UsageError(f"--corpus {path}: {exc.strerror or exc}") from exc
    if not first_at:
        raise UsageError(f"--corpus {path}: no document in it; {LINE_SHAPE}")


def read_corpus(path: str | os.PathLike[str], max_mb: float = MAX_CORPUS_MB) -> list[dict[str, str]]:
    """The documents of a corpus file (at most ``max_mb`` MB); a line that is not a document with an ``id`` and a
    ``text`` (strings), an id given twice, a text longer than :data:`MAX_PASSAGE_CHARS` or a file with no document
    is a :class:`UsageError` naming the file, the line and the field."""
    return list(_documents(path, max_mb))


def corpus_hash(path: str | os.PathLike[str], max_mb: float = MAX_CORPUS_MB) -> str:
    """A content hash of the corpus file at ``path`` (its documents as read), so a resume can tell it changed.
    Computed a document at a time: the corpus is never held twice."""
    return _digest(_documents(path, max_mb))


def _digest(documents: Iterable[dict[str, str]]) -> str:
    digest = hashlib.sha256()
    for document in documents:
        digest.update(json.dumps(document, sort_keys=True).encode())
        digest.update(b"\n")
    return digest.hexdigest()


class Corpus:
    """Documents and their BM25 index, built on the first search."""

    def __init__(
        self, documents: list[dict[str, str]], name: str, source: str | None = None, digest: str | None = None
    ) -> None:
        self.documents = documents
        self.name = name
        self.source = source or name
        """Where the documents came from, as errors name it (the corpus file)."""
        self.digest = digest
        """The documents' content hash (:func:`corpus_hash`), when they were read from a file."""

    @functools.cached_property
    def _index(self) -> Any:
        try:
            import bm25s
        except ImportError as exc:  # the search tool is optional: say how to get it
            raise ImportError("the search_documents tool needs the rag extra: pip install 'agenteval[rag]'") from exc
        index = bm25s.BM25()
        texts = (f"{doc.get('title', '')}. {doc['text']}" for doc in self.documents)  # not a second copy of all
        tokens = bm25s.tokenize(texts, stopwords="en", show_progress=False)
        if not tokens.vocab:  # bm25s fails on it with "max() arg is an empty sequence", at each search
            raise UsageError(
                f"--corpus {self.source}: no word to search in its documents (their texts are empty, or only common "
                'words such as "the"); give documents with text to search'
            )
        index.index(tokens, show_progress=False)
        return index

    def indexed(self) -> Corpus:
        """This corpus with its index built now, rather than in the first search: before a run starts, neither in a
        trial's time (a large corpus took minutes, and the trial timed out) nor in each trial's failure."""
        self._index  # noqa: B018 (built and kept by the cached property)
        return self

    def search(self, query: str, k: int = DEFAULT_K) -> list[dict[str, str]]:
        """The ``k`` documents that best match ``query`` (BM25), best first."""
        import bm25s

        index = self._index
        hits, scores = index.retrieve(
            bm25s.tokenize([query], stopwords="en", show_progress=False),
            k=min(max(k, 1), len(self.documents)),
            show_progress=False,
        )
        return [self.documents[int(i)] for i, score in zip(hits[0], scores[0], strict=True) if score > 0]


@functools.cache
def builtin_corpus() -> Corpus:
    from ..dataset._catalog import RAG_CORPUS, datasets_dir

    return Corpus(read_corpus(datasets_dir() / RAG_CORPUS), "rag_corpus")


def corpus() -> list[dict[str, str]]:
    """The documents of the built-in rag corpus: ``id``, ``title``, ``kind`` and ``text``."""
    return builtin_corpus().documents


@retriever(name="rag_corpus")
def retrieve(query: str, k: int = DEFAULT_K) -> list[dict[str, str]]:
    """The ``k`` documents of the built-in corpus that best match ``query`` (BM25), best first."""
    return builtin_corpus().search(query, k)


@tool
def search_documents(query: str, k: int = DEFAULT_K) -> list[dict[str, str]]:
    """Search the company's policy, product, pricing and HR documents.

    Args:
        query: what to look for, in plain words.
        k: how many documents to return at most.
    """
    return retrieve(query, k)


_INDEXED: weakref.WeakValueDictionary[tuple[str, str, int, int, float], Corpus] = weakref.WeakValueDictionary()
"""The corpus files this process indexed, while a search tool still holds them, by the path as given, the file, its
size and modification time, and the size limit: a cluster's worker process runs a run's tasks one after another, and
each built its agent's search tool by reading and indexing the corpus again (about 5 s for 11 MB)."""


def indexed_corpus(path: str | os.PathLike[str], max_mb: float = MAX_CORPUS_MB) -> Corpus:
    """The corpus file at ``path``, read and indexed, or the index this process already holds of the same file
    unchanged since (same size and modification time); its content hash is its ``digest``."""
    try:
        stat = Path(path).stat()
        key = (str(path), str(Path(path).resolve()), stat.st_size, stat.st_mtime_ns, max_mb)
    except OSError:  # reading it says why, in the corpus's own words
        key = None
    found = _INDEXED.get(key) if key is not None else None
    if found is None:
        documents = read_corpus(path, max_mb)
        found = Corpus(documents, Path(path).stem, str(path), _digest(documents)).indexed()
        if key is not None:
            _INDEXED[key] = found
    return found


def corpora_in_use() -> list[Corpus]:
    """The corpora this process holds indexed now: what a cluster's worker keeps from one task to the next."""
    return list(_INDEXED.values())


def search_tool(
    path: str | os.PathLike[str], max_mb: float = MAX_CORPUS_MB, expected_hash: str | None = None
) -> Callable[..., list[dict[str, str]]]:
    """A ``search_documents`` tool over the corpus at ``path`` (at most ``max_mb`` MB), indexed now, recording
    retrieved ids as the built-in one does. With ``expected_hash`` (the run's record of the corpus,
    :func:`corpus_hash`), documents that are not those are a :class:`UsageError`: a run's trials all search one corpus,
    whichever process or machine runs them."""
    found = indexed_corpus(path, max_mb)
    if expected_hash is not None and found.digest != expected_hash:
        raise UsageError(
            f"--corpus {path}: its documents here are not the ones the run recorded: the file changed since the run "
            "started, or this machine holds another copy of it; give every machine the run uses the same file (a "
            "changed corpus is a new run: start one without --resume)"
        )

    @retriever(name=found.name)
    def retrieve_from(query: str, k: int = DEFAULT_K) -> list[dict[str, str]]:
        return found.search(query, k)

    @tool(name="search_documents")
    def search_corpus(query: str, k: int = DEFAULT_K) -> list[dict[str, str]]:
        """Search the documents of this corpus for what a question needs.

        Args:
            query: what to look for, in plain words.
            k: how many documents to return at most.
        """
        return retrieve_from(query, k)

    return search_corpus
