"""The LISTEN threads of the PostgreSQL store (headgate/adapters/postgres/notify.py):
close() ends them at once, nothing they were sent is lost, and they come back after
their backend is killed."""

from __future__ import annotations

import threading
import time

import psycopg
import pytest
from support import pg_available, wait_for

from headgate import open_store
from headgate.adapters.postgres import notify
from headgate.adapters.postgres.notify import FinishedListener, Listener
from headgate.store.activity import ActivityHub

pytestmark = pytest.mark.skipif(not pg_available(), reason="HG_TEST_PG not set")


def send(pg_url: str, channel: str, payload: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        conn.execute("SELECT pg_notify(%s, %s)", (channel, payload))


class Heard:
    """What a hub published, as a Listener's caller sees it."""

    def __init__(self) -> None:
        self.hub = ActivityHub()
        self.queues: list[frozenset[str]] = []
        self.hub.subscribe(self.queues.append)

    def connections(self) -> int:
        return self.queues.count(frozenset())


class Calls:
    """A finished-job watcher; next() waits for its next call."""

    def __init__(self) -> None:
        self.called = threading.Event()

    def __call__(self) -> None:
        self.called.set()

    def next(self, pg_url: str | None = None, payload: str = "") -> None:
        """Wait for the next call, after sending `payload` if a URL is given."""
        self.called.clear()
        if pg_url is not None:
            send(pg_url, notify.FINISHED_CHANNEL, payload)
        assert self.called.wait(10), "the watcher was not called"


def test_close_wakes_the_listen_thread(pg_url: str) -> None:
    heard = Heard()
    # Left alone, the thread sleeps longer than close() waits for it: gone after close()
    # means close() woke it.
    assert notify.IDLE_WAIT_S > notify.CLOSE_JOIN_S
    listener = Listener(pg_url, heard.hub, notify.new_origin())
    try:
        assert listener.connected.wait(10)
        # A round trip: the thread is back asleep on the socket before close().
        send(pg_url, notify.CHANNEL, notify.encode({"woken"}, "elsewhere"))
        wait_for(lambda: frozenset({"woken"}) in heard.queues, 10, "the notification")
    finally:
        listener.close()
    assert not listener._thread.is_alive()
    listener.close()  # twice is harmless


def test_close_wakes_the_finished_listen_thread(pg_url: str) -> None:
    assert notify.IDLE_WAIT_S > notify.CLOSE_JOIN_S
    listener = FinishedListener(pg_url)
    try:
        calls = Calls()
        assert listener.watch("job-1", calls) is not None
        calls.next(pg_url, "job-1")
    finally:
        listener.close()
    assert not listener._thread.is_alive()


class _NotifiedWhileListening(Listener):
    # The notification comes back in the same reply as LISTEN's: psycopg has read it off
    # the socket before the thread first waits on it.
    listen_sql = f"{notify.LISTEN}; NOTIFY {notify.CHANNEL}, 'elsewhere|early'"


def test_a_notification_in_the_reply_to_listen_is_heard(pg_url: str) -> None:
    heard = Heard()
    listener = _NotifiedWhileListening(pg_url, heard.hub, notify.new_origin())
    try:
        wait_for(lambda: frozenset({"early"}) in heard.queues, 10, "the early notification")
    finally:
        listener.close()


def _terminate(pg_url: str, statement: str) -> None:
    with psycopg.connect(pg_url, autocommit=True) as conn:
        killed = conn.execute(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity "
            "WHERE datname = current_database() AND query = %s", (statement,)).fetchone()
    assert killed == (1,)


def test_the_listener_comes_back_after_its_backend_is_killed(
        pg_url: str) -> None:
    heard = Heard()
    listener = Listener(pg_url, heard.hub, notify.new_origin())
    try:
        assert listener.connected.wait(10)
        _terminate(pg_url, notify.LISTEN)
        # Each connection says "anything may have changed" once LISTEN is in place.
        wait_for(lambda: heard.connections() == 2, 10, "the reconnection")
        assert listener.connected.is_set()
        send(pg_url, notify.CHANNEL, notify.encode({"after"}, "elsewhere"))
        wait_for(lambda: frozenset({"after"}) in heard.queues, 10, "a notification after")
    finally:
        listener.close()
    assert not listener._thread.is_alive()


def test_the_finished_listener_comes_back_after_its_backend_is_killed(pg_url: str) -> None:
    listener = FinishedListener(pg_url)
    try:
        calls = Calls()
        assert listener.watch("job-1", calls) is not None
        calls.next(pg_url, "job-1")  # the thread is past its first connection's calls
        _terminate(pg_url, notify.LISTEN_FINISHED)
        calls.next()  # a finish may have been missed meanwhile: every watcher is called
        assert listener.connected.wait(10)
        calls.next(pg_url, "job-1")
    finally:
        listener.close()
    assert not listener._thread.is_alive()


@pytest.mark.parametrize("start", ["watch_finished", "subscribe"])
def test_no_listen_thread_outlives_a_close_it_raced(pg_url: str, start: str) -> None:
    """A watch (or the first subscriber) that has decided to start its LISTEN thread
    while close() runs either starts it before close() looks, which then ends it, or
    finds the store closed: never a thread that retries its connection after the
    store is gone. The store's lock is held here so that both calls wait at once."""
    store = open_store(pg_url)
    before = {t.ident for t in threading.enumerate()}
    begin = {"watch_finished": lambda: store.watch_finished("x", lambda: None),
             "subscribe": lambda: store.activity.subscribe(lambda _q: None)}[start]
    store._listen_lock.acquire()  # type: ignore[attr-defined]
    starting = threading.Thread(target=begin)
    closing = threading.Thread(target=store.close)
    starting.start()
    closing.start()
    time.sleep(0.2)  # both are waiting for the lock by now
    assert closing.is_alive() and starting.is_alive()
    store._listen_lock.release()  # type: ignore[attr-defined]
    starting.join(15)
    closing.join(15)

    def listen_threads() -> list[str]:
        return [t.name for t in threading.enumerate() if t.ident not in before
                and t.name in ("headgate-listen", "headgate-finished")]

    wait_for(lambda: not listen_threads(), 10, "the LISTEN threads to end")
