"""Terminal renderings of the dataset reports (rich tables; cell text is never parsed as markup, and control and
bidirectional characters in it show as escapes: see text_safety)."""

from __future__ import annotations

from typing import Any

from rich.console import Group, RenderableType
from rich.text import Text

from ..analysis._experiments import Summary
from ..analysis._power import PowerTable
from ..dataset._audit import AuditReport, Judging
from ..dataset._cases import DIFFICULTIES
from ..dataset._catalog import CatalogEntry
from ._counted import counted
from ._report_formats import shards_line
from ._tables import rich_table
from ._text_safety import visible


def catalog_view(entries: list[CatalogEntry]) -> RenderableType:
    rows = []
    for entry in entries:
        cases = "--cases N (generated)" if entry.cases is None else str(entry.cases)
        categories = ", ".join(f"{name} {count}" if entry.cases else name for name, count in entry.categories.items())
        rows.append([entry.name, cases, str(len(entry.categories)), categories])
    return rich_table(["dataset", "cases", "categories", "cases per category"], rows, title="Built-in datasets")


def audit_view(report: AuditReport) -> RenderableType:
    present = {d for row in report.difficulties.values() for d in row}
    difficulty_names = [d for d in (*DIFFICULTIES, "unset") if d in present]
    rows = [
        [visible(category), str(count), *(str(report.difficulties[category].get(d, 0)) for d in difficulty_names)]
        for category, count in report.categories.items()
    ]
    parts: list[RenderableType] = [
        Text(f"{visible(report.dataset)}: {report.cases} cases in {len(report.categories)} categories", style="bold"),
        *_card_view(report),
        rich_table(["category", "cases", *difficulty_names], rows, title="Cases per category and difficulty"),
        rich_table(["field", "cases using it"], [[f, str(n)] for f, n in report.fields.items()], title="Fields used"),
    ]
    parts.extend(_judging_view(report.judging))
    if report.thin_categories:
        thin = ", ".join(f"{c} ({n})" for c, n in report.thin_categories.items())
        parts.append(
            Text(
                f"Too few cases to measure (fewer than {report.min_per_category}): {visible(thin)}. "
                "Add several cases per category before trusting its pass rate.",
                style="yellow",
            )
        )
    else:
        parts.append(Text(f"Every category has at least {report.min_per_category} cases.", style="green"))
    if report.duplicates:
        parts.append(rich_table(["duplicate inputs (case ids)"], [[_ids(g)] for g in report.duplicates]))
    if report.reordered:
        parts.extend(_reordered_view(report.reordered))
    if report.near_duplicates:
        parts.extend(_near_duplicates_view(report))
    if not report.duplicates and not report.reordered and not report.near_duplicates:
        parts.append(Text("No duplicate, reordered or near-duplicate inputs.", style="green"))
    return Group(*parts)


SHOWN_IDS = 10
SHOWN_PAIRS = 50
"""Near-duplicate pairs the terminal shows; ``audit --json`` lists more (see ``MAX_LISTED_PAIRS``)."""
SHOWN_GROUPS = 10


def _ids(ids: list[str]) -> str:
    """Case ids as one cell, each on the line it shares with the others: a table cell keeps line breaks (for
    replies), and an id holding one split the list, showing ids that are not there."""
    return ", ".join(visible(i) for i in ids)


def _reordered_view(groups: list[list[str]]) -> list[RenderableType]:
    rows = [[_ids(group[:SHOWN_IDS]) + (", ..." if len(group) > SHOWN_IDS else "")] for group in groups[:SHOWN_GROUPS]]
    title = "The same words in another order (check the order is the question, as in 5 minus 3 and 3 minus 5)"
    parts: list[RenderableType] = [rich_table(["case ids"], rows, title=title)]
    if len(groups) > SHOWN_GROUPS:
        parts.append(Text(f"... and {len(groups) - SHOWN_GROUPS:,} more groups (agenteval audit --json lists them)"))
    return parts


