"""A dataset's card: who owns it, which reviewed revision it is, and when it was last reviewed, kept beside the
cases as ``NAME.card.json``. Datasets rot when the agent changes and they do not; the card is how ``audit`` and
``review --check`` tell that a review is due, or that the cases changed since the last one."""

from __future__ import annotations

import contextlib
import dataclasses
import datetime
import json
import os
import re
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from .._output_files import write_text
from ..errors import UsageError
from ._cases import Dataset, DatasetError, Problem, RefusedJson, load_file, strict_json
from ._catalog import builtin_names, datasets_dir
from ._file_kinds import open_regular
from ._review_lock import one_review_at_a_time

CARD_SUFFIX = ".card.json"
REVIEW_EVERY_DAYS = 90
"""How often a dataset is due for review unless its card says otherwise: a quarter."""
MAX_CARD_BYTES = 1 << 20
"""A card is a few lines; a larger file is not one (and is not read whole into memory)."""
_TEXT_FIELDS = ("owner", "description")
_OPTIONAL = ("description", "metadata")
"""Fields a card's file leaves out when empty."""
_DATE_FIELDS = ("created", "last_reviewed")
_FIELDS = ("owner", "description", "created", "last_reviewed", "version", "review_every_days", "reviewed_sha256")


@dataclasses.dataclass(frozen=True)
class DatasetCard:
    """Who owns a dataset and when it was last reviewed (``NAME.card.json`` beside ``NAME.jsonl``)."""

    owner: str
    created: datetime.date
    last_reviewed: datetime.date
    version: int = 1
    """The reviewed revision: 1 at the first review, one more at each review of changed cases."""
    review_every_days: int = REVIEW_EVERY_DAYS
    reviewed_sha256: str | None = None
    """The SHA-256 of the dataset file as it was reviewed (``agenteval review`` records it); None in a card
    written by hand, whose changes since cannot be told."""
    description: str = ""
    metadata: dict[str, Any] = dataclasses.field(default_factory=dict)

    def days_since_review(self, today: datetime.date | None = None) -> int:
        """Whole days from the last review to ``today`` (the local date by default)."""
        # 0 for a review dated tomorrow: written where the date is already tomorrow (see latest_date_on_earth)
        return max(0, ((today or datetime.date.today()) - self.last_reviewed).days)

    def needs_review(self, today: datetime.date | None = None) -> bool:
        """True once more than ``review_every_days`` have passed since the last review."""
        return self.days_since_review(today) > self.review_every_days

    def to_dict(self) -> dict[str, Any]:
        """Every field, always (what ``--json`` prints: its keys never depend on what the card holds)."""
        return {
            "owner": self.owner,
            "description": self.description,
            "created": self.created.isoformat(),
            "last_reviewed": self.last_reviewed.isoformat(),
            "version": self.version,
            "review_every_days": self.review_every_days,
            "reviewed_sha256": self.reviewed_sha256,
            "metadata": self.metadata,
        }

    def card_text(self) -> str:
        """The card's file: :meth:`to_dict` without an empty description or metadata, which a card need not have."""
        record = {key: value for key, value in self.to_dict().items() if key not in _OPTIONAL or value}
        return json.dumps(record, indent=2, ensure_ascii=False) + "\n"


@dataclasses.dataclass(frozen=True)
class ReviewStatus:
    """Where a dataset stands against its card: what ``audit`` shows and ``review --check`` checks."""

    card: DatasetCard
    days_since_review: int
    due: bool
    """More than the card's ``review_every_days`` since the last review."""
    changed_since_review: bool | None
    """The cases differ from those reviewed; None when the card does not say what was reviewed."""

    @property
    def current(self) -> bool:
        """Reviewed within its interval, and the cases are the ones reviewed (or the card cannot tell)."""
        return not self.due and not self.changed_since_review

    def to_dict(self) -> dict[str, Any]:
        """The card's fields, then the status: for ``audit --json`` and ``review --check --json``."""
        return {
            **self.card.to_dict(),
            "days_since_review": self.days_since_review,
            "due": self.due,
            "changed_since_review": self.changed_since_review,
            "current": self.current,
            "reasons": self.reasons(),
        }

    def reasons(self) -> list[str]:
        """Why a review is needed, in words; empty when :attr:`current`."""
        reasons = []
        if self.due:
            reasons.append(
                f"last reviewed {self.days_since_review} days ago ({self.card.last_reviewed.isoformat()}), "
                f"and it is reviewed every {self.card.review_every_days} days"
            )
        if self.changed_since_review:
            reasons.append(f"the cases changed since the last review ({self.card.last_reviewed.isoformat()})")
        return reasons


