"""Decoding in worker processes, for throughput on machines with cores to spare (``decoders=N``).

Decoding (protobuf or JSON to Arrow rows) is most of the collector's work per span and holds the GIL, so in one
process it runs on one core however many there are. With ``decoders=N``, request bodies go to N worker
processes, which send back their rows as Arrow IPC (a copy of the buffers, no per-span work); the receiving,
the write queue and the one writer of the store stay in the collector's process. The workers ignore SIGINT and
SIGTERM (a Ctrl-C reaches the whole process group): the collector stops them itself, after the last request
in progress is decoded.
"""

from __future__ import annotations

import multiprocessing
import signal
from collections.abc import Callable
from concurrent.futures import ProcessPoolExecutor

import pyarrow as pa

from ._decode import Decoded, decode_json, decode_protobuf

_DECODERS: dict[str, Callable[[bytes], Decoded]] = {"decode_protobuf": decode_protobuf, "decode_json": decode_json}


def _ignore_signals() -> None:
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)


def _decode_in_worker(name: str, body: bytes) -> tuple[bytes | None, int, str | None]:
    """Runs in a worker: the rows as an Arrow IPC stream, the rejected count and reason (PayloadError
    propagates to the collector, pickled)."""
    decoded = _DECODERS[name](body)
    if decoded.batch is None:
        return None, decoded.rejected, decoded.reason
    sink = pa.BufferOutputStream()
    with pa.ipc.new_stream(sink, decoded.batch.schema) as writer:
        writer.write_batch(decoded.batch)
    return sink.getvalue().to_pybytes(), decoded.rejected, decoded.reason


def _ready() -> bool:
    return True


class DecoderPool:
    """N worker processes that decode request bodies."""

    def __init__(self, processes: int) -> None:
        self.processes = processes
        self._pool = ProcessPoolExecutor(
            processes, mp_context=multiprocessing.get_context("spawn"), initializer=_ignore_signals
        )
        # Started now, not on the first request: a worker takes about a second to import pyarrow.
        for future in [self._pool.submit(_ready) for _ in range(processes)]:
            future.result()

    def decode(self, decode: Callable[[bytes], Decoded], body: bytes) -> Decoded:
        """``decode(body)``, run in a worker."""
        ipc, rejected, reason = self._pool.submit(_decode_in_worker, decode.__name__, body).result()
        batch = None if ipc is None else pa.ipc.open_stream(ipc).read_next_batch()
        return Decoded(batch, rejected, reason)

    def close(self) -> None:
        self._pool.shutdown(wait=True)
