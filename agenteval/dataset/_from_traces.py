"""Production traces as dataset cases: each matching trace's conversation becomes a case whose expected answer a
person fills in ("every bug report is a potential eval case")."""

from __future__ import annotations

import dataclasses
import datetime
import os
from pathlib import Path
from typing import Any

import duckdb

from .._output_files import refuse_existing, write_jsonl
from ..errors import AgentevalError, UsageError
from ..render._counted import counted
from ..store import Store
from ..store._store import NotReadOnly
from ._cases import parse_case

WHERE_OPTION = "--where"

CANDIDATES = """
SELECT trace_id, service, started_at, user_messages, input, output, status, error_type
FROM traces WHERE ({where}) ORDER BY started_at, trace_id
"""


@dataclasses.dataclass
class CasesFromTraces:
    """What ``cases-from-traces`` wrote: cases, and matching traces left out for want of an input."""

    path: str
    cases: int
    matched: int
    without_input: list[str] = dataclasses.field(default_factory=list)
    """Trace ids of matching traces that recorded no user message or input (content capture off)."""
    blank_input: list[str] = dataclasses.field(default_factory=list)
    """Trace ids of matching traces whose recorded input was blank (only whitespace): capture was on."""

    def left_out(self) -> list[str]:
        """Why matching traces became no case, one phrase per reason with its count, e.g. "1 trace whose input was
        blank (only whitespace)"."""
        return left_out(self.without_input, self.blank_input)


def left_out(without_input: list[str], blank_input: list[str]) -> list[str]:
    """The phrases of :meth:`CasesFromTraces.left_out`: a trace with capture off and one whose user sent only
    whitespace are told apart, as the one wants capture turned on and the other nothing."""
    reasons = [
        (without_input, "that recorded no input (content capture off)"),
        (blank_input, "whose input was blank (only whitespace)"),
    ]
    return [f"{counted(len(ids), 'trace')} {why}" for ids, why in reasons if ids]


def _recorded_any_input(row: dict[str, Any]) -> bool:
    """Whether the trace recorded a user message or an input at all, blank or not (NULL with capture off)."""
    return any(u is not None for u in row.get("user_messages") or []) or row.get("input") is not None


def trace_record(row: dict[str, Any]) -> dict[str, Any] | None:
    """A case (as a dataset line) from a ``traces`` row: its user messages as ``input`` (one) or ``turns``
    (several), ``expected_output`` empty for a person to fill, the trace kept in ``metadata``; None without input."""
    users = [u for u in row.get("user_messages") or [] if u and u.strip()]
    if not users and row.get("input") and str(row["input"]).strip():
        users = [str(row["input"])]
    if not users:
        return None
    started = row["started_at"]
    metadata = {
        "trace_id": row["trace_id"],
        "service": row["service"],
        "started_at": started.astimezone(datetime.UTC).isoformat() if started else None,
        "observed_output": row.get("output"),
        "status": row.get("status"),
        "error_type": row.get("error_type"),
    }
    record: dict[str, Any] = {"id": f"trace-{row['trace_id']}"}
    record.update({"input": users[0]} if len(users) == 1 else {"turns": users})
    record["expected_output"] = ""
    record["metadata"] = {key: value for key, value in metadata.items() if value is not None}
    return record


def matching_traces(store: Store, where: str) -> list[dict[str, Any]]:
    """The ``traces`` rows matching the SQL condition ``where``, read-only as ``agenteval sql`` reads (one read
    statement on a locked connection); a condition that is not one is a :class:`UsageError` naming the option."""
    if not where.strip():
        raise UsageError(f"{WHERE_OPTION}: give a SQL condition on the traces view, e.g. \"status = 'ERROR'\"")
    try:
        return store.query(CANDIDATES.format(where=where), read_only=True).to_pylist()
    except (NotReadOnly, duckdb.Error) as exc:
        message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
        raise UsageError(f"{WHERE_OPTION} {where!r}: {message}") from None


class NoCases(AgentevalError):
    """No matching trace had a conversation: the file would hold no case, which ``validate`` and ``run`` refuse
    (and over a file with ``--force``, would replace filled-in cases with nothing)."""


def _nothing_to_write(where: str, target: Path, matched: int, reasons: list[str]) -> NoCases:
    found = (
        f"{counted(matched, 'trace')} matched, all left out: {' and '.join(reasons)}"
        if matched
        else "no trace matches it"
    )
    return NoCases(
        f"{WHERE_OPTION} {where!r}: {found}, so nothing was written to -o {target}; widen the condition "
        '(agenteval sql "SELECT * FROM traces" shows what there is)'
    )


def _each_trace_once(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The first row of each trace: a condition that gives a trace twice (a ``UNION ALL`` in it) wrote two cases of
    one id, a file ``validate`` refuses."""
    seen: set[str] = set()
    once = []
    for row in rows:
        if row["trace_id"] not in seen:
            seen.add(row["trace_id"])
            once.append(row)
    return once


def cases_from_traces(
    store: Store, where: str, output: str | os.PathLike[str], *, force: bool = False
) -> CasesFromTraces:
    """Write the conversations of production traces matching ``where`` (a SQL condition on the ``traces`` view) to
    ``output`` as JSONL dataset cases, each checked by the dataset format's own rules; refuses to overwrite a file
    (cases people filled in) unless ``force``."""
    target = Path(output)
    refuse_existing("-o", target, force=force, holds="its expected outputs may be filled in")
    rows = _each_trace_once(matching_traces(store, where))
    records: list[dict[str, Any]] = []
    without: list[str] = []
    blank: list[str] = []
    for row in rows:
        record = trace_record(row)
        if record is None:
            (blank if _recorded_any_input(row) else without).append(row["trace_id"])
            continue
        parse_case(record, len(records) + 1)  # a case this writes is one the dataset format accepts
        records.append(record)
    if not records:
        raise _nothing_to_write(where, target, len(rows), left_out(without, blank))
    write_jsonl("-o", target, records, force=force)
    return CasesFromTraces(str(target), len(records), len(rows), without, blank)
