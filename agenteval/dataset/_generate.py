"""``agenteval generate``: a dataset of questions drafted by a model from documents, with the corpus to search.

The ``.md`` and ``.txt`` files are split into passages (paragraphs gathered up to :data:`PASSAGE_CHARS`, a
heading starting a new one and titling it). For each chosen passage the model proposes one question whose short
answer is stated in it, through a forced tool call; about the ``unanswerable`` share are questions the documents
do not answer, expecting ``unknown``. A deterministic check drops a question whose answer does not appear in its
passage. Cases link their passage through ``relevant_docs`` and name the ``search_documents`` tool; the corpus
file holds every passage, so the search has the others to miss among.
"""

from __future__ import annotations

import asyncio
import dataclasses
import os
import random
import re
from collections import Counter
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .._output_files import refuse_existing
from ..errors import SeveralProblems, UsageError
from ..models._types import CONTENT_FILTER, LENGTH
from ._cases import UNKNOWN_ANSWER, Case, NotUtf8, reserved_category, utf8_text
from ._file_kinds import not_regular
from ._limits import MAX_DOCUMENT_BYTES, MAX_TOTAL_MB

if TYPE_CHECKING:
    from ..models._model import Model
    from ..models._types import ModelResponse

PASSAGE_CHARS = 1200
MIN_PASSAGE_CHARS = 80
"""Shorter passages (a lone heading, a one-line note) have nothing to ask about and are left out."""
MAX_ANSWER_CHARS = 80
PROMPT_VERSION = "1"
PROPOSE = "propose"
SUFFIXES = (".md", ".txt")
CONCURRENCY = 8
SYSTEM_PROMPT = """You write evaluation questions for a question-answering assistant that searches a document \
collection. Each question must be answerable by a reader of the whole collection, without seeing the passage: \
name the product, policy or subject it is about. Call the propose tool once."""
ANSWERABLE = """Write one question whose answer is stated in this passage, with its short answer: a few words, \
copied exactly as they appear in the passage (a number with its unit, a name, a date).

Passage ({title}):
{text}"""
UNANSWERABLE = """Write one question on the same subject as this passage that neither this passage nor any \
ordinary company document would answer (a detail that is simply not given). Its answer is "unknown".

Passage ({title}):
{text}"""
PROPOSE_TOOL: dict[str, Any] = {
    "name": PROPOSE,
    "description": "Propose the question and its short answer.",
    "parameters": {
        "type": "object",
        "properties": {"question": {"type": "string"}, "answer": {"type": "string"}},
        "required": ["question", "answer"],
        "additionalProperties": False,
    },
}


class DocumentError(SeveralProblems, ValueError):
    """Documents that cannot be read as text (unreadable, not UTF-8): one line per file, naming it and saying
    what to do."""


class NothingKept(SeveralProblems, ValueError):
    """Every question asked was dropped: a dataset of no case, which ``validate`` and ``run`` refuse, is not
    written; the lines say why they were dropped."""


@dataclasses.dataclass(frozen=True)
class Passage:
    id: str
    title: str
    text: str
    source: str

    def to_document(self) -> dict[str, str]:
        return {"id": self.id, "title": self.title, "text": self.text, "source": self.source}


@dataclasses.dataclass(frozen=True)
class Dropped:
    passage: str
    reason: str


@dataclasses.dataclass
class Generated:
    """What ``generate`` made: the cases kept, the passages (the corpus), and what it dropped and why."""

    cases: list[Case]
    passages: list[Passage]
    dropped: list[Dropped]
    asked: int
    """Passages answered (or failed): all those chosen, unless the run was interrupted."""
    interrupted: bool = False
    """Ctrl-C stopped the questions: what had been answered by then is kept, the rest never asked or lost."""


def _is_file_or_special(path: Path) -> bool:
    return path.exists() and not path.is_dir()


def document_files(paths: Sequence[str | Path]) -> list[Path]:
    """The ``.md`` and ``.txt`` files among ``paths`` (folders searched recursively), in a stable order, each
    once (a file given beside its folder would otherwise put its passages in the corpus twice)."""
    found: dict[Path, Path] = {}
    for given in paths:
        path = Path(given)
        if path.is_dir():
            # Not only regular files: a pipe or a device named .md is refused by name when read, not left out. A
            # link to nothing is (an editor's lock file, such as Emacs's .#notes.md).
            files = sorted(p for p in path.rglob("*") if p.suffix.lower() in SUFFIXES and _is_file_or_special(p))
        elif path.exists():
            files = [path]
        else:
            raise UsageError(f"{given}: no such file or folder")
        for file in files:
            found.setdefault(file.resolve(), file)
    if not found:
        raise UsageError(f"no .md or .txt files in {', '.join(map(str, paths))}")
    return list(found.values())


