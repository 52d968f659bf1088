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
from collections.abc import Callable
from pathlib import Path
from typing import Any

from agenteval_instrumentation import retriever, tool

from ..errors import UsageError

DEFAULT_K = 3


def read_corpus(path: str | os.PathLike[str]) -> list[dict[str, str]]:
    """The documents of a corpus file; a line that is not a document with an ``id`` and a ``text`` is an error."""
    documents = []
    try:
        with open(path, encoding="utf-8") as handle:
            for number, line in enumerate(handle, 1):
                if not line.strip():
                    continue
                try:
                    document = json.loads(line)
                except json.JSONDecodeError as exc:
                    raise UsageError(f"{path}:{number}: not JSON ({exc.msg})") from None
                if not isinstance(document, dict) or not document.get("id") or "text" not in document:
                    raise UsageError(f"{path}:{number}: a corpus document needs an id and a text")
                documents.append({k: str(v) for k, v in document.items()})
    except OSError as exc:
        raise UsageError(f"--corpus {path}: {exc.strerror or exc}") from exc
    return documents


def corpus_hash(path: str | os.PathLike[str]) -> str:
    """A content hash of the corpus file at ``path`` (its documents as read), so a resume can tell it changed."""
    digest = hashlib.sha256()
    for document in read_corpus(path):
        digest.update(json.dumps(document, sort_keys=True).encode())
        digest.update(b"\n")
    return digest.hexdigest()


class Corpus:
    """Documents and their BM25 index, built on the first search."""

    def __init__(self, documents: list[dict[str, str]], name: str) -> None:
        self.documents = documents
        self.name = name

    @functools.cached_property
    def _index(self) -> Any:
        try:
            import bm25s
        except ImportError as exc:  # the search tool is optional: say how to get it
            raise ImportError("the search_documents tool needs the rag extra: pip install 'agenteval[rag]'") from exc
        index = bm25s.BM25()
        texts = [f"{doc.get('title', '')}. {doc['text']}" for doc in self.documents]
        index.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
        return index

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


def search_tool(path: str | os.PathLike[str]) -> Callable[..., list[dict[str, str]]]:
    """A ``search_documents`` tool over the corpus at ``path``, recording retrieved ids as the built-in one does."""
    found = Corpus(read_corpus(path), Path(path).stem)

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