def _near_duplicates_view(report: AuditReport) -> list[RenderableType]:
    # Inputs from one template are all alike, and their pairs grow with the square of the cases: the groups
    # they make say it in a line each, a few pairs show what alike means, and the rest are counted.
    groups = [
        [f"{len(group):,}", _ids(group[:SHOWN_IDS]) + (", ..." if len(group) > SHOWN_IDS else "")]
        for group in report.near_duplicate_groups[:SHOWN_GROUPS]
    ]
    title = "Near-duplicate inputs, grouped (check they test different things)"
    parts: list[RenderableType] = [rich_table(["cases", "case ids"], groups, title=title)]
    if len(report.near_duplicate_groups) > SHOWN_GROUPS:
        parts.append(Text(f"... and {len(report.near_duplicate_groups) - SHOWN_GROUPS:,} more groups"))
    parts.append(
        rich_table(
            ["case", "case", "similarity"],
            [[visible(a), visible(b), f"{s:.2f}"] for a, b, s in report.near_duplicates[:SHOWN_PAIRS]],
            title="Near-duplicate pairs",
        )
    )
    more = report.near_duplicate_pairs - min(SHOWN_PAIRS, len(report.near_duplicates))
    if more > 0:
        listed = len(report.near_duplicates)
        parts.append(Text(f"... and {more:,} more near-duplicate pairs (agenteval audit --json lists {listed:,})"))
    return parts


def _card_view(report: AuditReport) -> list[RenderableType]:
    if report.card is None:  # built-in or generated: no card to keep
        return []
    review = report.review
    dataset = visible(report.path)
    if review is None:
        return [
            Text(
                f"No card ({visible(report.card)}): agenteval review {dataset} --owner NAME records who keeps the "
                "dataset and when its cases were reviewed, so that a review falls due.",
                style="dim",
            )
        ]
    card = review.card
    ago = "today" if review.days_since_review == 0 else f"{counted(review.days_since_review, 'day')} ago"
    said = (
        f"Card: kept by {visible(card.owner)}, version {card.version}, created {card.created.isoformat()}, last "
        f"reviewed {card.last_reviewed.isoformat()} ({ago}; reviewed every {card.review_every_days} days)."
    )
    parts: list[RenderableType] = [Text(said)]
    if review.current:
        unknown = review.changed_since_review is None
        note = " The card does not say which cases were reviewed; agenteval review records it." if unknown else ""
        parts.append(Text(f"The review is current.{note}", style="green"))
    else:
        reasons = "; ".join(review.reasons())
        parts.append(Text(f"Review due: {reasons}. Review the cases, then: agenteval review {dataset}", style="yellow"))
    return parts


def _judging_view(judging: Judging) -> list[RenderableType]:
    rows = [
        ["an expected answer (expected_output, acceptable_outputs)", str(judging.answer)],
        ["criteria, no expected answer (must_contain, lengths, tools, ...)", str(judging.criteria)],
        ["a rubric only (read by the LLM judge)", str(judging.rubric_only)],
        ["nothing", str(len(judging.unscorable))],
    ]
    parts: list[RenderableType] = [rich_table(["judged by", "cases"], rows, title="How cases are judged")]
    if judging.unscorable:
        shown = ", ".join(judging.unscorable[:SHOWN_IDS])
        more = len(judging.unscorable) - SHOWN_IDS
        parts.append(
            Text(
                f"Nothing judges {len(judging.unscorable)} case(s), so they pass whenever they do not fail: "
                f"{visible(shown)}{f' and {more} more' if more > 0 else ''}. Give each an expected_output, "
                "criteria (must_contain, min_length, ...) or a rubric.",
                style="yellow",
            )
        )
    if judging.rubric_only:
        parts.append(
            Text(
                f"{judging.rubric_only} case(s) are judged by their rubric alone: run them with the LLM judge, "
                "or they pass whenever they do not fail.",
                style="yellow",
            )
        )
    return parts


def _usage(summary: Summary, suffix: str = "") -> str:
    tokens_in, tokens_out = getattr(summary, "input_tokens" + suffix), getattr(summary, "output_tokens" + suffix)
    return f"tokens {tokens_in} in / {tokens_out} out · cost ${getattr(summary, 'cost_usd' + suffix) or 0:.4f}"


