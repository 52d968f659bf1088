"""A burst of spans right after start-up, under the SDK's default BatchSpanProcessor: count in equals count out.

The SDK's queue holds 2,048 spans; while the exporter's first export runs, the application keeps
adding spans. That first export used to do the process's first-time work (pyarrow's converters, and
its import of pandas where pandas is installed, as in the test extra), long enough for the queue to
overflow: 440 of 3,000 spans were dropped. The exporter now does that work when it is created.
"""

from __future__ import annotations

import subprocess
import sys

import duckdb

BURST = """
import sys
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import BatchSpanProcessor
from agenteval_exporters import ParquetSpanExporter

store, count = sys.argv[1], int(sys.argv[2])
provider = TracerProvider()
provider.add_span_processor(BatchSpanProcessor(ParquetSpanExporter(store)))  # the SDK's default settings
tracer = provider.get_tracer("burst")
for i in range(count):  # at once, in a fresh interpreter: nothing is warm but what the exporter warmed
    tracer.start_span(f"span-{i}", attributes={"agenteval.experiment.id": "burst"}).end()
provider.shutdown()
"""


def test_a_burst_right_after_start_up_loses_no_span(tmp_path):
    store = tmp_path / "store"
    burst = subprocess.run(
        [sys.executable, "-c", BURST, str(store), "3000"], capture_output=True, text=True, timeout=120
    )
    assert burst.returncode == 0, burst.stderr
    assert "dropping" not in burst.stderr
    glob = store / "spans" / "**" / "*.parquet"
    spans, names = duckdb.sql(f"SELECT count(*), count(DISTINCT name) FROM read_parquet('{glob}')").fetchall()[0]
    assert (spans, names) == (3000, 3000)
