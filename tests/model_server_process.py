"""tests/model_servers.py's loopback server as a process of its own, for tests whose model calls come from other
processes in another network namespace (the Ray cluster's, tests/ray_cluster.py).

``python model_server_process.py RATE_LIMITED SECONDS``: the first RATE_LIMITED requests get a 429 (Retry-After
5 ms), the rest the text "ok" after SECONDS. It prints its port, serves until its standard input closes, then
prints what it saw as JSON: requests, 429s sent, the most requests in flight at once, and the in-flight count as
each request arrived.
"""

from __future__ import annotations

import json
import sys
import threading
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

import model_servers as ms


def main() -> None:
    limited, seconds = int(sys.argv[1]), float(sys.argv[2])
    lock = threading.Lock()
    sent = {"429": 0}

    def responder(request: ms.Request) -> ms.Reply:
        with lock:
            if sent["429"] < limited:
                sent["429"] += 1
                return ms.rate_limited(retry_after_ms=5)
        return ms.slow(seconds, ms.text("ok"))

    with ms.ModelServer(responder) as server:
        print(server.port, flush=True)
        sys.stdin.read()
        with server.lock:
            seen = {
                "requests": len(server.requests),
                "rate_limited": sent["429"],
                "max_in_flight": server.max_in_flight,
                "concurrency_seen": list(server.concurrency_seen),
            }
    print(json.dumps(seen), flush=True)


if __name__ == "__main__":
    main()
