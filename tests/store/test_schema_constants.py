"""`headgate migrate` writes the numbers the SQL needs from the Python constants
(headgate/core/schema_constants.py, the bounds of core/latency.py) into the database,
one generated source per engine: PostgreSQL's `headgate_<name>()` functions, SQLite's
tables `schema_constants` and `latency_bounds`. After migrating the database holds
exactly the Python values, its triggers file latencies under the Python bounds, an
unchanged migrate writes nothing, and a changed constant is applied by the next one
(and refused by a store opened without migrating until then)."""

from __future__ import annotations

import sqlite3
from collections import Counter
from collections.abc import Iterator
from contextlib import closing, contextmanager
from types import MappingProxyType
from typing import Any

import psycopg
import pytest

import headgate.adapters.migrations as generated
from headgate import Client, Store, open_store
from headgate.adapters.shared.rows import JOB_FIELDS
from headgate.core import Outcome
from headgate.core.latency import INF, LATENCY_BOUNDS_MS
from headgate.core.schema_constants import HISTORY_BUCKET_MS, SQL_CONSTANTS
from headgate.store import SchemaMismatch


@contextmanager
def raw(store_url: str) -> Iterator[Any]:
    """A connection of the test's own to the store's database, committing each statement."""
    if store_url.startswith("sqlite:"):
        with closing(sqlite3.connect(store_url.removeprefix("sqlite:///"),
                                     isolation_level=None)) as conn:
            yield conn
    else:
        with psycopg.connect(store_url, autocommit=True) as conn:
            yield conn


def _q(store_url: str, sql: str) -> str:
    return sql if store_url.startswith("sqlite:") else sql.replace("?", "%s")


def stored_constants(store_url: str) -> dict[str, int]:
    with raw(store_url) as conn:
        if store_url.startswith("sqlite:"):
            return dict(conn.execute("SELECT name, value FROM schema_constants").fetchall())
        return {name: conn.execute(f"SELECT headgate_{name}()").fetchone()[0]
                for name in generated.SQL_CONSTANTS}


def bound(v: int, bounds: tuple[int, ...] = LATENCY_BOUNDS_MS) -> int:
    """The Python rule: the smallest bound >= v, else the +Inf bucket."""
    return next((b for b in bounds if v <= b), INF)


def probes(bounds: tuple[int, ...]) -> list[int]:
    return sorted({0, *bounds, *(b + 1 for b in bounds)})


def file_run_latencies(store: Store, store_url: str, queue: str, values: list[int],
                       bounds: tuple[int, ...] = LATENCY_BOUNDS_MS) -> Counter[tuple[int, int]]:
    """Finish one running job per value, `v` ms after its admit, by the state change the
    latency triggers watch; the (bucket_ms, le_ms) counts they must have written."""
    client = Client(store)
    for i in range(len(values)):
        client.enqueue("k", b"%d" % i, queue=queue)
    claims = store.admit("w", [queue], capacity=len(values))
    assert len(claims) == len(values)
    expected: Counter[tuple[int, int]] = Counter()
    with raw(store_url) as conn:
        for claim, v in zip(claims, values, strict=True):
            started = conn.execute(_q(store_url, "SELECT attempted_at_ms FROM jobs WHERE id = ?"),
                                   (claim.job.id,)).fetchone()[0]
            done = started + v
            conn.execute(_q(store_url, "UPDATE jobs SET state = 'completed', "
                                       "finalized_at_ms = ? WHERE id = ?"),
                         (done, claim.job.id))
            expected[(done - done % HISTORY_BUCKET_MS, bound(v, bounds))] += 1
    return expected


def filed(store: Store, queue: str) -> Counter[tuple[int, int]]:
    got: Counter[tuple[int, int]] = Counter()
    for q, at, metric, le, n, _sum in store.latency_histograms(0):
        if q == queue and metric == "run":
            got[(at, le)] += n
    return got


