"""The built-in datasets: JSONL files shipped inside the wheel, and ``arithmetic``, generated."""

from __future__ import annotations

import dataclasses
import hashlib
import struct
from collections.abc import Callable
from importlib import resources
from pathlib import Path

from ..errors import UsageError
from ._cases import Case, Dataset, DatasetError, Problem, dataset_hash, load_file

GENERATED = "arithmetic"
DEFAULT_ARITHMETIC_CASES = 100
RAG_CORPUS = "rag_corpus.jsonl"

_OPERATIONS = {
    "addition": ("+", lambda a, b: a + b),
    "subtraction": ("-", lambda a, b: a - b),
    "multiplication": ("*", lambda a, b: a * b),
    "division": ("/", None),
}


def datasets_dir() -> Path:
    """Where the built-in files are: ``agenteval/datasets`` in an installed wheel, ``datasets/`` in a checkout."""
    packaged = Path(str(resources.files("agenteval"))) / "datasets"
    if packaged.is_dir():
        return packaged
    return Path(__file__).resolve().parents[2] / "datasets"


def builtin_names() -> list[str]:
    """Names of the built-in datasets, ``arithmetic`` first."""
    files = sorted(p.stem for p in datasets_dir().glob("*.jsonl") if p.name != RAG_CORPUS)
    return [GENERATED, *files]


MAX_ARITHMETIC_CASES = 1_000_000
"""The most generated cases a run may ask for: about 1 GB of cases and plans, held for the run."""


def arithmetic_cases(count: int = DEFAULT_ARITHMETIC_CASES, seed: int = 0) -> list[Case]:
    """``count`` arithmetic questions over four categories, the same ones for the same seed.

    Case ``i`` depends only on ``seed`` and ``i``, so asking for more cases keeps the first ones.
    """
    if not 1 <= count <= MAX_ARITHMETIC_CASES:
        raise UsageError(
            f"--cases must be between 1 and {MAX_ARITHMETIC_CASES:,} (got {count:,}); "
            "each case is held in memory for the run"
        )
    names = list(_OPERATIONS)
    cases = []
    for i in range(count):
        draw = _draws(seed, i)
        category = names[i % len(names)]
        symbol, apply = _OPERATIONS[category]
        if apply is None:  # exact division only: the answer is an integer
            b, answer = draw(2, 25), draw(2, 400)
            a = b * answer
        else:
            a, b = draw(2, 999), draw(2, 999 if category != "multiplication" else 99)
            answer = apply(a, b)
        cases.append(
            Case(
                id=f"arithmetic-{i + 1:04d}",
                input=f"What is {a} {symbol} {b}?",
                expected_output=str(answer),
                category=category,
                expected_tools=("calculator",),
                difficulty="easy",
            )
        )
    return cases


def _draws(seed: int, index: int) -> Callable[[int, int], int]:
    """Integers in ``[low, high]`` that depend only on ``seed`` and ``index``: a hash, where a
    ``random.Random`` per case cost most of the time of generating 100,000 cases."""
    numbers = iter(
        struct.unpack("<4I", hashlib.blake2b(f"arithmetic:{seed}:{index}".encode(), digest_size=16).digest())
    )
    return lambda low, high: low + next(numbers) % (high - low + 1)


def load_dataset(name_or_path: str | Path, *, cases: int | None = None, seed: int = 0) -> Dataset:
    """A built-in dataset by name, or a JSONL file by path; every case validated.

    ``cases`` and ``seed`` apply to the generated ``arithmetic`` dataset (``cases`` with another dataset is a
    :class:`~agenteval.errors.UsageError`: ``--sample`` is how to run some of a file's cases). A bad file raises
    :class:`~agenteval.dataset.DatasetError` naming each bad line and field.
    """
    text = str(name_or_path)
    if text == GENERATED:
        generated = arithmetic_cases(DEFAULT_ARITHMETIC_CASES if cases is None else cases, seed)  # 0 is refused
        return Dataset(
            GENERATED, f"{GENERATED}(cases={len(generated)}, seed={seed})", dataset_hash(generated), generated
        )
    if cases is not None:
        # Silently running all 55 cases of `hard` when 20 were asked for wastes a model budget.
        raise UsageError(
            f"--cases sets the size of the generated {GENERATED} dataset; {text} is a file of cases: "
            "to run some of them, use --sample N (N cases spread across its categories)"
        )
    builtin = datasets_dir() / f"{text}.jsonl"
    if "/" not in text and "\\" not in text and not text.endswith(".jsonl") and builtin.is_file():
        return load_file(builtin, text)
    path = Path(text)
    if not path.exists():
        raise DatasetError(
            [Problem(text, 0, None, f"no such file, and not a built-in dataset ({', '.join(builtin_names())})")]
        )
    return load_file(path)


@dataclasses.dataclass(frozen=True)
class CatalogEntry:
    """A built-in dataset as ``agenteval datasets`` lists it."""

    name: str
    cases: int | None
    categories: dict[str, int | None]
    """Each category's cases; None for a generated dataset, whose count follows ``--cases``."""


def catalog() -> list[CatalogEntry]:
    """Every built-in dataset with its case count and the cases in each category (None when generated: ``--json``
    listed the generated dataset's categories at one case each, as it happens to be built for listing)."""
    entries = []
    for name in builtin_names():
        if name == GENERATED:
            categories = load_dataset(name, cases=len(_OPERATIONS)).categories()
            entries.append(CatalogEntry(name, None, dict.fromkeys(categories)))
        else:
            dataset = load_dataset(name)
            entries.append(CatalogEntry(name, len(dataset), dict(dataset.categories())))
    return entries
