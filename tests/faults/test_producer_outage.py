"""PostgreSQL unreachable while HTTP producers keep producing.

Producers POST /api/v1/jobs to a real `headgate serve`, one Idempotency-Key per logical
job, and retry the same key on a 503 (after its Retry-After) or a dropped connection,
as a client is told to. Every answer must be a success (201, or a replay) or a 503 with
Retry-After — no 500, no other status, no hang past the client's timeout — and once the
store is back every logical job exists exactly once and a worker runs each once.

The outage itself stops the cluster (`pg_ctl stop -m fast`) for OUTAGE_S seconds
(HG_OUTAGE_S; 30 by hand). The commit-unknown cases — an attempt whose connection
dropped before its commit, while its statement was still running, or after its commit
but before the answer came back — are produced on purpose through a TCP proxy between
`serve` and PostgreSQL, and by a lock the test holds.
"""

from __future__ import annotations

import base64
import json
import os
import threading
import time
import urllib.error
import uuid
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
import pytest
from faultkit import (
    Fleet,
    all_jobs,
    audit,
    fleet_fixture,  # noqa: F401 - the `fleet` fixture
    http,
    pg_cluster_available,
    pg_start,
    pg_stop,
    record,
    unfinished,
    wait_for,
)
from support import TcpRelay

from headgate import JobFilter, Store, StoreUnavailable

OUTAGE_S = float(os.environ.get("HG_OUTAGE_S", "12"))
PRODUCERS = 6
CLIENT_TIMEOUT_S = 30.0  # longer than the pool's timeout (10 s), as clients are told
PAUSE_S = 0.05  # between one producer's logical jobs: a steady rate, not a flood
SUCCESS = (200, 201)


# -- a producer that retries with its key ----------------------------------------------

@dataclass
class Answer:
    at: float  # monotonic, when the answer (or the failure) came
    took_s: float
    status: int | None  # None: no HTTP answer (see `failure`)
    retry_after: str | None = None
    body: str = ""
    failure: str = ""  # "timeout" or "connection: ..."


def post_job(base: str, key: str, body: dict[str, Any]) -> Answer:
    """One attempt; a dropped or refused connection and a timeout are answers too."""
    started = time.monotonic()
    try:
        status, text, headers = http(base + "/api/v1/jobs", "POST", body,
                                     timeout=CLIENT_TIMEOUT_S,
                                     headers={"Idempotency-Key": key})
    except TimeoutError:
        return Answer(time.monotonic(), time.monotonic() - started, None, failure="timeout")
    except urllib.error.URLError as err:
        kind = "timeout" if isinstance(err.reason, TimeoutError) else f"connection: {err}"
        return Answer(time.monotonic(), time.monotonic() - started, None, failure=kind)
    except OSError as err:  # reset mid-answer, remote end closed
        return Answer(time.monotonic(), time.monotonic() - started, None,
                      failure=f"connection: {err!r}")
    now = time.monotonic()
    return Answer(now, now - started, status, headers.get("Retry-After"), text)


def retry_delay(answer: Answer) -> float:
    """What a well-behaved client waits before sending the same key again."""
    if answer.status == 503 and answer.retry_after and answer.retry_after.isdigit():
        return float(answer.retry_after)
    return 0.2 if answer.failure.startswith("connection") else 1.0


@dataclass
class Producer:
    """Logical jobs `i` = 0, 1, ...: each is POSTed under its own key until a success."""

    index: int
    base: str
    nonce: str
    stop: threading.Event
    answers: list[Answer] = field(default_factory=list)
    ids: dict[int, set[str]] = field(default_factory=dict)  # every id a success named
    succeeded_at: list[float] = field(default_factory=list)
    replayed: int = 0
    gave_up: list[int] = field(default_factory=list)
    thread: threading.Thread | None = None

    def key(self, i: int) -> str:
        return f"{self.nonce}-p{self.index}-j{i}"

    def run(self) -> None:
        i = 0
        while not self.stop.is_set():
            self.produce(i)
            i += 1
            time.sleep(PAUSE_S)

    def produce(self, i: int) -> None:
        payload = json.dumps({"p": self.index, "i": i, "n": self.nonce, "o": "ok"})
        body = {"kind": "fx", "payload": base64.b64encode(payload.encode()).decode()}
        deadline = time.monotonic() + OUTAGE_S + 120
        while True:
            answer = post_job(self.base, self.key(i), body)
            self.answers.append(answer)
            if answer.status in SUCCESS:
                doc = json.loads(answer.body)
                self.ids.setdefault(i, set()).add(doc["id"])
                self.replayed += bool(doc.get("replayed"))
                self.succeeded_at.append(answer.at)
                return
            if time.monotonic() > deadline:
                self.gave_up.append(i)
                return
            time.sleep(retry_delay(answer))

    def start(self) -> None:
        self.thread = threading.Thread(target=self.run, name=f"producer-{self.index}",
                                       daemon=True)
        self.thread.start()

    def successes_since(self, since: float) -> int:
        return sum(1 for t in list(self.succeeded_at) if t >= since)