def card_path(dataset_path: str | os.PathLike[str]) -> Path:
    """Where the card of the dataset at ``dataset_path`` is: ``cases.jsonl`` -> ``cases.card.json``. A dataset that
    is a link has its card beside the file it links to, named after that file: the card describes those cases, so
    every checkout linking one shared dataset sees its owner's one review, and every run of it records that card."""
    path = _linked_file(Path(dataset_path))
    return path.with_name(path.name.removesuffix(".jsonl") + CARD_SUFFIX)


def _linked_file(path: Path) -> Path:
    """The file ``path`` names: through a link (or a chain of them), the file at its end; otherwise ``path`` as
    given (a card beside it is named as the user wrote the path)."""
    return Path(os.path.realpath(path)) if path.is_symlink() else path


def _beside_the_link(dataset_path: str | os.PathLike[str]) -> Path | None:
    """Where a card beside a linked dataset's link would be (agenteval looked there before cards followed links);
    None when the dataset is not a link."""
    path = Path(dataset_path)
    if not path.is_symlink():
        return None
    return path.with_name(path.name.removesuffix(".jsonl") + CARD_SUFFIX)


def keeps_a_card(dataset_path: str | os.PathLike[str]) -> bool:
    """Whether the dataset at ``dataset_path`` keeps a card: a user's file does; a built-in's file is agenteval's
    (its maintainers review it), and a generated dataset has no file."""
    path = Path(dataset_path)
    return path.is_file() and path.resolve().parent != datasets_dir().resolve()


def _reviewable(dataset_path: str | os.PathLike[str]) -> Dataset:
    """The cases to review or check: a built-in, by name or by its file, is refused, as it keeps no card."""
    path = Path(dataset_path)
    if (not path.exists() and str(dataset_path) in builtin_names()) or (path.is_file() and not keeps_a_card(path)):
        raise UsageError(
            f"{dataset_path} is a built-in dataset: built-in datasets have no card (agenteval's maintainers review "
            "them); review a dataset file of your own"
        )
    return load_file(path)  # a review of cases that do not load would record nothing useful


NO_CARD = "no card: record the first review with agenteval review {file} --owner NAME"


def check_review(dataset_path: str | os.PathLike[str], today: datetime.date | None = None) -> ReviewStatus:
    """Where the dataset at ``dataset_path`` stands against its card (what ``review --check`` says): the cases are
    loaded first, so a file that is not there says so rather than that it has no card. :class:`DatasetError` when
    it has no card."""
    dataset = _reviewable(dataset_path)
    card = read_card(dataset_path)
    if card is None:
        raise DatasetError([Problem(str(card_path(dataset_path)), 0, None, NO_CARD.format(file=dataset_path))])
    return review_status(card, dataset.hash, today)


def read_card(dataset_path: str | os.PathLike[str]) -> DatasetCard | None:
    """The card beside the dataset at ``dataset_path``, or None when it has none. A card that is not valid raises
    :class:`DatasetError` naming the card's file and each bad field."""
    path = card_path(dataset_path)
    try:
        with open_regular(path) as handle:
            data = handle.read(MAX_CARD_BYTES + 1)
    except FileNotFoundError:
        _refuse_a_card_left_beside_the_link(dataset_path, path)
        return None
    except OSError as exc:  # a pipe, a folder, no permission, a link to itself, an I/O error: one line, never a crash
        message = f"cannot be read as a card ({exc.strerror or exc})"
        raise DatasetError([Problem(str(path), 0, None, message)]) from None
    if len(data) > MAX_CARD_BYTES:
        raise DatasetError([Problem(str(path), 0, None, "is over 1 MiB: not a dataset card")])
    return parse_card(data, str(path))