def run_summary(summary: Summary) -> str:
    """The few lines printed at the end of a run."""
    shard = f" shard {summary.shard}" if summary.shard else ""
    lines = [
        f"experiment {summary.experiment_id}{shard} ({summary.status}) · dataset {summary.dataset} · "
        f"agent version {summary.version}"
    ]
    if summary.trials and summary.pass_rate is not None:
        interval = summary.pass_rate_ci95
        margin = f" (95% CI {interval[0]:.1%} to {interval[1]:.1%}, clustered by case)" if interval else ""
        over = f"over {counted(summary.trials, 'trial')} of {counted(summary.cases, 'case')}"
        if summary.shard:  # the experiment's figures, which the shards still running will add to
            over += " (every shard's so far)"
        lines.append(f"pass rate {summary.pass_rate:.1%}{margin} {over}")
        lines.append(
            f"  passed {summary.passed} · wrong answers {summary.wrong} · failures {summary.failed} "
            f"({summary.infrastructure_failures} infrastructure)"
        )
        if summary.failures_by_type:
            lines.append("  failures: " + ", ".join(f"{k} {v}" for k, v in summary.failures_by_type.items()))
        if summary.unscored:
            lines.append(
                f"  warning: {summary.unscored} passed with no pass/fail scorer to judge them: their cases give no "
                "expected answer, criteria or rubric (agenteval audit names them)"
            )
        if summary.cost_usd_all_tries is not None:
            lines.append(f"  {_usage(summary, '_all_tries')}, every try included")
            counting = (summary.input_tokens, summary.output_tokens)
            if counting != (summary.input_tokens_all_tries, summary.output_tokens_all_tries):
                lines.append(f"  {_usage(summary)} in the tries that count (the rest went to rate-limited tries)")
    hits = summary.this_run.get("cache_hits", 0)
    if hits:
        lines.append(f"  {hits} model call(s) answered from the response cache (--cache): no tokens spent on them")
    not_run = summary.this_run.get("not_run_simulated", 0)
    if not_run:
        lines.append(
            f"  not run: {not_run} case(s) with a simulated user (--skip-simulated; --simulate-users runs them)"
        )
    tasks = summary.this_run.get("ray_tasks")
    if tasks:
        lines.append(
            f"ray: {tasks} tasks on {summary.this_run.get('ray_worker_processes', 0)} worker processes, "
            f"{summary.this_run.get('ray_nodes', 0)} nodes"
        )
    for model, limiter in summary.limits.items():
        limits = limiter.get("limits", [])
        if len(limits) > 1:  # it moved: 429s lowered the cluster's concurrency
            lines.append(
                f"  {visible(model)}: the cluster's concurrency went {' → '.join(map(str, limits[:8]))}"
                f"{' …' if len(limits) > 8 else ''} (one limiter for {limiter.get('callers', 0)} worker processes)"
            )
    if summary.otlp is not None:
        lines.append(f"OTLP: {summary.otlp.spans_sent} spans sent, {summary.otlp.spans_failed} failed")
    if summary.shards:
        lines.append(
            f"shard {summary.shard}; the experiment is {summary.experiment_status}: " + shards_line(summary.shards)
        )
    if summary.resume:
        lines.append(f"interrupted; continue with: {summary.resume}")
    lines.append(f"full report: {summary.report}")
    return "\n".join(visible(line) for line in lines)  # a value's own line break or escape code stays visible


def comparison_view(comparison: dict) -> RenderableType:
    """``agenteval compare``: the paired difference with its interval, per category, what moved and changed."""
    from ..analysis._compare_figures import DIFFERENCE_HEADER, figure_rows, figures_note
    from ..analysis._stats import detectable_drops, no_spread_note, shown_p
    from ._report_formats import pct

    overall = comparison["overall"]
    parts: list[RenderableType] = [
        Text(visible(f"candidate {comparison['candidate']} against baseline {comparison['baseline']}"), style="bold"),
        Text(
            f"pass rate {pct(overall['baseline'])} -> {pct(overall['candidate'])}: difference "
            f"{overall['difference']:+.1%} (95% CI {overall['ci95'][0]:+.1%} to {overall['ci95'][1]:+.1%}, paired by "
            f"case over {overall['cases']} shared cases); one-sided p of a drop {shown_p(overall['p_drop'])}; this "
            f"comparison detects {detectable_drops(overall['minimum_detectable_drop'])} with 80% power"
        ),
        *([Text(f"note: {no_spread_note(overall['cases'])}")] if overall.get("no_spread") else []),
        *(Text(visible(f"warning: {w['message']}"), style="yellow") for w in comparison["warnings"]),
    ]
    # Case ids and categories are names, one line each: a line break in one drew a row of its own.
    rows = [
        [
            visible(name),
            str(d["cases"]),
            pct(d["baseline"]),
            pct(d["candidate"]),
            f"{d['difference']:+.1%}",
            "–" if d["ci95"] is None else f"{d['ci95'][0]:+.1%} to {d['ci95'][1]:+.1%}",
        ]
        for name, d in comparison["categories"].items()
    ]
    parts.append(
        rich_table(["category", "cases", "baseline", "candidate", "difference", "95% CI"], rows, title="By category")
    )
    for title, key in (("Newly failing cases", "newly_failing"), ("Newly passing cases", "newly_passing")):
        moved = comparison[key]
        parts.append(
            rich_table(
                ["case", "category", "baseline", "candidate"],
                [
                    [visible(m["case_id"]), visible(m["category"] or ""), pct(m["baseline"]), pct(m["candidate"])]
                    for m in moved
                ],
                title=f"{title} ({len(moved)})",
            )
        )
    types = comparison["failure_types"]
    if types:
        parts.append(
            rich_table(
                ["failure type", "baseline", "candidate"],
                [[t, str(v["baseline"]), str(v["candidate"])] for t, v in types.items()],
                title="Failure types",
            )
        )
    else:
        parts.append(Text("Failure types: no failures in either run"))
    parts.append(
        rich_table(
            ["", "baseline", "candidate", DIFFERENCE_HEADER], figure_rows(comparison), title="Latency, tokens, cost"
        )
    )
    parts.append(Text(f"note: {figures_note(comparison)}"))
    changes = comparison["changes"]
    parts.append(
        rich_table(
            ["what changed", "baseline", "candidate"],
            [[k, str(v["baseline"]), str(v["candidate"])] for k, v in changes.items()]
            or [["nothing recorded", "", ""]],
            title="Configuration",
        )
    )
    return Group(*parts)


