"""SQLite's partition rows: the retention duty's settle step deletes the rows of
partitions with nothing waiting or running and no fairness credit, so a queue of many
short-lived tenants keeps rows for the ones in use, not for every one it ever had.
Every change of a partition's counts is an upsert, so a tenant's next job adds its row
again and admission finds it."""

from __future__ import annotations

import sqlite3
from pathlib import Path

from support import tenants_came_and_went

from headgate import Client, open_store
from headgate.core import Outcome
from headgate.core.job import AckRequest

Q = "tenants"


def rows(path: Path) -> set[str]:
    with sqlite3.connect(path) as conn:
        return {r[0] for r in conn.execute(
            "SELECT partition_key FROM partitions WHERE queue = ?", (Q,))}


def test_settling_drops_idle_partitions_and_a_tenant_comes_back(tmp_path: Path) -> None:
    path = tmp_path / "parts.db"
    store = open_store(f"sqlite:///{path}")
    try:
        client = Client(store)
        tenants_came_and_went(store, Q, 300)
        for key in ("busy", "w1", "w2"):
            client.enqueue(kind="work", payload=key.encode(), queue=Q, partition_key=key)
        (running,) = store.admit("w", [Q], 1, 60_000)
        before = {p.partition_key: (p.waiting, p.running) for p in store.partitions(Q)}
        assert len(rows(path)) == 303

        assert store.settle_partitions(200) == 200
        assert store.settle_partitions(200) == 100
        assert store.settle_partitions(200) == 0
        assert rows(path) == {"busy", "w1", "w2"}
        assert {p.partition_key: (p.waiting, p.running) for p in store.partitions(Q)} == before

        store.ack_many([AckRequest(running, Outcome.SUCCESS)])
        client.enqueue(kind="work", payload=b"back", queue=Q, partition_key="t00042")
        claimed = {c.job.partition_key: c.job.payload for c in store.admit("w", [Q], 10, 60_000)}
        assert claimed.keys() == {"busy", "w1", "w2", "t00042"} - {running.job.partition_key}
        assert claimed["t00042"] == b"back"
    finally:
        store.close()
