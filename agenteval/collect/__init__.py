"""``agenteval collect``: OTLP receivers (HTTP and gRPC) that write production traces into the store.

Spans received go through the in-process exporter's mapping and writer, so they are the same rows in the same
files as spans an instrumented process writes itself (``spans/date=YYYY-MM-DD/`` without an experiment).
Names load on first use: the defaults do not bring gRPC or pyarrow with them.
"""

from typing import TYPE_CHECKING

from agenteval_instrumentation._lazy import lazy_exports

if TYPE_CHECKING:
    from ._decode import Decoded, PayloadError
    from ._intake import CollectStats
    from ._json import decode_json
    from ._protobuf import decode_protobuf
    from ._server import Collector
    from ._settings import (
        BEHIND_COLLECTOR_PORT,
        DEFAULT_BODY_TIMEOUT,
        DEFAULT_GRPC_PORT,
        DEFAULT_HOST,
        DEFAULT_HTTP_PORT,
        DEFAULT_MAX_BODY_BYTES,
        DEFAULT_MAX_QUEUED_SPANS,
        DEFAULT_SCORE_DELAY,
        ENV_TOKEN,
    )

__all__, __getattr__, __dir__ = lazy_exports(
    __name__,
    {
        "._decode": ("Decoded", "PayloadError"),
        "._json": ("decode_json",),
        "._protobuf": ("decode_protobuf",),
        "._intake": ("CollectStats",),
        "._server": ("Collector",),
        "._settings": (
            "BEHIND_COLLECTOR_PORT",
            "DEFAULT_BODY_TIMEOUT",
            "DEFAULT_GRPC_PORT",
            "DEFAULT_HOST",
            "DEFAULT_HTTP_PORT",
            "DEFAULT_MAX_BODY_BYTES",
            "DEFAULT_MAX_QUEUED_SPANS",
            "DEFAULT_SCORE_DELAY",
            "ENV_TOKEN",
        ),
    },
)
