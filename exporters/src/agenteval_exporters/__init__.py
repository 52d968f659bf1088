"""An OpenTelemetry span exporter that writes spans to Hive-partitioned Parquet files.

The public names are the exporter, the span table's schema and version, the store-path rule, and the span
encoder (the ``agenteval`` runner encodes a batch of spans once, for its scorers and this exporter's files).
The writer, the file publishing and the partitioning are machinery, in their own modules. Names load on first
use, so a reader of a store that needs only the schema or the file rules does not load the OpenTelemetry SDK.
"""

from typing import TYPE_CHECKING

from agenteval_instrumentation._lazy import lazy_exports

if TYPE_CHECKING:
    from .encode import spans_to_batch, spans_to_table
    from .exporter import ParquetSpanExporter
    from .partitions import store_path
    from .schema import SCHEMA_VERSION, SPAN_SCHEMA

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        ".encode": ("spans_to_batch", "spans_to_table"),
        ".exporter": ("ParquetSpanExporter",),
        ".partitions": ("store_path",),
        ".schema": ("SCHEMA_VERSION", "SPAN_SCHEMA"),
    },
)
