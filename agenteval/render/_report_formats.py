"""Rendering a report: terminal tables, markdown, JSON, and one self-contained HTML file with plots.

Case ids, replies and failure messages are untrusted text: every format but JSON shows them through
:mod:`agenteval.render._text_safety` (HTML escaped, markdown literal, controls and bidirectional characters visible),
and the terminal view builds rich ``Text`` objects, never markup.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from ..analysis._report_data import versions_text  # dataclasses only: the analysis package loads lazily
from ._tables import markdown_table
from ._text_safety import html_text, markdown_cell, visible

if TYPE_CHECKING:  # the analysis brings in DuckDB: rendering is imported by every command, analysis by few
    from ..analysis._report_data import (
        CaseOutcomes,
        CategoryPassRate,
        Outcomes,
        Report,
        ScorerFigures,
        ShardProgress,
    )


def pct(value: float | None) -> str:
    return "–" if value is None else f"{value:.1%}"


def interval(ci: tuple[float, float] | None) -> str:
    return "–" if not ci else f"{ci[0]:.1%} to {ci[1]:.1%}"


def with_interval(value: float | None, ci: tuple[float, float] | None) -> str:
    """A rate and its 95% interval in one cell: "86.7% (70.3–94.7%)"."""
    if value is None or not ci:
        return pct(value)
    return f"{value:.1%} ({ci[0] * 100:.1f}–{ci[1]:.1%})"


def attempts_text(case: CaseOutcomes) -> str:
    """How a case's attempts ended, in words: "1 of 3 passed, 1 wrong answer, 1 failed (timeout)"."""
    said = [f"{case.passes} of {case.attempts} passed"]
    if case.wrong:
        said.append(f"{case.wrong} wrong answer{'s' if case.wrong != 1 else ''}")
    if case.failed:
        types = case.failures_by_type
        kinds = next(iter(types)) if len(types) == 1 else ", ".join(f"{kind} {n}" for kind, n in types.items())
        said.append(f"{case.failed} failed" + (f" ({kinds})" if kinds else ""))
    return ", ".join(said)


def ms(value: float | None) -> str:
    """A duration given in milliseconds, as every report and the dashboard show one: below 1 ms in microseconds, so
    a tool call of 0.25 ms is ``250.0 µs``, not ``0.2 ms``, and one of 40 µs not ``0.0 ms``."""
    if value is None:
        return "–"
    if abs(round(value * 1000, 1)) < 1000:
        return f"{value * 1000:.1f} µs"
    return f"{value:,.1f} ms"


def shards_line(shards: Sequence[ShardProgress]) -> str:
    """Each shard of an experiment run in shards: its status and trials, on one line."""
    return ", ".join(f"{s.shard} {s.status} ({s.trials} trials)" for s in shards)


Section = tuple[str, list[str], list[list[str]]]
"""A report's section as every format renders it: its heading, its columns, its rows."""


SCORER_COLUMNS = ["scorer", "kind", "pass rate / mean", "95% CI", "scored", "errors", "version (scores)"]
"""The columns of :func:`scorer_rows`."""


def scorer_rows(scorers: list[ScorerFigures]) -> list[list[str]]:
    """Each scorer's kind, pass rate (or mean) with its interval, counts, and the versions that gave its current
    scores, as the scorers' table of either report shows them."""
    return [
        [
            s.scorer,
            "continuous (mean)" if s.continuous else "pass/fail",
            pct(s.mean if s.continuous else s.pass_rate),
            interval(s.ci95),
            str(s.scored),
            str(s.errors),
            versions_text(s.versions),
        ]
        for s in scorers
    ]


def warning_section(warnings: list[str]) -> list[Section]:
    """The report's warnings as a section of their own, shown near the top; none without warnings."""
    return [("Warnings", ["warning"], [[w] for w in warnings])] if warnings else []


def _card_note(card: dict[str, Any] | None) -> str:
    """The dataset's card as the run found it: its reviewed version, and whether a review was due."""
    if not card:
        return ""
    note = f" · card version {card.get('version')}, reviewed {card.get('last_reviewed')}"
    if card.get("changed_since_review"):
        note += ", its cases changed since"
    if card.get("review_due"):
        note += ", a review was due"
    return visible(note)


