"""The path the store's table schemas had before the store's modules became private; kept so code written
against it keeps working. New code imports from :mod:`agenteval.store`."""

from ._schemas import CASES, EXPERIMENTS, SCORES, TABLE_VERSIONS, TABLES, TABLES_VERSION, TRIALS

__all__ = ["CASES", "EXPERIMENTS", "SCORES", "TABLE_VERSIONS", "TABLES", "TABLES_VERSION", "TRIALS"]