def _refuse_a_card_left_beside_the_link(dataset_path: str | os.PathLike[str], card: Path) -> None:
    """A :class:`DatasetError` when a linked dataset has no card beside the file it links to but one beside the
    link: taken as none, it would be left behind unseen, and a review would start the card over at version 1."""
    stray = _beside_the_link(dataset_path)
    if stray is None or stray == card or not os.path.lexists(stray):
        return
    message = (
        f"a card beside the link {dataset_path}; a linked dataset's card sits beside the file it links to, where "
        f"every checkout linking it finds it: move it to {card}"
    )
    raise DatasetError([Problem(str(stray), 0, None, message)])


def parse_card(data: bytes, where: str) -> DatasetCard:
    """A card from its JSON text; :class:`DatasetError` listing every bad field, ``where`` naming the file."""
    record = _card_json(data, where)
    if not isinstance(record, dict):
        raise DatasetError([Problem(where, 0, None, "must be a JSON object of the card's fields")])
    problems: list[Problem] = []
    values: dict[str, Any] = {}

    def bad(field: str, message: str) -> None:
        problems.append(Problem(where, 0, field, message))

    for key in record:
        if key not in (*_FIELDS, "metadata"):
            bad(key, f"unknown field; a card has {', '.join(_FIELDS)} and metadata (anything else goes there)")
    for field in _TEXT_FIELDS:
        value = record.get(field, "")
        if not isinstance(value, str) or (field == "owner" and not value.strip()):
            bad(field, "must be a non-empty string" if field == "owner" else "must be a string")
        else:
            values[field] = value
    for field in _DATE_FIELDS:
        values[field] = _date(record, field, bad)
    for field, default in (("version", 1), ("review_every_days", REVIEW_EVERY_DAYS)):
        value = record.get(field, default)
        if isinstance(value, bool) or not isinstance(value, int) or not 1 <= value <= 1_000_000:
            bad(field, "must be a whole number from 1 to 1,000,000")
        values[field] = value
    sha = record.get("reviewed_sha256")
    if sha is not None and not (isinstance(sha, str) and len(sha) == 64 and all(c in "0123456789abcdef" for c in sha)):
        bad("reviewed_sha256", "must be 64 lower-case hex digits (agenteval review writes it), or null")
    metadata = record.get("metadata", {})
    if not isinstance(metadata, dict):
        bad("metadata", "must be a JSON object")
    created, reviewed = values["created"], values["last_reviewed"]
    if created and reviewed and reviewed < created:
        bad("last_reviewed", f"{reviewed.isoformat()} is before created ({created.isoformat()})")
    if problems:
        raise DatasetError(problems)
    return DatasetCard(
        owner=values["owner"],
        description=values["description"],
        created=created,
        last_reviewed=reviewed,
        version=values["version"],
        review_every_days=values["review_every_days"],
        reviewed_sha256=sha,
        metadata=metadata,
    )


def _card_json(data: bytes, where: str) -> Any:
    """The card's JSON, read by the case format's rules (:func:`strict_json`: a key given twice, a NaN or an infinity,
    an integer too long for Python and deep nesting are refused; json would keep the last key, and write the NaN back
    into the card, where strict readers refuse it), each a :class:`DatasetError` naming the card."""

    def refused(line: int, field: str | None, message: str) -> DatasetError:
        return DatasetError([Problem(where, line, field, message)])

    try:
        return strict_json(data.decode("utf-8-sig"))
    except UnicodeDecodeError:
        raise refused(0, None, "is not UTF-8 text") from None
    except json.JSONDecodeError as exc:
        raise refused(exc.lineno, None, f"invalid JSON at column {exc.colno}: {exc.msg}") from None
    except RefusedJson as exc:
        advice = "" if exc.non_finite is None else "; write a finite number or a string"
        raise refused(0, exc.field, exc.message + advice) from None


_WRITTEN_DATE = re.compile(r"\d{4}-\d{2}-\d{2}(?:T.+)?", re.ASCII)
"""A date as the docs give it, YYYY-MM-DD, or a date and time (ISO 8601) taken at the date it names: Python reads
more (``20260105``, the week date ``2026-W02-1``), which no other reader of the card would."""
_LAST_ZONE_AHEAD = datetime.timezone(datetime.timedelta(hours=14))
"""The zone furthest ahead (Kiribati, UTC+14): the first place to reach a date."""


def latest_date_on_earth() -> datetime.date:
    """The latest calendar date anywhere now. A card's dates are the days its writers saw: one reviewed "today"
    where it is already tomorrow is not in the future, and only a date no place has reached is."""
    return datetime.datetime.now(_LAST_ZONE_AHEAD).date()


