"""An experiment's statuses, as its records say them (a module of their own: a saved report is shown without
importing DuckDB, which the experiments module needs)."""

RUNNING, COMPLETED, INTERRUPTED, FAILED = "running", "completed", "interrupted", "failed"
