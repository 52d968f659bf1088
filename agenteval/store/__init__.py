"""The store: experiments, cases, trials, spans and scores as Parquet files, queried with DuckDB."""

from .compact import CompactionResult, compact, recover
from .schemas import CASES, EXPERIMENTS, SCORES, TABLES, TRIALS
from .store import (
    NoStore,
    NotReadOnly,
    Store,
    StoreBusy,
    StoreNotWritable,
    check_read_only,
    quote_identifier,
    sql_string,
)

__all__ = [
    "CASES",
    "EXPERIMENTS",
    "SCORES",
    "TABLES",
    "TRIALS",
    "CompactionResult",
    "NoStore",
    "NotReadOnly",
    "Store",
    "StoreBusy",
    "StoreNotWritable",
    "check_read_only",
    "compact",
    "quote_identifier",
    "recover",
    "sql_string",
]