def _date(record: dict[str, Any], field: str, bad: Any) -> datetime.date | None:
    value = record.get(field)
    if value is None:
        bad(field, "is required: a date as YYYY-MM-DD")
        return None
    when = None
    if isinstance(value, str) and _WRITTEN_DATE.fullmatch(value):
        with contextlib.suppress(ValueError):  # 2026-02-30 or a time that is none
            when = datetime.datetime.fromisoformat(value).date()
    if when is None:
        bad(field, f"{json.dumps(value)[:40]} is not a date; write it as YYYY-MM-DD")
        return None
    if when > latest_date_on_earth():
        bad(field, f"{when.isoformat()} is after today everywhere on Earth; write the day it happened")
        return None
    return when


def review_status(card: DatasetCard, dataset_sha256: str, today: datetime.date | None = None) -> ReviewStatus:
    """Where a dataset whose file hashes to ``dataset_sha256`` stands against ``card``."""
    changed = None if card.reviewed_sha256 is None else card.reviewed_sha256 != dataset_sha256
    return ReviewStatus(card, card.days_since_review(today), card.needs_review(today), changed)


def card_record(dataset: Dataset) -> dict[str, Any] | None:
    """What a run records of its dataset's card (in the experiment's ``environment``, as ``dataset_card``): the
    reviewed version and where the review stood that day. None without a card (built-in and generated datasets have
    none). An invalid card is warned of and not recorded: it says nothing about the agent, so it stops no run."""
    path = Path(dataset.path)
    if not keeps_a_card(path):
        return None
    try:
        card = read_card(path)
    except DatasetError as exc:
        warnings.warn(f"the dataset's card is not recorded with the experiment: {exc.lines()[0]}", stacklevel=2)
        return None
    if card is None:
        return None
    status = review_status(card, dataset.hash)
    return {
        "version": card.version,
        "owner": card.owner,
        "last_reviewed": card.last_reviewed.isoformat(),
        "review_due": status.due,
        "changed_since_review": status.changed_since_review,
    }


def review_dataset(
    dataset_path: str | os.PathLike[str],
    *,
    owner: str | None = None,
    review_every_days: int | None = None,
    description: str | None = None,
    today: datetime.date | None = None,
    on_wait: Callable[[], None] = lambda: None,
) -> DatasetCard:
    """Record a review of the dataset at ``dataset_path`` in its card, making one if it has none (``owner`` is then
    required): the review's date and the cases reviewed. The version goes up by one when the cases changed since
    the last review. The dataset must be valid; an invalid card is an error, never written over. Another review of
    the same dataset under way is waited for, after calling ``on_wait``."""
    if owner is not None and not owner.strip():
        raise UsageError("--owner: must not be empty")
    if review_every_days is not None and not 1 <= review_every_days <= 1_000_000:
        raise UsageError("--every: must be a whole number of days from 1 to 1,000,000")
    path = Path(dataset_path)
    with one_review_at_a_time(path, on_wait):  # from reading the card to writing it back: another review waits
        return _record_review(path, owner, review_every_days, description, today)


def _record_review(
    path: Path,
    owner: str | None,
    review_every_days: int | None,
    description: str | None,
    today: datetime.date | None,
) -> DatasetCard:
    dataset = _reviewable(path)
    today = today or datetime.date.today()
    card = read_card(path)
    if card is None:
        if owner is None or not owner.strip():
            raise UsageError(
                f"{path} has no card yet ({card_path(path)}): give --owner, the person or team who keeps the dataset"
            )
        card = DatasetCard(owner=owner, created=today, last_reviewed=today)
        version = 1
    else:
        changed = card.reviewed_sha256 != dataset.hash
        version = card.version + 1 if changed and card.reviewed_sha256 is not None else card.version
    reviewed = dataclasses.replace(
        card,
        owner=owner or card.owner,
        description=card.description if description is None else description,
        # Never back in time: a reviewer whose date is behind the last one's (another zone) would write a review
        # dated before it, or before the card's creation, which the card would then refuse.
        last_reviewed=max(today, card.last_reviewed),
        version=version,
        review_every_days=review_every_days or card.review_every_days,
        reviewed_sha256=dataset.hash,
    )
    write_text("card", card_path(path), reviewed.card_text())
    return reviewed