def _refuse_unless_regular(path: Path, mode: int) -> None:
    kind = not_regular(mode)
    if kind is not None:
        raise DocumentError(
            f"{path}: {kind}, not a regular file; give a document as a .md or .txt file (save what it holds in one)"
        )


def _too_large(path: Path) -> DocumentError:
    return DocumentError(
        f"{path}: larger than {MAX_DOCUMENT_BYTES // 1_000_000} MB, the most a document may hold; split it into "
        "smaller files, or give only the part to draft questions from"
    )


def document_bytes(path: Path) -> bytes:
    """What the document at ``path`` holds, at most :data:`MAX_DOCUMENT_BYTES` of it, or a :class:`DocumentError`
    naming it: not a regular file (a pipe with no writer waits for ever, /dev/zero never ends), too large, or
    not readable."""
    try:
        _refuse_unless_regular(path, os.stat(path).st_mode)  # before opening: a pipe's open waits for a writer
        # Non-blocking, and checked again once open: a pipe put in the file's place since would wait for ever.
        with open(os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0)), "rb") as handle:
            info = os.fstat(handle.fileno())
            _refuse_unless_regular(path, info.st_mode)
            if info.st_size > MAX_DOCUMENT_BYTES:
                raise _too_large(path)
            data = handle.read(MAX_DOCUMENT_BYTES + 1)  # a /proc file says 0 bytes, a log grows as it is read
    except OSError as exc:  # permissions, a /proc file, a link to nothing, a file gone since the folder was listed
        raise DocumentError(
            f"{path}: cannot be read ({exc.strerror or exc}); make it readable, or move it out of the folder"
        ) from None
    if len(data) > MAX_DOCUMENT_BYTES:
        raise _too_large(path)
    return data


def _size_to_read(path: Path) -> int:
    """What reading ``path`` would take: its size, or 0 for a file that is refused by name when read instead (not
    regular, larger than a document may be, gone)."""
    try:
        info = os.stat(path)
    except OSError:
        return 0
    if not_regular(info.st_mode) is not None or info.st_size > MAX_DOCUMENT_BYTES:
        return 0
    return info.st_size


def check_total(files: Sequence[Path], max_total_mb: float) -> None:
    """A :class:`UsageError` when ``files`` hold more than ``max_total_mb`` together, from their sizes: said before
    any is read (or the model asked), with the figures and the option that raises the limit."""
    total = sum(map(_size_to_read, files))
    if total > max_total_mb * 1_000_000:
        raise UsageError(
            f"the {len(files)} documents hold {total / 1e6:,.1f} MB, more than --max-total-mb {max_total_mb:g} "
            "allows; give fewer documents (only the files to draft questions from), or raise --max-total-mb"
        )


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "doc"


UNANSWERABLE_CATEGORY = "unanswerable"
"""The category of the questions the documents do not answer."""


def _category(passage: Passage) -> str:
    """A generated case's category: its document's name, as a slug; a document named like the reserved category
    of cases without one is ``uncategorized-doc``, as validate refuses the reserved name, and one named like the
    unanswerable questions' category ``unanswerable-doc``, which reports would have counted with them."""
    slug = _slug(Path(passage.source).stem)
    return f"{slug}-doc" if reserved_category(slug) or slug == UNANSWERABLE_CATEGORY else slug


def split_passages(path: Path, stem: str | None = None) -> list[Passage]:
    """One file's passages: paragraphs gathered up to :data:`PASSAGE_CHARS`; a markdown heading starts a new
    passage and titles it (and those after it, until the next heading). Their ids are ``stem-001`` and on,
    ``stem`` by default the file name's slug. A file that is not UTF-8 is a :class:`DocumentError` naming it and
    its first bad byte: read with replacement characters, it sent the model mojibake (and paid for it)."""
    try:
        text = utf8_text(document_bytes(path), file_start=True).removeprefix("\ufeff")
    except NotUtf8 as exc:
        raise DocumentError(f"{path}: {exc}") from None
    text = text.replace("\r\n", "\n").replace("\r", "\n")  # the line ends read_text translated
    title = path.stem
    pieces: list[str] = []
    passages: list[Passage] = []
    stem = stem or _slug(path.stem)

    def close() -> None:
        body = "\n\n".join(pieces).strip()
        if len(body) >= MIN_PASSAGE_CHARS:
            passages.append(Passage(f"{stem}-{len(passages) + 1:03d}", title, body, str(path)))
        pieces.clear()

    for block in re.split(r"\n\s*\n", text):
        block = block.strip()
        if not block:
            continue
        heading = re.match(r"^#{1,6}\s+(.*)", block)
        if heading:
            close()
            title = heading.group(1).splitlines()[0].strip() or title
            block = block[heading.end() :].strip()
            if not block:
                continue
        *whole, block = _cut(block)
        for piece in whole:  # a passage each; the rest is gathered with what follows, as a paragraph is
            close()
            pieces.append(piece)
            close()
        if pieces and sum(map(len, pieces)) + len(block) > PASSAGE_CHARS:
            close()
        pieces.append(block)
    close()
    return passages


