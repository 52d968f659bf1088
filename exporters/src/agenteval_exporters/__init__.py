"""An OpenTelemetry span exporter that writes spans to Hive-partitioned Parquet files.

The public names are the exporter, the span table's schema and version, the store-path rule, and the span
encoder (the ``agenteval`` runner encodes a batch of spans once, for its scorers and this exporter's files).
The writer, the file publishing and the partitioning are machinery, in their own modules.
"""

from .encode import spans_to_batch
from .exporter import ParquetSpanExporter, store_path
from .schema import SCHEMA_VERSION, SPAN_SCHEMA

__all__ = [
    "SCHEMA_VERSION",
    "SPAN_SCHEMA",
    "ParquetSpanExporter",
    "spans_to_batch",
    "store_path",
]
