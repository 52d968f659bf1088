"""The store: experiments, cases, trials, spans and scores as Parquet files, queried with DuckDB."""

from .compact import CompactionResult, compact, recover
from .schemas import CASES, EXPERIMENTS, SCORES, TABLES, TRIALS
from .store import Store, StoreBusy, quote_identifier, sql_string

__all__ = [
    "CASES",
    "EXPERIMENTS",
    "SCORES",
    "TABLES",
    "TRIALS",
    "CompactionResult",
    "Store",
    "StoreBusy",
    "compact",
    "quote_identifier",
    "recover",
    "sql_string",
]
