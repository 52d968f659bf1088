"""An OpenTelemetry span exporter that writes spans to Hive-partitioned Parquet files."""

from .encode import spans_to_batch
from .exporter import ParquetSpanExporter, partition_by_experiment, partition_spans, store_path
from .files import publish
from .schema import SCHEMA_VERSION, SPAN_SCHEMA
from .writer import PartitionedWriter

__all__ = [
    "SCHEMA_VERSION",
    "SPAN_SCHEMA",
    "ParquetSpanExporter",
    "PartitionedWriter",
    "partition_by_experiment",
    "partition_spans",
    "publish",
    "spans_to_batch",
    "store_path",
]
