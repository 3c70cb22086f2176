"""Inspection at the port: counts, job reads and pages with their filters and cursors,
results, outputs and progress, queue stats, partitions, history buckets and latency
histograms — each checked against what the test itself did to the store."""

from __future__ import annotations

import pytest

from headgate import Client, Envelope, JobFilter, Outcome, State, Store
from headgate.core import InvalidInput
from headgate.core.schema_constants import HISTORY_BUCKET_MS


def admit_all(store: Store, queue: str, n: int = 100) -> list:
    return store.admit("w", [queue], capacity=n, lease_ms=60_000)


def page_ids(store: Store, flt: JobFilter, limit: int) -> list[str]:
    ids: list[str] = []
    cursor: str | None = None
    while True:
        page = store.list_jobs(flt, cursor=cursor, limit=limit)
        assert len(page.jobs) <= limit
        ids += [j.id for j in page.jobs]
        if page.next_cursor is None:
            return ids
        cursor = page.next_cursor


def nonzero(counts: dict[str, int]) -> dict[str, int]:
    return {state: n for state, n in counts.items() if n}


def test_counts_follow_each_state_per_queue_and_overall(store: Store, client: Client) -> None:
    now = store.now_ms()
    for i in range(4):
        client.enqueue("k", b"%d" % i, queue="a")
    client.enqueue("k", b"s", queue="a", scheduled_at_ms=now + 3_600_000)
    client.enqueue("k", b"b", queue="b")
    first, second, third, _ = admit_all(store, "a")
    store.ack(first, Outcome.SUCCESS)
    store.ack(second, Outcome.SKIP, error="no")
    store.ack(third, Outcome.RETRY, error="later", delay_ms=60_000)
    assert set(store.counts("a")) == {s.value for s in State if s is not State.DELETED}
    assert nonzero(store.counts("a")) == {"running": 1, "scheduled": 1, "completed": 1,
                                 "archived": 1, "retryable": 1}
    assert nonzero(store.counts("b")) == {"available": 1}
    overall = store.counts()
    assert overall["available"] == 1 and overall["running"] == 1
    assert sum(overall.values()) == 6
    assert nonzero(store.counts("nowhere")) == {}


def test_pages_walk_every_match_once_newest_first(store: Store, client: Client) -> None:
    ids = [client.enqueue("k", b"%d" % i, queue="q", tags=["even" if i % 2 == 0 else "odd"])
           for i in range(11)]
    for limit in (1, 3, 50):
        walked = page_ids(store, JobFilter(queue="q"), limit)
        assert sorted(walked) == sorted(ids) and len(walked) == len(set(walked))
        jobs = [store.get_job(i) for i in walked]
        stamps = [j.enqueued_at_ms for j in jobs if j is not None]
        assert stamps == sorted(stamps, reverse=True)
    assert set(page_ids(store, JobFilter(tags_all=["even"]), 2)) == set(ids[::2])


def test_filters_narrow_the_listing(store: Store, client: Client) -> None:
    mail = client.enqueue("email.send", b"1", queue="q", partition_key="acme", priority=2,
                          tags=["x", "y"])
    sms = client.enqueue("sms.send", b"2", queue="q", tags=["y"])
    other = client.enqueue("email.digest", b"3", queue="r", rate_class="slow")
    (claim,) = [c for c in admit_all(store, "q") if c.job.id == sms]
    store.ack(claim, Outcome.SKIP, error="Timeout: gateway down\ntrace")

    def ids(**fields: object) -> set[str]:
        return set(page_ids(store, JobFilter(**fields), 10))  # type: ignore[arg-type]

    assert ids(queue="q") == {mail, sms}
    assert ids(kind="email.send") == {mail}
    assert ids(kind_prefix="email.") == {mail, other}
    assert ids(partition_key="acme") == {mail}
    assert ids(rate_class="slow") == {other}
    assert ids(priority=2) == {mail}
    assert ids(tags_all=["x", "y"]) == {mail}
    assert ids(tags_any=["x", "y"]) == {mail, sms}
    assert ids(state="archived") == {sms}
    assert ids(error_prefix="Timeout:") == {sms}
    assert ids(id=other) == {other}
    job = store.get_job(mail)
    assert job is not None
    assert ids(fingerprint=job.fingerprint) == {mail}
    assert ids(queue="q", state="running") == {mail}


