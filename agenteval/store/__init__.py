"""The store: experiments, cases, trials, spans and scores as Parquet files, queried with DuckDB.

Names load on first use, so a report reads the store without loading compaction and the doctor.
"""

from typing import TYPE_CHECKING

from agenteval_instrumentation._lazy import lazy_exports

if TYPE_CHECKING:
    from ._compact import CompactionResult, compact
    from ._doctor import DoctorReport, UnreadableFile, doctor
    from ._prune import PruneResult, prune
    from ._required import MissingRequiredValue
    from ._schemas import CASES, EXPERIMENTS, REVIEWS, SCORES, TABLE_VERSIONS, TABLES, TABLES_VERSION, TRIALS
    from ._store import NoStore, NotReadOnly, Store, StoreBusy, StoreNotWritable

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "._compact": ("CompactionResult", "compact"),
        "._doctor": ("DoctorReport", "UnreadableFile", "doctor"),
        "._prune": ("PruneResult", "prune"),
        "._required": ("MissingRequiredValue",),
        "._schemas": (
            "CASES",
            "EXPERIMENTS",
            "REVIEWS",
            "SCORES",
            "TABLE_VERSIONS",
            "TABLES",
            "TABLES_VERSION",
            "TRIALS",
        ),
        "._store": ("NoStore", "NotReadOnly", "Store", "StoreBusy", "StoreNotWritable"),
    },
)