def power_view(table: PowerTable) -> RenderableType:
    """``agenteval power``: the chance of catching each drop for each number of cases, paired / unpaired,
    and the cases each needs."""
    # As many digits as the drop was given with: 0.02 and 0.025 were both "drop 2%".
    header = ["cases", *(f"drop {d * 100:.4g}%" for d in table.drops)]
    rows = [
        [str(m), *(f"{a:.0%} / {b:.0%}" for a, b in zip(paired, unpaired, strict=True))]
        for m, paired, unpaired in zip(table.cases, table.paired, table.unpaired, strict=True)
    ]
    needed = zip(table.cases_needed, table.cases_needed_unpaired, strict=True)
    # None: no number of cases gets there (a drop within the gate's --max-drop).
    rows.append([f"cases for {table.target:.0%} power", *(f"{a or 'never'} / {b or 'never'}" for a, b in needed)])
    assumptions = Text("Assumptions:\n" + "\n".join(f"  - {a}" for a in table.assumptions))
    title = "Probability of catching the drop: paired (compare, gate) / unpaired (two runs' own error bars)"
    return Group(rich_table(header, rows, title=title), assumptions)


def judge_check_view(check: Any, shown: int = 20, width: int = 160) -> str:
    """``agenteval judge-check``: agreement and kappa with its interval, then the disagreements (safely shown)."""
    lines = [f"judge {check.judge}: {check.graded} of {check.items} labelled items graded"]
    kappa = check.kappa
    if kappa is not None:
        lines.append(f"agreement with the humans: {kappa.agreement:.1%}")
        if kappa.kappa is None:
            lines.append("Cohen's kappa: undefined (judge and humans gave one and the same verdict to every item)")
        else:
            interval = f" (95% CI {kappa.ci95[0]:.2f} to {kappa.ci95[1]:.2f}, {kappa.method})" if kappa.ci95 else ""
            lines.append(f"Cohen's kappa: {kappa.kappa:.2f}{interval}")
        lines.append(f"pass rate: humans {check.human_pass_rate:.1%}, judge {check.judge_pass_rate:.1%}")
    for line, why in check.ungraded[:shown]:
        lines.append(f"not graded (line {line}): {why[:width]}")
    if len(check.ungraded) > shown:  # a judge down for a while left a line per item, thousands
        lines.append(f"  ... and {len(check.ungraded) - shown} more not graded (--json lists them all)")
    if check.disagreements:
        lines.append(f"{len(check.disagreements)} disagreement(s):")
    for d in check.disagreements[:shown]:
        human, judge = ("pass" if d.human else "fail"), ("pass" if d.judge else "fail")
        lines.append(f"  line {d.line} · case {d.case_id}: human {human}, judge {judge}")
        lines.append(f"    reply: {d.reply[:width]}")
        lines.append(f"    judge's reasoning: {d.reasoning[:width]}")
    if len(check.disagreements) > shown:
        lines.append(f"  ... and {len(check.disagreements) - shown} more (--json lists them all)")
    return "\n".join(visible(line) for line in lines)