def wrong_answers(answers: list[Answer]) -> list[str]:
    """Anything but a success or a 503 that says when to come back."""
    wrong = []
    for a in answers:
        if a.status in SUCCESS:
            continue
        if a.status == 503 and a.retry_after and a.retry_after.isdigit():
            doc = json.loads(a.body)
            if str(doc.get("error", "")).startswith("store unavailable"):
                continue
        wrong.append(f"{a.status} {a.failure} retry-after={a.retry_after} {a.body[:200]}")
    return wrong


def jobs_by_logical_key(store: Store, nonce: str) -> dict[tuple[int, int], list[str]]:
    """The stored fx jobs of this run, by (producer, logical job): their ids."""
    found: dict[tuple[int, int], list[str]] = {}
    cursor: str | None = None
    while True:
        page = store.list_jobs(JobFilter(kind="fx"), cursor=cursor, limit=200,
                               include_payload=True)
        for job in page.jobs:
            doc = json.loads(job.payload or b"{}")
            if doc.get("n") == nonce:
                found.setdefault((doc["p"], doc["i"]), []).append(job.id)
        if page.next_cursor is None:
            return found
        cursor = page.next_cursor


def assert_each_once(store: Store, producers: list[Producer], nonce: str) -> list[str]:
    """Every logical job a producer was told succeeded is stored once, under the one id
    every success for its key named; nothing else of this run is stored. Its ids."""
    stored = jobs_by_logical_key(store, nonce)
    doubled = {k: v for k, v in stored.items() if len(v) != 1}
    assert doubled == {}, f"logical jobs stored more than once: {list(doubled.items())[:5]}"
    answered = {(p.index, i): ids for p in producers for i, ids in p.ids.items()}
    several = {k: v for k, v in answered.items() if len(v) != 1}
    assert several == {}, f"one key answered with different ids: {list(several.items())[:5]}"
    missing = sorted(set(answered) - set(stored))
    assert missing == [], f"{len(missing)} acknowledged job(s) not stored: {missing[:5]}"
    extra = sorted(set(stored) - set(answered))
    assert extra == [], f"{len(extra)} stored job(s) no producer was told of: {extra[:5]}"
    for k, ids in answered.items():
        assert stored[k] == list(ids), (k, stored[k], ids)
    return [stored[k][0] for k in sorted(stored)]


def readable(store: Store) -> bool:
    try:
        store.counts()
    except StoreUnavailable:
        return False
    return True


# -- the outage -------------------------------------------------------------------------

@pytest.mark.serial  # stops the cluster: every other process's PostgreSQL test would fail
@pytest.mark.skipif(not pg_cluster_available(), reason="needs the test PostgreSQL cluster "
                    "(HG_TEST_PG_BIN/HG_TEST_PG_DATA, set by scripts/test.sh)")
