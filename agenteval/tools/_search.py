"""Search over the rag dataset's corpus (BM25, from the ``[rag]`` extra), recording retrieved document ids."""

from __future__ import annotations

import functools
import json
from typing import Any

from agenteval_instrumentation import retriever, tool

DEFAULT_K = 3


@functools.cache
def corpus() -> list[dict[str, str]]:
    """The documents of the built-in rag corpus: ``id``, ``title``, ``kind`` and ``text``."""
    from ..dataset._catalog import RAG_CORPUS, datasets_dir

    with open(datasets_dir() / RAG_CORPUS, encoding="utf-8") as handle:
        return [json.loads(line) for line in handle if line.strip()]


@functools.cache
def _index() -> Any:
    try:
        import bm25s
    except ImportError as exc:  # the search tool is optional: say how to get it
        raise ImportError("the search_documents tool needs the rag extra: pip install 'agenteval[rag]'") from exc
    index = bm25s.BM25()
    texts = [f"{doc['title']}. {doc['text']}" for doc in corpus()]
    index.index(bm25s.tokenize(texts, stopwords="en", show_progress=False), show_progress=False)
    return index


@retriever(name="rag_corpus")
def retrieve(query: str, k: int = DEFAULT_K) -> list[dict[str, str]]:
    """The ``k`` documents of the corpus that best match ``query`` (BM25), best first."""
    import bm25s

    documents = corpus()
    hits, scores = _index().retrieve(
        bm25s.tokenize([query], stopwords="en", show_progress=False), k=min(k, len(documents)), show_progress=False
    )
    return [documents[int(i)] for i, score in zip(hits[0], scores[0], strict=True) if score > 0]


@tool
def search_documents(query: str, k: int = DEFAULT_K) -> list[dict[str, str]]:
    """Search the company's policy, product, pricing and HR documents.

    Args:
        query: what to look for, in plain words.
        k: how many documents to return at most.
    """
    return retrieve(query, k)
