"""The store: experiments, cases, trials, spans and scores as Parquet files, queried with DuckDB."""

from ._compact import CompactionResult, compact
from ._doctor import DoctorReport, UnreadableFile, doctor
from ._schemas import CASES, EXPERIMENTS, SCORES, TABLE_VERSIONS, TABLES, TABLES_VERSION, TRIALS
from ._store import NoStore, NotReadOnly, Store, StoreBusy, StoreNotWritable

__all__ = [
    "CASES",
    "EXPERIMENTS",
    "SCORES",
    "TABLES",
    "TABLES_VERSION",
    "TABLE_VERSIONS",
    "TRIALS",
    "CompactionResult",
    "DoctorReport",
    "NoStore",
    "NotReadOnly",
    "Store",
    "StoreBusy",
    "StoreNotWritable",
    "UnreadableFile",
    "compact",
    "doctor",
]
