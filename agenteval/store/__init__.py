"""The store: experiments, cases, trials, spans and scores as Parquet files, queried with DuckDB."""

from .compact import CompactionResult, compact
from .schemas import CASES, EXPERIMENTS, SCORES, TABLES, TRIALS
from .store import Store, quote_identifier, sql_string

__all__ = [
    "CASES",
    "EXPERIMENTS",
    "SCORES",
    "TABLES",
    "TRIALS",
    "CompactionResult",
    "Store",
    "compact",
    "quote_identifier",
    "sql_string",
]