def sections(report: Report) -> list[Section]:
    """The report as titled tables of text: what every format but JSON renders."""
    e, o = report.experiment, report.outcomes
    git = e.environment.get("git") or {}
    # Names are one line each: a line break in one (a dataset's file name, a case id, a category) shows as an
    # escape, where a cell's own line breaks (an error's) are kept: a case id "a\nb" in the flaky list read as two.
    about = [
        ["experiment", e.id + (f" ({visible(e.name)})" if e.name else "")],
        ["dataset", f"{visible(e.dataset)} (content {e.dataset_hash}{_card_note(e.dataset_card)})"],
        ["agent", f"{visible(e.agent)} · version {e.version}"],
        ["status", f"{e.status} · {report.trials} trials of {report.cases} cases"],
        *([["shards", shards_line(report.shards)]] if report.shards else []),
        *([["error", e.error]] if e.error else []),
        [
            "environment",
            f"Python {e.environment.get('python')} · {e.environment.get('platform')}"
            + (f" · git {git['commit'][:10]}{' (dirty)' if git.get('dirty') else ''}" if git else ""),
        ],
    ]
    overall = report.overall
    headline = [["pass rate", pct(overall.pass_rate), interval(overall.ci95), "standard error clustered by case"]]
    k_rows = [
        [str(k.k), pct(k.pass_at_k), interval(k.pass_at_k_ci95), pct(k.pass_hat_k), interval(k.pass_hat_k_ci95)]
        + [str(k.cases)]
        for k in overall.k
    ]
    categories = [
        [
            visible(c.category),
            str(c.cases),
            str(c.trials),
            pct(c.pass_rate),
            interval(c.ci95),
            " / ".join(with_interval(k.pass_hat_k, k.pass_hat_k_ci95) for k in c.k),
        ]
        for c in report.categories
    ]
    scorers = scorer_rows(report.scorers)

    def share(count: int) -> str:  # of no trials, no share: "passed 0 · 0.0%" read as a run that passed nothing
        return pct(count / report.trials if report.trials else None)

    outcomes = [
        ["passed", str(o.passed), share(o.passed)],
        ["wrong answers", str(o.wrong), pct(o.wrong_share)],
        ["failures", str(o.failed), pct(o.failed_share)],
        ["  of which infrastructure", str(o.infrastructure_failures), share(o.infrastructure_failures)],
    ] + [[f"  {kind}", str(n), share(n)] for kind, n in o.failures_by_type.items()]
    latency = [["trial", ms(report.latency.trial_p50_ms), ms(report.latency.trial_p95_ms), str(report.trials)]]
    latency += [[s.operation, ms(s.p50_ms), ms(s.p95_ms), str(s.spans)] for s in report.latency.spans]
    tokens = [
        [
            t.role,
            t.model or "–",
            str(t.model_calls),
            str(t.input_tokens or 0),
            str(t.output_tokens or 0),
            "–" if t.cost_usd is None else f"${t.cost_usd:.4f}",
        ]
        for t in report.tokens
    ]
    costs = (
        ("agent cost, tries that count", report.cost_usd),
        ("agent cost, every try", report.cost_usd_all_tries),
    )
    for label, cost in costs:
        tokens.append([label, "", "", "", "", "–" if cost is None else f"${cost:.4f}"])
    worst = [
        [visible(w.case_id), visible(w.category), attempts_text(w), (w.a_failure or "")[:80]]
        for w in report.worst_cases
    ]
    flaky = report.flaky
    conversations = [
        [visible(c.case_id), str(c.attempt), role, text[:300]] for c in report.conversations for role, text in c.turns
    ]
    talks = (
        [("Conversations with simulated users", ["case", "attempt", "who", "said"], conversations)]
        if conversations
        else []
    )
    return [
        ("Experiment", ["", ""], about),
        *warning_section(report.warnings),
        ("Pass rate", ["", "value", "95% CI", "note"], headline),
        ("pass@k and pass^k (over cases)", ["k", "pass@k", "95% CI", "pass^k", "95% CI", "cases"], k_rows),
        (
            "By category",
            ["category", "cases", "trials", "pass rate", "95% CI", "pass^k (95% CI) for k = 1.."],
            categories,
        ),
        ("Scorers (current scores)", SCORER_COLUMNS, scorers),
        ("Failures apart from wrong answers", ["outcome", "trials", "share"], outcomes),
        ("Latency", ["of", "p50", "p95", "count"], latency),
        (
            "Tokens and cost (the agent's apart from the judge's and the simulated user's)",
            ["role", "model", "calls", "input", "output", "cost"],
            tokens,
        ),
        (
            f"Flaky cases: {flaky.count} with mixed outcomes across attempts",
            ["case"],
            [[visible(c)] for c in flaky.cases],
        ),
        ("Worst cases", ["case", "category", "its attempts", "a failure"], worst),
        *talks,
    ]


