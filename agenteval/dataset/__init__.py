"""Datasets: cases read from JSONL files or generated, validated line by line, sampled and audited; a card beside
a file says who owns it and when it was last reviewed."""

from typing import TYPE_CHECKING

from agenteval_instrumentation._lazy import lazy_exports

if TYPE_CHECKING:
    from ._audit import AuditReport, audit
    from ._card import DatasetCard, ReviewStatus, card_path, read_card, review_dataset, review_status
    from ._cases import Case, Dataset, DatasetError, Problem, load_file
    from ._catalog import builtin_names, catalog, load_dataset
    from ._from_traces import CasesFromTraces, cases_from_traces
    from ._sampling import sample_cases

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "._audit": ("AuditReport", "audit"),
        "._card": ("DatasetCard", "ReviewStatus", "card_path", "read_card", "review_dataset", "review_status"),
        "._cases": ("Case", "Dataset", "DatasetError", "Problem", "load_file"),
        "._from_traces": ("CasesFromTraces", "cases_from_traces"),
        "._catalog": ("builtin_names", "catalog", "load_dataset"),
        "._sampling": ("sample_cases",),
    },
)