def test_payload_is_read_only_when_asked(store: Store, client: Client) -> None:
    job_id = client.enqueue("k", b"secret-bytes")
    bare = store.get_job(job_id)
    full = store.get_job(job_id, include_payload=True)
    assert bare is not None and full is not None
    assert full.payload == b"secret-bytes" and bare.payload != b"secret-bytes"
    (listed,) = store.list_jobs(JobFilter(), include_payload=True).jobs
    assert listed.payload == b"secret-bytes"
    assert store.get_job("missing") is None


def test_a_bad_cursor_or_limit_is_invalid_input(store: Store, client: Client) -> None:
    client.enqueue("k", b"")
    with pytest.raises(InvalidInput):
        store.list_jobs(JobFilter(), cursor="not-a-cursor")
    with pytest.raises(InvalidInput):
        store.list_jobs(JobFilter(), limit=0)


def test_result_output_and_progress_round_trip(store: Store, client: Client) -> None:
    job_id = client.enqueue("k", b"")
    assert store.get_result(job_id) is None and store.get_output(job_id) is None
    assert store.get_progress(job_id) is None
    (claim,) = admit_all(store, "default")
    store.report_progress(claim, 3, 10, "third")
    store.write_output(claim, b"partial", schema_version=2)
    progress = store.get_progress(job_id)
    assert progress is not None
    assert (progress.current, progress.total, progress.message) == (3, 10, "third")
    output = store.get_output(job_id)
    assert output is not None and (output.bytes, output.schema_version) == (b"partial", 2)
    store.ack(claim, Outcome.SUCCESS, result=b"done", result_schema_version=3)
    result = store.get_result(job_id)
    assert result is not None and (result.bytes, result.schema_version) == (b"done", 3)
    assert store.get_result("missing") is None


def test_queue_stats_report_settings_states_and_oldest_wait(store: Store,
                                                           client: Client) -> None:
    for i in range(3):
        client.enqueue("k", b"%d" % i, queue="busy")
    client.enqueue("k", b"p", queue="idle")
    store.set_queue_weight("busy", 3)
    store.set_enqueue_limit("busy", 50)
    store.set_queue_paused("idle", True)
    (claim, *_) = admit_all(store, "busy", 1)
    store.ack(claim, Outcome.SUCCESS)
    stats = {s.queue: s for s in store.queue_stats()}
    busy, idle = stats["busy"], stats["idle"]
    assert (busy.weight, busy.paused, busy.max_unfinished_jobs) == (3, False, 50)
    assert busy.by_state["available"] == 2 and busy.by_state["completed"] == 1
    assert busy.unfinished_jobs == 2
    assert busy.oldest_available_ms is not None and busy.oldest_available_ms >= 0
    assert idle.paused is True and idle.unfinished_jobs == 1
    assert idle.max_unfinished_jobs is None


def test_an_empty_queue_drains_in_no_time(store: Store, client: Client) -> None:
    client.enqueue("k", b"", queue="q")
    (claim,) = admit_all(store, "q")
    store.ack(claim, Outcome.SUCCESS)
    (q,) = [s for s in store.queue_stats() if s.queue == "q"]
    assert (q.unfinished_jobs, q.time_to_drain_ms, q.oldest_available_ms) == (
        0, 0, None)


def test_partitions_list_waiting_and_running_work(store: Store, client: Client) -> None:
    for i in range(3):
        client.enqueue("k", b"a%d" % i, queue="q", partition_key="acme")
    client.enqueue("k", b"g", queue="q", partition_key="globex")
    client.enqueue("k", b"done", queue="q", partition_key="initech")
    claims = admit_all(store, "q", 100)
    for c in claims:
        if c.job.partition_key == "initech":
            store.ack(c, Outcome.SUCCESS)
        elif c.job.partition_key == "acme":
            store.release([c])
    parts = {p.partition_key: p for p in store.partitions("q")}
    assert set(parts) == {"acme", "globex"}  # initech has nothing left
    assert (parts["acme"].waiting, parts["acme"].running) == (3, 0)
    assert (parts["globex"].waiting, parts["globex"].running) == (0, 1)
    assert store.partitions("nowhere") == []


