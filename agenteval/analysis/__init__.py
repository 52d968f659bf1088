"""What a run's trials say: experiments, reports, paired comparisons and the CI gate, power, statistics."""

from ._compare import Comparison, GateDecision, NotComparable, compare, gate
from ._experiments import Experiment, Figures, OTLPExport, Summary, find, list_experiments
from ._power import PowerTable, power_table
from ._report import (
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
    build_report,
)
from ._stats import clustered_mean, interval95, paired_difference, pass_at_k, pass_hat_k

__all__ = [
    "CaseOutcomes",
    "CategoryPassRate",
    "Comparison",
    "Experiment",
    "Figures",
    "FlakyCases",
    "GateDecision",
    "Latency",
    "NotComparable",
    "Outcomes",
    "PassAtK",
    "PassRate",
    "PowerTable",
    "Report",
    "ReportedExperiment",
    "ScorerFigures",
    "SpanLatency",
    "OTLPExport",
    "Summary",
    "TokenUse",
    "build_report",
    "clustered_mean",
    "compare",
    "find",
    "gate",
    "interval95",
    "list_experiments",
    "paired_difference",
    "pass_at_k",
    "pass_hat_k",
    "power_table",
]
