"""Datasets: cases read from JSONL files or generated, validated line by line, sampled and audited."""

from ._audit import AuditReport, audit
from ._cases import Case, Dataset, DatasetError, Problem, load_file
from ._catalog import builtin_names, catalog, load_dataset
from ._sampling import sample_cases

__all__ = [
    "AuditReport",
    "Case",
    "Dataset",
    "DatasetError",
    "Problem",
    "audit",
    "builtin_names",
    "catalog",
    "load_dataset",
    "load_file",
    "sample_cases",
]