def _cut(block: str) -> list[str]:
    """``block`` in pieces of at most :data:`PASSAGE_CHARS`, cut at its last line end that fits, else its last
    space, else where the size says. A paragraph longer than a passage was one whole: a 2 MB export with no
    blank line went whole to the model (half a million tokens) and came back whole from the search tool."""
    pieces = []
    while len(block) > PASSAGE_CHARS:
        head = block[: PASSAGE_CHARS + 1]  # a separator just past the limit still leaves a piece that fits
        at = max(head.rfind("\n"), 0) or max(head.rfind(" "), 0) or PASSAGE_CHARS
        pieces.append(block[:at].rstrip())
        block = block[at:].lstrip()
    return [*pieces, block]


def _stems(files: Sequence[Path]) -> list[tuple[Path, str]]:
    """Each file with the stem of its passage ids: its name's slug, made unique (``faq``, ``faq-2``). Files named
    alike in two folders (``en/faq.md``, ``fr/faq.md``) gave the same ids, so the corpus held two ``faq-001`` and
    a case's ``relevant_docs`` named either."""
    taken: set[str] = set()
    stems = []
    for path in files:
        base = stem = _slug(path.stem)
        number = 1
        while stem in taken:
            number += 1
            stem = f"{base}-{number}"
        taken.add(stem)
        stems.append((path, stem))
    return stems


def normalised(text: str) -> str:
    """Lower case, punctuation and runs of spaces as one space: how an answer is looked for in its passage."""
    return " ".join(re.sub(r"[^\w%$€£.]+|(?<!\d)\.|\.(?!\d)", " ", text.lower()).split())


def answer_check(answer: str, passage: Passage) -> str | None:
    """Why a proposed answer is dropped (not stated in the passage, empty, too long), or None to keep it."""
    if not answer.strip():
        return "the answer is empty"
    if len(answer) > MAX_ANSWER_CHARS:
        return f"the answer is longer than {MAX_ANSWER_CHARS} characters"
    if normalised(answer) not in normalised(passage.text):
        return f"the answer {answer!r} does not appear in the passage"
    return None


def _unread(response: ModelResponse, *, called: bool) -> str:
    """Why a model's answer gave no question, in words that say what to change: "could not be read" alone
    looked the same for a refusal, an answer cut at the token limit and a server without tool calling."""
    if response.finish_reason == LENGTH:
        return "the answer was cut at the model's token limit (finish reason length)"
    if response.finish_reason == CONTENT_FILTER:
        return "the model refused (finish reason content_filter)"
    if called:
        return "the propose call's arguments are not a JSON object with a question and an answer"
    if response.text.strip():
        return "the model answered in text, not with the propose tool call (a refusal, or no tool calling)"
    return "the model's answer was empty"


async def _propose(model: Model, passage: Passage, unanswerable: bool) -> tuple[str, str] | str:
    """The model's question and answer for ``passage``, or why there is none."""
    prompt = (UNANSWERABLE if unanswerable else ANSWERABLE).format(title=passage.title, text=passage.text)
    messages = [{"role": "system", "content": SYSTEM_PROMPT}, {"role": "user", "content": prompt}]
    try:
        response = await model.complete(messages, tools=[PROPOSE_TOOL], tool_choice=PROPOSE)
    except Exception as exc:  # one passage's failed call costs that passage
        return f"the model call failed: {type(exc).__name__}: {exc}"
    calls = [c for c in response.tool_calls if c.name == PROPOSE]
    try:
        proposed = calls[0].parsed() if calls else None
    except ValueError:
        proposed = None
    if not isinstance(proposed, dict) or not all(isinstance(proposed.get(k), str) for k in ("question", "answer")):
        return _unread(response, called=bool(calls))
    question = proposed["question"].strip()
    if not question:
        return "the question is empty"
    return question, proposed["answer"].strip()


