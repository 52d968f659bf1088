"""``agenteval judge-check``: how well a judge agrees with human verdicts, before anyone gates on it.

Each line of a labels file gives a human ``pass`` or ``fail`` and either a stored trial (``trial_id``: its
final reply and its case are read from the store) or a ``reply`` with its ``case`` (the case format's fields).
The judge grades each item; agreement and Cohen's kappa with its interval compare it with the humans, and the
items where they disagree are listed. Items the judge could not grade are counted apart, not as a verdict.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from agenteval_instrumentation.capture import error_text

from ..analysis._stats import Kappa, cohens_kappa
from ..dataset._cases import Case, DatasetError, NotUtf8, parse_case, utf8_text
from ..dataset._file_kinds import open_regular
from ..errors import AgentevalError
from ..run._options import DEFAULT_JUDGE_CONCURRENCY, DEFAULT_MAX_RETRIES, DEFAULT_REQUEST_TIMEOUT
from ..store import Store
from ._base import Score
from ._judge import NAME, PROMPT_VERSION
from ._rescore import stored_cases


class LabelsError(AgentevalError):
    """A labels file that cannot be read: the message names the file and line."""


class NothingGraded(AgentevalError):
    """The judge graded none of the items (its API failed, or none of its answers could be read)."""


VERDICTS = {"pass": True, "passed": True, "true": True, "fail": False, "failed": False, "false": False}


@dataclasses.dataclass(frozen=True)
class Labelled:
    """One item with a human verdict: what is graded, and where it came from (a line of the labels file)."""

    line: int
    case: Case
    replies: tuple[str, ...]
    human: bool
    trial_id: str | None = None


@dataclasses.dataclass(frozen=True)
class Disagreement:
    line: int
    case_id: str
    trial_id: str | None
    human: bool
    judge: bool
    reasoning: str
    reply: str


@dataclasses.dataclass(frozen=True)
class JudgeCheck:
    """The judge against the humans: over the items it graded, and those it could not."""

    judge: str
    items: int
    graded: int
    ungraded: list[tuple[int, str]]
    """(line, why) of the items the judge could not grade."""
    kappa: Kappa | None
    disagreements: list[Disagreement]
    human_pass_rate: float | None
    judge_pass_rate: float | None

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


def _verdict(value: Any, where: str) -> bool:
    if isinstance(value, bool):
        return value
    if isinstance(value, str) and value.strip().lower() in VERDICTS:
        return VERDICTS[value.strip().lower()]
    raise LabelsError(f"{where}: human must be pass or fail (or true/false), not {value!r}")


def _records(path: str | Path) -> Iterator[tuple[int, Any]]:
    """The labels file's JSON values with their line numbers, blank lines skipped; read as the dataset loader
    reads (UTF-8, an optional byte order mark, LF or CRLF), a line that is not one an error naming it."""
    try:
        with open_regular(path) as handle:
            raw_lines = handle.read().splitlines()
    except OSError as exc:
        raise LabelsError(f"{path}: {exc.strerror or exc}") from exc
    started = False  # as the dataset loader: lines up to the first with content start the file (UTF-16 checks)
    for number, raw in enumerate(raw_lines, 1):
        where = f"{path}:{number}"
        try:
            line = utf8_text(raw, file_start=not started).removeprefix("\ufeff")
        except NotUtf8 as exc:
            raise LabelsError(f"{where}: {exc}") from None
        if not line.strip():
            continue
        started = True
        try:
            yield number, json.loads(line)
        except json.JSONDecodeError as exc:
            raise LabelsError(f"{where}: not JSON ({exc.msg})") from None
        except RecursionError:
            raise LabelsError(f"{where}: JSON nested too deeply; write one flat object a line") from None


def _once(first_line_of: dict[tuple[str, ...], int], item: tuple[str, ...], number: int, where: str) -> None:
    """A second verdict on one item (the same trial, or the same case and reply) counted it twice in the
    agreement and kappa, two opposite verdicts as a disagreement the judge could not avoid."""
    if item in first_line_of:
        raise LabelsError(
            f"{where}: the same {'trial' if item[0] == 'trial' else 'case and reply'} as line "
            f"{first_line_of[item]}; keep one human verdict per item"
        )
    first_line_of[item] = number


def read_labels(path: str | Path, store: Store | None = None) -> list[Labelled]:
    """The labelled items of ``path``; a line that cannot be read is an error naming it."""
    items: list[Labelled] = []
    trials: dict[str, dict[str, Any]] = {}
    cases_by_experiment: dict[str, dict[str, Case]] = {}
    first_line_of: dict[tuple[str, ...], int] = {}
    for number, record in _records(path):
        where = f"{path}:{number}"
        if not isinstance(record, dict):
            raise LabelsError(f"{where}: expected an object with trial_id or case and reply, and human")
        human = _verdict(record.get("human"), where)
        if "trial_id" in record:
            if store is None:
                raise LabelsError(f"{where}: a trial_id needs a store (--store)")
            if not trials:
                store.require()  # a mistyped --store said "no trial X in it", as if the id were wrong
                trials = {
                    row["trial_id"]: row
                    for row in store.rows("SELECT trial_id, experiment_id, case_id, reply FROM trials")
                }
            trial = trials.get(str(record["trial_id"]))
            if trial is None:
                raise LabelsError(f"{where}: no trial {record['trial_id']!r} in {store.root}")
            if trial["reply"] is None:
                raise LabelsError(
                    f"{where}: trial {record['trial_id']} has no stored reply (it failed, or ran with capture off)"
                )
            eid = trial["experiment_id"]
            if eid not in cases_by_experiment:
                cases_by_experiment[eid] = stored_cases(store, eid)
            case = cases_by_experiment[eid][trial["case_id"]]
            _once(first_line_of, ("trial", trial["trial_id"]), number, where)
            items.append(Labelled(number, case, (trial["reply"],), human, trial["trial_id"]))
            continue
        if not isinstance(record.get("case"), dict) or not isinstance(record.get("reply"), str):
            raise LabelsError(f"{where}: expected trial_id, or case (an object) and reply (a string)")
        try:
            case = parse_case(record["case"], number)
        except DatasetError as exc:
            raise LabelsError(f"{where}: case: {exc}") from None
        _once(first_line_of, ("reply", case.to_json(), record["reply"]), number, where)
        items.append(Labelled(number, case, (record["reply"],), human))
    if not items:
        raise LabelsError(f"{path}: no labelled items")
    return items


async def judge_items(judge: Any, items: list[Labelled], concurrency: int = DEFAULT_JUDGE_CONCURRENCY) -> list[Any]:
    """The judge's scores of ``items``, ``concurrency`` at a time."""
    gate = asyncio.Semaphore(concurrency)

    async def one(item: Labelled) -> Any:
        async with gate:
            try:
                return await judge.grade(item.case, item.replies)
            except AgentevalError:  # a missing key or SDK: the same for every item, said once
                raise
            except Exception as exc:  # the judge's API failed (after the client's retries): that item ungraded
                return Score(NAME, PROMPT_VERSION, None, None, "the judge could not be asked", error=error_text(exc))

    return await asyncio.gather(*(one(item) for item in items))


