"""What a run's trials say: experiments, reports, paired comparisons and the CI gate, power, statistics.

Names load on first use: a command loads the analysis it runs, not all of it.
"""

from typing import TYPE_CHECKING

from agenteval_instrumentation._lazy import lazy_exports

if TYPE_CHECKING:
    from ._compare import Comparison, GateDecision, NotComparable, compare, gate
    from ._experiments import Experiment, Figures, OTLPExport, Summary, find, list_experiments
    from ._power import PowerTable, power_table
    from ._report import build_report
    from ._report_data import (
        CaseOutcomes,
        CategoryPassRate,
        FlakyCases,
        Latency,
        Outcomes,
        PassAtK,
        PassRate,
        Report,
        ReportedExperiment,
        ScorerFigures,
        SpanLatency,
        TokenUse,
    )
    from ._stats import (
        RateCounts,
        clustered_mean,
        clustered_rate,
        interval95,
        mean_interval95,
        paired_difference,
        pass_at_k,
        pass_hat_k,
        rate_interval95,
        values_interval95,
    )
    from ._traces import TracesReport, build_traces_report

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "._compare": ("Comparison", "GateDecision", "NotComparable", "compare", "gate"),
        "._experiments": ("Experiment", "Figures", "OTLPExport", "Summary", "find", "list_experiments"),
        "._power": ("PowerTable", "power_table"),
        "._report": ("build_report",),
        "._report_data": (
            "CaseOutcomes",
            "CategoryPassRate",
            "FlakyCases",
            "Latency",
            "Outcomes",
            "PassAtK",
            "PassRate",
            "Report",
            "ReportedExperiment",
            "ScorerFigures",
            "SpanLatency",
            "TokenUse",
        ),
        "._traces": ("TracesReport", "build_traces_report"),
        "._stats": (
            "clustered_mean",
            "clustered_rate",
            "interval95",
            "mean_interval95",
            "paired_difference",
            "pass_at_k",
            "pass_hat_k",
            "rate_interval95",
            "RateCounts",
            "values_interval95",
        ),
    },
)