def markdown_document(heading: str, parts: list[Section]) -> str:
    """A report as markdown: a heading, then one table per section."""
    out = [f"# {markdown_cell(heading)}"]
    for title, header, rows in parts:
        out += ["", f"## {markdown_cell(title)}", "", markdown_table(header, rows)]
    return "\n".join(out) + "\n"


def terminal_document(parts: list[Section], behind: str, heading: str | None = None) -> Any:
    """A report for the terminal: one rich table per section, then where its figures come from."""
    from rich.console import Group
    from rich.text import Text

    from ._tables import rich_table

    shown: list[Any] = [] if heading is None else [Text(heading)]
    shown += [rich_table(header, rows, title=title) for title, header, rows in parts]
    shown.append(Text(f"Figures come from DuckDB over the store; agenteval sql shows {behind}."))
    return Group(*shown)


def to_markdown(report: Report) -> str:
    return markdown_document(f"Report: {report.experiment.id}", sections(report))


def to_json(report: Report) -> str:
    return json.dumps(report.to_dict(), indent=2, default=str)


def to_terminal(report: Report) -> Any:
    return terminal_document(sections(report), "the tables behind them")


# --- HTML -----------------------------------------------------------------------------------

STYLE = """
body{font:14px/1.45 system-ui,sans-serif;margin:2rem auto;max-width:980px;color:#1f2933;padding:0 1rem}
h1{font-size:1.4rem}h2{font-size:1.1rem;margin-top:2rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5rem 0}td,th{padding:.25rem .6rem;border-bottom:1px solid #eee;text-align:left}
th{font-weight:600;background:#f5f7fa}svg text{font:11px system-ui,sans-serif;fill:#333}
.note{color:#666;font-size:12px}
"""


def html_table(header: list[str], rows: list[list[str]]) -> str:
    e = html_text
    head = "".join(f"<th>{e(h)}</th>" for h in header) if any(header) else ""
    body = "".join("<tr>" + "".join(f"<td>{e(v)}</td>" for v in row) + "</tr>" for row in rows)
    return f"<table>{f'<tr>{head}</tr>' if head else ''}{body}</table>"


def category_plot(categories: list[CategoryPassRate]) -> str:
    """Pass rate by category with 95% interval bars."""
    e = html_text
    row, left, width = 24, 170, 520
    height = row * len(categories) + 30
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 60}" height="{height}" '
        'role="img" aria-label="pass rate by category with 95% intervals">'
    ]
    for i, c in enumerate(categories):
        y = 10 + i * row
        rate = c.pass_rate or 0.0
        parts.append(f'<text x="{left - 8}" y="{y + 14}" text-anchor="end">{e(c.category)}</text>')
        parts.append(
            f'<rect x="{left}" y="{y + 3}" width="{rate * width:.1f}" height="14" fill="#6c9bd2">'
            f"<title>{e(c.category)}: {pct(rate)} ({e(interval(c.ci95))})</title></rect>"
        )
        if c.ci95:
            low, high = c.ci95
            parts.append(
                f'<line x1="{left + low * width:.1f}" x2="{left + high * width:.1f}" y1="{y + 10}" '
                f'y2="{y + 10}" stroke="#1f2933" stroke-width="1.5"/>'
            )
        parts.append(f'<text x="{left + width + 6}" y="{y + 14}">{pct(rate)}</text>')
    for tick in (0, 0.5, 1):
        x = left + tick * width
        parts.append(
            f'<line x1="{x}" x2="{x}" y1="6" y2="{height - 18}" stroke="#ccc"/>'
            f'<text x="{x}" y="{height - 4}" text-anchor="middle">{tick:.0%}</text>'
        )
    return "".join(parts) + "</svg>"