def judge_check(
    labels: str | Path,
    judge: str,
    *,
    base_url: str | None = None,
    store: Store | None = None,
    request_timeout: float = DEFAULT_REQUEST_TIMEOUT,
    max_retries: int = DEFAULT_MAX_RETRIES,
) -> JudgeCheck:
    """Grade every labelled item with ``judge`` (each request bounded by ``request_timeout`` seconds, a transient
    failure sent again at most ``max_retries`` times) and compare with the humans."""
    from ..models._model import named_model
    from ._judge import LLMJudge

    items = read_labels(labels, store)
    model = named_model(judge, "--judge", base_url=base_url, request_timeout=request_timeout, max_retries=max_retries)

    async def grade_all() -> list[Any]:
        try:
            return await judge_items(LLMJudge(model), items)
        finally:
            await model.aclose()

    scores = asyncio.run(grade_all())
    if all(score.passed is None for score in scores):  # nothing measured: an error, not a table of blanks
        first = scores[0].error or scores[0].reason
        raise NothingGraded(
            f"--judge {judge}: graded none of the {len(items)} labelled items in {labels}; the first: {first}; "
            "check --judge and --judge-base-url, then run again"
        )
    graded = [(item, score) for item, score in zip(items, scores, strict=True) if score.passed is not None]
    ungraded = [
        (item.line, score.error or score.reason)
        for item, score in zip(items, scores, strict=True)
        if score.passed is None
    ]
    kappa = cohens_kappa([i.human for i, _ in graded], [bool(s.passed) for _, s in graded]) if graded else None
    disagreements = [
        Disagreement(
            item.line, item.case.id, item.trial_id, item.human, bool(score.passed), score.reason, item.replies[-1]
        )
        for item, score in graded
        if item.human != score.passed
    ]
    return JudgeCheck(
        judge=judge,
        items=len(items),
        graded=len(graded),
        ungraded=ungraded,
        kappa=kappa,
        disagreements=disagreements,
        human_pass_rate=sum(i.human for i, _ in graded) / len(graded) if graded else None,
        judge_pass_rate=sum(bool(s.passed) for _, s in graded) / len(graded) if graded else None,
    )
