"""Rendering a report on production traces in the formats of an experiment's report (terminal tables, markdown,
JSON, one self-contained HTML page in the same style). Trace ids, services, tool names and failure messages are
untrusted text, shown through :mod:`agenteval.render._text_safety` as the experiment report shows its own."""

from __future__ import annotations

import datetime
import json
from typing import TYPE_CHECKING, Any

from ..analysis._report_data import mixed_versions
from ._report_formats import (
    SCORER_COLUMNS,
    Section,
    failure_bars,
    html_document,
    interval,
    latency_histogram,
    markdown_document,
    ms,
    pct,
    scorer_rows,
    terminal_document,
    warning_section,
)

if TYPE_CHECKING:  # the analysis brings in DuckDB
    from ..analysis._traces import TracesReport

MESSAGE_SHOWN = 120


def _money(value: float | None) -> str:
    return "–" if value is None else f"${value:.4f}"


def _when(value: datetime.datetime | None) -> str:
    return "–" if value is None else value.astimezone(datetime.UTC).strftime("%Y-%m-%d %H:%M:%S UTC")


def title(report: TracesReport) -> str:
    window = report.window
    scope = f"service {window.service}" if window.service else "all services"
    return f"Production traces: {scope}" + (f", since {_when(window.since)}" if window.since else "")


def sections(report: TracesReport) -> list[Section]:
    """The report as titled tables of text: what every format but JSON renders."""
    w, f, lat = report.window, report.failures, report.latency
    about = [
        ["service", w.service or "all"],
        ["since", _when(w.since) if w.since else "the first trace in the store"],
        ["traces started", f"{_when(w.first_started_at)} to {_when(w.last_started_at)}"],
        ["calls", str(report.calls)],
        ["cost", _money(report.cost_usd)],
    ]
    failures = [
        ["failed", f"{f.failed} of {f.calls}", pct(f.rate), interval(f.ci95)],
        ["  of which infrastructure", str(f.infrastructure), pct(f.infrastructure / f.calls if f.calls else None), ""],
    ] + [
        [f"  {kind}", str(n), pct(n / f.calls if f.calls else None), ""] for kind, n in report.failures_by_type.items()
    ]
    latency = [["trace", ms(lat.p50_ms), ms(lat.p90_ms), ms(lat.p95_ms), ms(lat.p99_ms), str(report.calls)]]
    spans = [[s.operation, ms(s.p50_ms), "", ms(s.p95_ms), "", str(s.spans)] for s in report.spans]
    services = [
        [s.service, str(s.calls), str(s.failed), pct(s.failure_rate), interval(s.ci95), ms(s.p50_ms), ms(s.p95_ms)]
        for s in report.services
    ]
    models = [
        [m.model or "–", str(m.model_calls), str(m.input_tokens or 0), str(m.output_tokens or 0), _money(m.cost_usd)]
        for m in report.models
    ]
    tools = [
        [
            t.tool or "–",
            str(t.calls),
            str(t.errors),
            ms(t.p50_ms),
            ms(t.p95_ms),
            str(t.model_calls),
            str(t.input_tokens),
            str(t.output_tokens),
            _money(t.cost_usd),
        ]
        for t in report.tools
    ]
    scorers = scorer_rows(report.scorers)
    latest = [
        [_when(x.started_at), x.service, x.trace_id, x.failure_type, x.message[:MESSAGE_SHOWN]]
        for x in report.latest_failures
    ]
    return [
        ("Traces", ["", ""], about),
        *warning_section(mixed_versions(report.scorers, "traces")),
        ("Failures by type (the classifier of trials)", ["", "traces", "share", "95% CI"], failures),
        ("Latency", ["of", "p50", "p90", "p95", "p99", "count"], latency + spans),
        ("By service", ["service", "calls", "failed", "share", "95% CI", "p50", "p95"], services),
        ("Tokens and cost by model", ["model", "calls", "input", "output", "cost"], models),
        (
            "Tools (model calls beneath a tool's spans count for it)",
            ["tool", "calls", "errors", "p50", "p95", "model calls", "input", "output", "cost"],
            tools,
        ),
        ("Online evaluation (current scores)", SCORER_COLUMNS, scorers),
        ("Latest failures", ["started", "service", "trace", "type", "message"], latest),
    ]


def to_markdown(report: TracesReport) -> str:
    return markdown_document(title(report), sections(report))


def _json_value(value: object) -> str:
    """Times as ISO 8601 in UTC (``2026-12-05T03:36:19.461950+00:00``); ``str`` gave a space for the ``T``."""
    if isinstance(value, datetime.datetime):
        return value.astimezone(datetime.UTC).isoformat()
    return str(value)


def to_json(report: TracesReport) -> str:
    return json.dumps(report.to_dict(), indent=2, default=_json_value)


def to_terminal(report: TracesReport) -> Any:
    return terminal_document(sections(report), "the traces view behind them", heading=title(report))


def to_html(report: TracesReport) -> str:
    """One self-contained page in the experiment report's style: inline CSS and SVG, no script."""
    plots = {
        "Failures by type (the classifier of trials)": failure_bars(report.failures_by_type),
        "Latency": latency_histogram(report.latency.sample_ms),
    }
    return html_document(title(report), f"agenteval {title(report)}", sections(report), plots)


FORMATS = {"markdown": to_markdown, "json": to_json, "html": to_html}