def latency_histogram(sample: list[float], bins: int = 30) -> str:
    """A latency distribution (from a uniform sample of trials or traces)."""
    if not sample:
        return '<p class="note">no trials</p>'
    low, high = sample[0], sample[-1]
    span = (high - low) or 1.0
    counts = [0] * bins
    for value in sample:
        counts[min(int((value - low) / span * bins), bins - 1)] += 1
    top, width, height = max(counts), 600, 140
    bar = width / bins
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{width + 20}" height="{height + 30}" role="img" '
        'aria-label="trial latency distribution">'
    ]
    for i, n in enumerate(counts):
        h = n / top * height
        parts.append(
            f'<rect x="{10 + i * bar:.1f}" y="{height - h:.1f}" width="{bar - 1:.1f}" height="{h:.1f}" '
            f'fill="#8fb98b"><title>{n} trials</title></rect>'
        )
    parts.append(
        f'<text x="10" y="{height + 16}">{ms(low)}</text>'
        f'<text x="{width + 10}" y="{height + 16}" text-anchor="end">{ms(high)}</text>'
    )
    return "".join(parts) + "</svg>"


def failure_plot(outcomes: Outcomes) -> str:
    """An experiment's failures by type as horizontal bars."""
    return failure_bars(outcomes.failures_by_type)


def failure_bars(counts: dict[str, int]) -> str:
    """Failures by type as horizontal bars."""
    kinds = list(counts.items())
    if not kinds:
        return '<p class="note">no failures</p>'
    e = html_text
    top, row, left, width = max(n for _, n in kinds), 22, 200, 400
    parts = [
        f'<svg xmlns="http://www.w3.org/2000/svg" width="{left + width + 60}" height="{row * len(kinds) + 10}" '
        'role="img" aria-label="failures by type">'
    ]
    for i, (kind, n) in enumerate(kinds):
        y = 4 + i * row
        parts.append(
            f'<text x="{left - 8}" y="{y + 13}" text-anchor="end">{e(kind)}</text>'
            f'<rect x="{left}" y="{y + 2}" width="{n / top * width:.1f}" height="14" fill="#d28c6c"/>'
            f'<text x="{left + n / top * width + 6:.1f}" y="{y + 13}">{n}</text>'
        )
    return "".join(parts) + "</svg>"


def html_page(title: str, body: list[str]) -> str:
    """A self-contained page of ``body`` (HTML already made safe) under ``title`` (plain text)."""
    return (
        '<!doctype html><html lang="en"><head><meta charset="utf-8">'
        f"<title>{html_text(title)}</title><style>{STYLE}</style></head>"
        f"<body>{''.join(body)}</body></html>\n"
    )


def to_html(report: Report) -> str:
    """One self-contained page: inline CSS and SVG, no script, no network access needed."""
    plots = {
        "By category": category_plot(report.categories),
        "Latency": latency_histogram(report.latency.trial_sample_ms),
        "Failures apart from wrong answers": failure_plot(report.outcomes),
    }
    experiment = report.experiment.id
    return html_document(f"Report: {experiment}", f"agenteval report {experiment}", sections(report), plots)


def html_document(heading: str, page_title: str, parts: list[Section], plots: dict[str, str]) -> str:
    """A report as one self-contained page: a table per section, after the plot (inline SVG) of that name."""
    body = [f"<h1>{html_text(heading)}</h1>"]
    for title, header, rows in parts:
        body.append(f"<h2>{html_text(title)}</h2>")
        if title in plots:
            body.append(plots[title])
        body.append(html_table(header, rows))
    return html_page(page_title, body)


FORMATS = {"markdown": to_markdown, "json": to_json, "html": to_html}