def test_after_migrate_the_database_holds_the_python_constants(store: Store,
                                                               store_url: str) -> None:
    assert stored_constants(store_url) == dict(SQL_CONSTANTS)
    with raw(store_url) as conn:
        if store_url.startswith("sqlite:"):
            rows = conn.execute("SELECT upper_ms, le_ms FROM latency_bounds "
                                "ORDER BY upper_ms").fetchall()
            assert [le for _, le in rows] == [*LATENCY_BOUNDS_MS, INF]
        else:
            for v in probes(LATENCY_BOUNDS_MS):
                got = conn.execute("SELECT headgate_latency_bound(%s)", (v,)).fetchone()[0]
                assert got == bound(v), v


def test_the_latency_triggers_file_each_value_under_the_python_bound(
        store: Store, store_url: str) -> None:
    values = probes(LATENCY_BOUNDS_MS)
    expected = file_run_latencies(store, store_url, "bounds", values)
    assert filed(store, "bounds") == expected
    assert {le for _, le in expected} == {*LATENCY_BOUNDS_MS, INF}


def test_an_unchanged_migrate_writes_nothing(store: Store, store_url: str) -> None:
    with raw(store_url) as conn:
        if store_url.startswith("sqlite:"):
            # data_version moves when another connection commits a change to the file.
            before = conn.execute("PRAGMA data_version").fetchone()[0]
            open_store(store_url).close()
            assert conn.execute("PRAGMA data_version").fetchone()[0] == before
        else:
            versions = ("SELECT proname, xmin::text FROM pg_proc "
                        "WHERE proname LIKE 'headgate\\_%' ORDER BY 1")
            ledger = "SELECT name, sha256, applied_at_ms FROM schema_functions ORDER BY 1"
            before = (conn.execute(versions).fetchall(), conn.execute(ledger).fetchall())
            open_store(store_url).close()
            after = (conn.execute(versions).fetchall(), conn.execute(ledger).fetchall())
            assert after == before
            assert generated.CONSTANTS_FILE in {row[0] for row in before[1]}


def test_a_changed_constant_is_applied_by_the_next_migrate(
        store: Store, store_url: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """As a release that changed the values would: the store refuses to open on the old
    values without migrating, and after migrating the triggers use the new ones."""
    changed = {**SQL_CONSTANTS, "last_error_max_chars": 50}
    bounds = (7, 70)
    monkeypatch.setattr(generated, "SQL_CONSTANTS", MappingProxyType(changed))
    monkeypatch.setattr(generated, "LATENCY_BOUNDS_MS", bounds)
    with pytest.raises(SchemaMismatch, match="constants"):
        open_store(store_url, migrate=False)

    newer = open_store(store_url)
    try:
        assert stored_constants(store_url) == changed
        open_store(store_url, migrate=False).close()  # current now
        expected = file_run_latencies(newer, store_url, "changed", probes(bounds), bounds)
        assert filed(newer, "changed") == expected
        assert {le for _, le in expected} == {7, 70, INF}

        Client(newer).enqueue("k", b"e", queue="errors")
        (claim,) = newer.admit("w", ["errors"], capacity=1)
        newer.ack(claim, Outcome.SKIP, error="x" * 300 + "\nsecond line")
        with raw(store_url) as conn:
            last = conn.execute(_q(store_url, "SELECT last_error FROM jobs WHERE id = ?"),
                                (claim.job.id,)).fetchone()[0]
        assert last == "x" * 50
    finally:
        newer.close()

    monkeypatch.undo()
    open_store(store_url).close()
    assert stored_constants(store_url) == dict(SQL_CONSTANTS)



def test_the_admit_functions_row_is_the_python_job_row(store_url: str) -> None:
    """PostgreSQL's admit returns headgate_admitted rows that rows.row_to_job reads by
    position: the type's columns are the lost id, rows.JOB_FIELDS, then the payload."""
    if not store_url.startswith("postgresql"):
        pytest.skip("SQLite's admission returns jobs rows in JOB_FIELDS order itself")
    open_store(store_url).close()  # migrated
    with closing(psycopg.connect(store_url)) as conn:
        names = [r[0] for r in conn.execute(
            "SELECT attname FROM pg_attribute WHERE attrelid = "
            "'headgate_admitted'::regclass AND attnum > 0 ORDER BY attnum")]
    assert names == ["lost_id", *JOB_FIELDS, "payload"]