def test_producers_retry_through_a_postgres_outage(
    store: Store, fleet: Fleet, tmp_path: Path, backend: str
) -> None:
    if backend != "pg":
        pytest.skip("a PostgreSQL server outage")
    api = fleet.serve("api")
    nonce = uuid.uuid4().hex[:8]
    stop = threading.Event()
    producers = [Producer(p, api.base, nonce, stop) for p in range(PRODUCERS)]
    for producer in producers:
        producer.start()
    try:
        wait_for(lambda: all(len(p.succeeded_at) >= 10 for p in producers), 60,
                 "ten jobs from every producer")
        pg_stop()
        stopped = time.monotonic()
        try:
            wait_for(lambda: all(any(a.at > stopped and a.status == 503 for a in p.answers)
                                 for p in producers), OUTAGE_S + CLIENT_TIMEOUT_S,
                     "every producer to be answered 503")
            time.sleep(max(0.0, OUTAGE_S - (time.monotonic() - stopped)))
            assert api.running()
        finally:
            restarting = time.monotonic()
            pg_start()
        started = time.monotonic()
        # Every producer gets through again, with a few more jobs each.
        wait_for(lambda: all(p.successes_since(started) >= 5 for p in producers), 120,
                 "every producer to enqueue again")
    finally:
        stop.set()
        for producer in producers:
            assert producer.thread is not None
            producer.thread.join(OUTAGE_S + 180)
    assert not any(p.thread and p.thread.is_alive() for p in producers)
    outage_s = started - stopped
    answers = [a for p in producers for a in p.answers]
    assert wrong_answers(answers) == []
    assert [p.gave_up for p in producers] == [[] for _ in producers]
    # Sent once the server was down and answered before it was started again: a request
    # sent just before the stop may commit and be answered just after it, and one
    # answered as the restart returns may have found the server up.
    during = [a for a in answers if stopped <= a.at - a.took_s and a.at <= restarting]
    assert during and all(a.status == 503 for a in during)
    # Once one call has found the server down, none waits out the pool's timeout for a
    # connection that cannot come (a call already waiting included).
    assert not [a for a in answers if "couldn't get a connection" in a.body]
    recovered_s = min(t for p in producers for t in p.succeeded_at if t >= started) - started

    # This process's store lost its connections too: its first call finds out.
    wait_for(lambda: readable(store), 30, "the test's own store to reconnect")
    ids = assert_each_once(store, producers, nonce)
    # The API's view agrees with the store's.
    for job_id in ids[:: max(1, len(ids) // 20)]:
        assert http(f"{api.base}/api/v1/jobs/{job_id}")[0] == 200

    worker = fleet.worker("w", "--concurrency", "8")
    wait_for(lambda: unfinished(store) == 0, 180, "every job to finish")
    report = audit(store, ids, tmp_path)
    assert report.problems == []
    assert report.terminal == {"completed": len(ids)}
    assert report.runs == len(ids)  # no store trouble while it ran: each ran once
    assert worker.term() == 0
    assert len(all_jobs(store)) == len(ids)

    statuses = Counter(a.status for a in answers)
    record(f"PostgreSQL stopped {OUTAGE_S:.0f} s under {PRODUCERS} HTTP producers "
           "retrying with Idempotency-Key", "pg", faults=1, jobs=len(ids),
           lost=report.lost, duplicate_completions=report.duplicate_completions,
           reruns=report.reruns, runs=report.runs, outage_s=round(outage_s, 1),
           recover_s=round(recovered_s, 2), answers_503=statuses.get(503, 0),
           answers_ok=statuses.get(201, 0) + statuses.get(200, 0),
           replayed=sum(p.replayed for p in producers),
           slowest_answer_s=round(max(a.took_s for a in answers), 2))


# -- commit outcome unknown -------------------------------------------------------------

class Proxy(TcpRelay):
    """A TCP proxy between `serve` and PostgreSQL. `hold()` swallows what the server
    sends (statements still run and commit; their answers never arrive), `cut()`
    closes every connection through it, as a network failure would, and while
    `refusing` is set a new connection is closed at once (the server is down)."""

    def __init__(self, target: tuple[str, int]) -> None:
        self.holding = threading.Event()
        self.refusing = threading.Event()
        super().__init__(target)

    def accepting(self) -> bool:
        return not self.refusing.is_set()

    def on_answer(self, n: int) -> str:
        return self.SWALLOW if self.holding.is_set() else self.FORWARD

    def hold(self) -> None:
        self.holding.set()

    def cut(self) -> None:
        """Every open connection closed; new ones are passed through again."""
        self.holding.clear()
        super().cut()

    def url(self, store_url: str) -> str:
        parts = urlsplit(store_url)
        netloc = parts.netloc.rsplit("@", 1)
        host = f"127.0.0.1:{self.port}"
        netloc[-1] = host
        return urlunsplit((parts.scheme, "@".join(netloc), parts.path, parts.query,
                           parts.fragment))


@pytest.fixture
def proxied(store_url: str, backend: str, tmp_path: Path) -> Any:
    """(proxy, fleet on the proxy's URL) for a PostgreSQL store."""
    if backend != "pg":
        pytest.skip("PostgreSQL's connection and commit")
    parts = urlsplit(store_url)
    proxy = Proxy((parts.hostname or "127.0.0.1", parts.port or 5432))
    fleet = Fleet(proxy.url(store_url), tmp_path)
    try:
        yield proxy, fleet
    finally:
        fleet.close()
        proxy.close()


def fx_body(tag: str) -> dict[str, Any]:
    payload = json.dumps({"tag": tag, "o": "ok"}).encode()
    return {"kind": "fx", "payload": base64.b64encode(payload).decode()}


def stored_ids(store: Store, tag: str) -> list[str]:
    return [j.id for j in store.list_jobs(JobFilter(kind="fx"), limit=200,
                                          include_payload=True).jobs
            if json.loads(j.payload or b"{}").get("tag") == tag]


def in_background(fn: Any, *args: Any) -> tuple[threading.Thread, dict[str, Any]]:
    out: dict[str, Any] = {}

    def run() -> None:
        out["value"] = fn(*args)

    thread = threading.Thread(target=run, daemon=True)
    thread.start()
    return thread, out


def retried(base: str, key: str, body: dict[str, Any]) -> Answer:
    """The key sent again, as a producer does: after each 503's Retry-After (the server
    may still hold the store for down until it next checks), until anything else."""
    deadline = time.monotonic() + 60
    while True:
        answer = post_job(base, key, body)
        if answer.status != 503 or time.monotonic() > deadline:
            return answer
        assert_503(answer)
        time.sleep(retry_delay(answer))


def assert_503(answer: Answer) -> None:
    assert answer.status == 503, answer
    assert answer.retry_after == "1", answer
    assert json.loads(answer.body)["error"].startswith("store unavailable"), answer


def enqueue_backends(admin: psycopg.Connection, waiting_on: str) -> list[int]:
    """The serve's sessions inside the keyed enqueue, waiting on a lock of this type."""
    rows = admin.execute(
        "SELECT pid FROM pg_stat_activity WHERE datname = current_database() "
        "AND pid <> pg_backend_pid() AND wait_event_type = 'Lock' AND wait_event = %s "
        "AND query LIKE '%%headgate_enqueue_keyed%%'", (waiting_on,)).fetchall()
    return [r[0] for r in rows]


def test_commit_then_answer_lost_is_replayed(
    proxied: tuple[Proxy, Fleet], store: Store
) -> None:
    """The enqueue committed but its answer never reached `serve`: the producer got a
    503 and its retry with the same key is answered with that job, not a second one."""
    proxy, fleet = proxied
    api = fleet.serve("api", "--no-duties")
    assert post_job(api.base, "warm-up", fx_body("warm-up")).status == 201

    proxy.hold()
    thread, out = in_background(post_job, api.base, "k-lost", fx_body("lost"))
    first_id = wait_for(lambda: stored_ids(store, "lost"), 30, "the enqueue to commit")[0]
    assert thread.is_alive()  # its answer is being swallowed
    proxy.cut()
    thread.join(CLIENT_TIMEOUT_S)
    assert_503(out["value"])

    again = retried(api.base, "k-lost", fx_body("lost"))
    assert again.status == 201, again
    doc = json.loads(again.body)
    assert doc == {"id": first_id, "replayed": True}
    assert stored_ids(store, "lost") == [first_id]


def test_connection_lost_before_commit_enqueues_once(
    proxied: tuple[Proxy, Fleet], store: Store, store_url: str
) -> None:
    """The attempt's session ended (terminated by the server) while its enqueue waited
    for a lock: nothing committed, the producer got a 503, and its retry enqueues the
    job once."""
    proxy, fleet = proxied
    api = fleet.serve("api", "--no-duties")
    assert post_job(api.base, "warm-up", fx_body("warm-up")).status == 201

    with psycopg.connect(store_url, autocommit=True) as admin, \
            psycopg.connect(store_url) as locker:
        locker.execute("LOCK TABLE jobs IN SHARE MODE")  # holds back the INSERT
        thread, out = in_background(post_job, api.base, "k-killed", fx_body("killed"))
        (pid,) = wait_for(lambda: enqueue_backends(admin, "relation"), 30,
                          "the enqueue to wait for the table lock")
        admin.execute("SELECT pg_terminate_backend(%s)", (pid,))
        thread.join(CLIENT_TIMEOUT_S)
        assert_503(out["value"])
        locker.rollback()
    assert stored_ids(store, "killed") == []

    again = retried(api.base, "k-killed", fx_body("killed"))
    assert again.status == 201, again
    doc = json.loads(again.body)
    assert "replayed" not in doc
    assert stored_ids(store, "killed") == [doc["id"]]


def test_retry_while_the_lost_attempt_still_runs_joins_it(
    proxied: tuple[Proxy, Fleet], store: Store, store_url: str
) -> None:
    """The connection dropped while the attempt's statement was still running on the
    server (waiting for a lock): the producer got a 503 and retried at once, while the
    orphaned statement went on to commit. The retry waits for the key the orphan holds
    and answers with the orphan's job; one job is stored."""
    proxy, fleet = proxied
    api = fleet.serve("api", "--no-duties")
    assert post_job(api.base, "warm-up", fx_body("warm-up")).status == 201

    with psycopg.connect(store_url, autocommit=True) as admin, \
            psycopg.connect(store_url) as locker:
        locker.execute("LOCK TABLE jobs IN SHARE MODE")
        thread, out = in_background(post_job, api.base, "k-orphan", fx_body("orphan"))
        (orphan,) = wait_for(lambda: enqueue_backends(admin, "relation"), 30,
                             "the enqueue to wait for the table lock")
        proxy.cut()  # the server's session lives on, its statement still waiting
        thread.join(CLIENT_TIMEOUT_S)
        assert_503(out["value"])
        assert orphan in [r[0] for r in admin.execute(
            "SELECT pid FROM pg_stat_activity").fetchall()]

        retry, retried = in_background(post_job, api.base, "k-orphan", fx_body("orphan"))
        wait_for(lambda: enqueue_backends(admin, "advisory"), 30,
                 "the retry to wait for the key the orphan holds")
        locker.rollback()  # the orphan goes on and commits
        retry.join(CLIENT_TIMEOUT_S)
    answer = retried["value"]
    assert answer.status == 201, answer
    doc = json.loads(answer.body)
    assert doc.get("replayed") is True, doc
    assert stored_ids(store, "orphan") == [doc["id"]]


def test_a_call_waiting_for_a_connection_fails_once_the_server_is_known_down(
    store_url: str, backend: str
) -> None:
    """A call already waiting for a pooled connection when another call finds the
    server down is answered with that (StoreUnavailable naming the refused connection),
    not left to wait out the pool's timeout (here 600 s) for a connection that cannot
    come."""
    if backend != "pg":
        pytest.skip("PostgreSQL's connection pool")
    from headgate.adapters.postgres.connection import PgDatabase

    parts = urlsplit(store_url)
    proxy = Proxy((parts.hostname or "127.0.0.1", parts.port or 5432))
    # A pool timeout far beyond the joins below: a waiter left to wait it out fails them.
    db = PgDatabase(proxy.url(store_url), min_size=1, max_size=1, pool_timeout_s=600)
    try:
        holding, release = threading.Event(), threading.Event()
        outcomes: dict[str, BaseException | None] = {}

        def holder() -> None:  # holds the pool's only connection
            try:
                with db.transaction() as conn:
                    conn.execute("SELECT 1")
                    holding.set()
                    release.wait(30)
                outcomes["holder"] = None
            except BaseException as exc:  # noqa: BLE001 - the test reads it
                outcomes["holder"] = exc

        def waiter() -> None:
            try:
                db.query("SELECT 1")
                outcomes["waiter"] = None
            except BaseException as exc:  # noqa: BLE001
                outcomes["waiter"] = exc

        threads = [threading.Thread(target=holder), threading.Thread(target=waiter)]
        threads[0].start()
        assert holding.wait(10), outcomes
        threads[1].start()
        wait_for(lambda: db.pool.get_stats().get("requests_waiting", 0) >= 1, 10,
                 "the waiter to queue for a connection")
        proxy.refusing.set()
        proxy.cut()
        release.set()  # the holder's commit finds the server gone and marks it down
        for thread in threads:
            thread.join(60)
        assert not any(t.is_alive() for t in threads), "still waiting for a connection"
        assert isinstance(outcomes["holder"], StoreUnavailable), outcomes
        waited = outcomes["waiter"]
        assert isinstance(waited, StoreUnavailable), outcomes
        assert "server closed the connection" in str(waited), waited
    finally:
        db.close()
        proxy.close()


# -- with embedding code: the key claimed before the enqueue --------------------------------

class Gate:
    """Middleware that holds an enqueue of payload tag `slow` until opened."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.open = threading.Event()

    def __call__(self, ctx: Any, envs: list[Any], nxt: Any) -> list[str]:
        if json.loads(envs[0].payload).get("tag") == "slow":
            self.entered.set()
            self.open.wait(30)
        return nxt(envs)


@pytest.fixture
def embedded(store_url: str, backend: str) -> Any:
    """(proxy, gate, base URL): the API with a middleware (so each enqueue claims its
    key first, in a transaction of its own) served over HTTP in this process, its store
    reached through the proxy."""
    if backend != "pg":
        pytest.skip("PostgreSQL's connection and commit")
    from werkzeug.serving import make_server

    from headgate import open_store
    from headgate.services.config import Settings
    from headgate.web import create_app

    parts = urlsplit(store_url)
    proxy = Proxy((parts.hostname or "127.0.0.1", parts.port or 5432))
    served = open_store(proxy.url(store_url))
    gate = Gate()
    app = create_app(served, config=Settings(store="pg", pg_url=proxy.url(store_url)),
                     middleware=[gate], background=False)
    server = make_server("127.0.0.1", 0, app, threaded=True)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield proxy, gate, f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        served.close()
        proxy.close()


def test_a_key_left_claimed_by_the_outage_is_released_for_its_retry(
    embedded: tuple[Proxy, Gate, str], store: Store
) -> None:
    """The store went away after the key was claimed and before the enqueue: the answer
    is 503 and the key could not be released then. Its retry, once the store is back,
    enqueues the job (not a 409 'still in progress' for the next minute)."""
    proxy, gate, base = embedded
    assert post_job(base, "warm-up", fx_body("warm-up")).status == 201
    thread, out = in_background(post_job, base, "k-claimed", fx_body("slow"))
    assert gate.entered.wait(30)
    proxy.refusing.set()
    proxy.cut()
    gate.open.set()
    thread.join(CLIENT_TIMEOUT_S)
    assert_503(out["value"])
    assert stored_ids(store, "slow") == []
    proxy.refusing.clear()

    again = retried(base, "k-claimed", fx_body("slow"))
    assert again.status == 201, again
    doc = json.loads(again.body)
    assert "replayed" not in doc
    assert stored_ids(store, "slow") == [doc["id"]]
    replay = post_job(base, "k-claimed", fx_body("slow"))
    assert (replay.status, json.loads(replay.body)) == (201, {"id": doc["id"],
                                                               "replayed": True})


def test_a_claimed_enqueue_whose_answer_was_lost_is_joined_by_its_retry(
    embedded: tuple[Proxy, Gate, str], store: Store
) -> None:
    """The key was claimed, the enqueue committed, its answer was lost and the store
    went away: 503, the key left claimed. The retry releases it, runs again, and joins
    the job the first attempt made (the Idempotency-Key is its unique key)."""
    proxy, gate, base = embedded
    assert post_job(base, "warm-up", fx_body("warm-up")).status == 201
    thread, out = in_background(post_job, base, "k-joined", fx_body("slow"))
    assert gate.entered.wait(30)
    proxy.hold()
    gate.open.set()
    first_id = wait_for(lambda: stored_ids(store, "slow"), 30, "the enqueue to commit")[0]
    proxy.refusing.set()
    proxy.cut()
    thread.join(CLIENT_TIMEOUT_S)
    assert_503(out["value"])
    proxy.refusing.clear()

    again = retried(base, "k-joined", fx_body("slow"))
    assert again.status == 201, again
    assert json.loads(again.body) == {"id": first_id, "replayed": True}
    assert stored_ids(store, "slow") == [first_id]
