"""headgate worker app for the side-by-side peer benchmark (bench/peers_headgate.py).

    headgate worker --app bench.peer_app:make_worker --store URL --concurrency 2

Its handlers do exactly what the peers' jobs do: they call the peer harness's own
``common.record_drain`` / ``common.record_latency`` (imported by path from the peer
harness directory, never copied), so the side-effect files are byte-identical to the
peers' and are checked by the same code.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
PEERS_DIR = os.path.abspath(os.environ.get("HG_PEERS_DIR") or ROOT.parent / "shared" / "peers")
if PEERS_DIR not in sys.path:
    sys.path.insert(0, PEERS_DIR)

import common  # type: ignore[import-not-found]  # noqa: E402

# The queue every peer-benchmark job goes to (the producer side uses the same name).
QUEUE = "bench"


def noop(job: Any, ctx: Any) -> None:
    """W3: a no-op job whose only side effect is the harness's fixed-width record."""
    common.record_drain(int(job.payload))


def lat(job: Any, ctx: Any) -> None:
    """W4: record handler start vs. the producer's time.time() taken before enqueue."""
    i, t_enq = job.payload.split()
    common.record_latency(int(i), float(t_enq))


def make_worker(store: Any) -> Any:
    from headgate import Worker

    # Concurrency comes from the command line (--concurrency 2), as for every peer.
    worker = Worker(store, queues=[QUEUE], concurrency=2)
    worker.register("noop", noop)
    worker.register("lat", lat)
    return worker