def test_history_counts_arrivals_completions_and_failures(store: Store,
                                                          client: Client) -> None:
    since = store.now_ms() - 60_000
    client.enqueue_many([Envelope(kind="k", payload=b"%d" % i, queue="h", max_attempts=1)
                         for i in range(5)])
    claims = admit_all(store, "h")
    for c in claims[:3]:
        store.ack(c, Outcome.SUCCESS)
    store.ack(claims[3], Outcome.RETRY, error="boom")  # last attempt: archived
    buckets = store.history("h", since, 60_000)
    assert sum(b.arrived for b in buckets) == 5
    assert sum(b.completed for b in buckets) == 3
    assert sum(b.failed for b in buckets) == 1
    assert all(b.at_ms % HISTORY_BUCKET_MS == 0 for b in buckets)
    totals = store.history_counters(since)
    arrived = sum(v[0] for v in totals["h"].values())
    completed = sum(v[1] for v in totals["h"].values())
    failed = sum(v[2] for v in totals["h"].values())
    assert (arrived, completed, failed) == (5, 3, 1)
    assert store.history("other", since, 60_000) == []


def test_record_queue_depths_writes_the_unfinished_count(store: Store,
                                                         client: Client) -> None:
    since = store.now_ms() - 120_000
    for i in range(4):
        client.enqueue("k", b"%d" % i, queue="deep")
    (claim, *_) = admit_all(store, "deep", 1)
    store.ack(claim, Outcome.SUCCESS)
    assert store.record_queue_depths() >= 1
    assert store.history("deep", since, 60_000)[-1].depth == 3


def test_latency_histograms_count_each_admit_and_finish(store: Store,
                                                        client: Client) -> None:
    since = store.now_ms() - 60_000
    for i in range(3):
        client.enqueue("k", b"%d" % i, queue="lat")
    claims = admit_all(store, "lat")
    store.ack(claims[0], Outcome.SUCCESS)
    store.ack(claims[1], Outcome.SKIP, error="no")
    rows = [r for r in store.latency_histograms(since) if r[0] == "lat"]
    assert {r[2] for r in rows} == {"wait", "run"}

    # One row per (minute, metric, bucket bound) with that bucket's own count.
    total = {m: sum(n for _, _, mm, _, n, _ in rows if mm == m) for m in ("wait", "run")}
    assert total == {"wait": 3, "run": 2}
    assert all(r[1] % HISTORY_BUCKET_MS == 0 and r[5] >= 0 for r in rows)


def test_queue_memory_is_sampled_least_recent_first_and_reported(store: Store,
                                                                 client: Client) -> None:
    client.enqueue_many([Envelope(kind="k", payload=b"x" * 2_000, queue="big")
                         for _ in range(5)])
    client.enqueue("k", b"", queue="small")
    extras = store.queue_extras()
    assert extras["big"].memory_bytes is None  # never sampled yet
    assert store.sample_queue_memory(limit=1) == 1
    assert store.sample_queue_memory(limit=1) == 1  # the other queue's turn
    extras = store.queue_extras()
    big, small = extras["big"], extras["small"]
    assert big.memory_bytes is not None and small.memory_bytes is not None
    assert big.memory_bytes >= 5 * 2_000 > small.memory_bytes > 0
    assert big.memory_sampled_at_ms is not None
    with pytest.raises(InvalidInput):
        store.sample_queue_memory(limit=0)


def test_a_noisy_partition_is_told_apart_from_the_quiet_group(store: Store,
                                                              client: Client) -> None:
    client.enqueue_many([Envelope(kind="k", payload=b"%d" % i, queue="q",
                                  partition_key="loud") for i in range(8)])
    quiet = client.enqueue("k", b"q", queue="q", partition_key="calm")
    client.enqueue("k", b"even", queue="even", partition_key="a")
    client.enqueue("k", b"even", queue="even", partition_key="b")
    extras = store.queue_extras()
    assert (extras["even"].noisy_partitions, extras["even"].quiet_exact) == (0, True)
    info = extras["q"]
    assert (info.noisy_partitions, info.quiet_exact) == (1, False)
    assert info.quiet_oldest_available_ms is not None
    job = store.get_job(quiet)
    assert job is not None
    assert info.quiet_oldest_available_ms <= store.now_ms() - job.enqueued_at_ms + 1