def generate(
    documents: Sequence[str | Path],
    model: Model,
    *,
    count: int = 50,
    unanswerable: float = 0.1,
    seed: int = 0,
    max_total_mb: float = MAX_TOTAL_MB,
    on_progress: Callable[[int, int], None] = lambda done, total: None,
) -> Generated:
    """Draft up to ``count`` cases from ``documents`` with ``model`` (see the module's description); the documents
    may hold ``max_total_mb`` together (:func:`check_total`)."""
    if not 0 <= unanswerable <= 1:
        raise UsageError("--unanswerable must be a share between 0 and 1")
    if count < 1:
        raise UsageError("-n must be at least 1")
    files = document_files(documents)
    check_total(files, max_total_mb)
    passages: list[Passage] = []
    unreadable: list[str] = []
    for path, stem in _stems(files):
        try:
            passages += split_passages(path, stem)
        except DocumentError as exc:
            unreadable += exc.lines()  # every such file said at once, before any model call
    if unreadable:
        raise DocumentError(*unreadable)  # a line each, kept apart: a file's name may hold a line break
    if not passages:
        raise UsageError(f"no passage of at least {MIN_PASSAGE_CHARS} characters in the documents")
    rng = random.Random(seed)
    chosen = rng.sample(passages, min(count, len(passages)))
    without = set(rng.sample(range(len(chosen)), round(len(chosen) * unanswerable)))
    answers: dict[int, tuple[str, str] | str] = {}

    async def ask_all() -> None:
        gate = asyncio.Semaphore(CONCURRENCY)

        async def one(index: int, passage: Passage) -> None:
            async with gate:
                answers[index] = await _propose(model, passage, index in without)
            on_progress(len(answers), len(chosen))

        try:
            await asyncio.gather(*(one(i, p) for i, p in enumerate(chosen)))
        finally:
            await model.aclose()

    try:
        asyncio.run(ask_all())
        interrupted = False
    except KeyboardInterrupt:  # the answers paid for so far are kept: the caller writes them
        interrupted = True
    cases: list[Case] = []
    dropped: list[Dropped] = []
    seen: set[str] = set()
    for index in sorted(answers):
        passage, found = chosen[index], answers[index]
        if isinstance(found, str):
            dropped.append(Dropped(passage.id, found))
            continue
        question, answer = found
        unknown = index in without
        problem = None if unknown else answer_check(answer, passage)
        if problem is None and question.lower() in seen:
            problem = "the same question was proposed for another passage"
        if problem is not None:
            dropped.append(Dropped(passage.id, problem))
            continue
        seen.add(question.lower())
        cases.append(
            Case(
                id=f"generated-{len(cases) + 1:04d}",
                input=question,
                expected_output=UNKNOWN_ANSWER if unknown else answer,
                category=UNANSWERABLE_CATEGORY if unknown else _category(passage),
                expected_tools=("search_documents",),
                relevant_docs=None if unknown else (passage.id,),
                tags=("generated",),
                metadata={"passage": passage.id, "source": passage.source, "generator": str(model.name)},
            )
        )
    return Generated(cases, passages, dropped, len(answers), interrupted)


def reason_kind(reason: str) -> str:
    """A dropped question's reason without the quoted answer, so alike reasons count together."""
    return "the answer does not appear in its passage" if "does not appear in the passage" in reason else reason


def dropped_counts(dropped: Sequence[Dropped]) -> list[tuple[str, int]]:
    """How many questions were dropped for each kind of reason, the most common first."""
    return Counter(reason_kind(d.reason) for d in dropped).most_common()


def nothing_kept(made: Generated, output: str) -> NothingKept:
    """The error for a draft that kept no question: what was dropped and why, and what to check."""
    return NothingKept(
        f"none of the {made.asked} questions asked was kept, so nothing was written to {output}: check that the "
        "model answers with a tool call (a model or server without tool calling cannot), then run again",
        *(f"  dropped {n}: {reason}" for reason, n in dropped_counts(made.dropped)),
    )


def check_outputs(documents: Sequence[str | Path], outputs: Sequence[tuple[str, str]], *, force: bool) -> None:
    """Refuse, before any model call, outputs that would lose what is saved: two options naming one file (the
    corpus was written over the cases), an output that is one of the documents read (even with ``force``), or a
    file that exists without ``force`` (a dataset someone curated was replaced without a word)."""
    sources = {path.resolve() for path in document_files(documents)}
    seen: dict[Path, str] = {}
    for option, path in outputs:
        resolved = Path(path).resolve()
        if resolved in seen:
            raise UsageError(f"{seen[resolved]} and {option} both name {path}; give each its own file")
        seen[resolved] = option
        if resolved in sources:
            raise UsageError(f"{option} {path}: is one of the documents read; choose another file")
        refuse_existing(option, path, force=force, holds="cases or a corpus saved before")
