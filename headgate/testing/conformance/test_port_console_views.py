"""What the console's operator views read at the port, on both engines: latency
histograms by kind, the running jobs behind "what each worker runs now", the `payload:`
search within its scan bound, and the enqueued/finished time ranges."""

# mypy: disable-error-code="arg-type"
from __future__ import annotations

import json

import pytest

from headgate import Client, Envelope, JobFilter, Outcome, Store
from headgate.core import AckRequest, InvalidInput
from headgate.core.job_search import parse_search
from headgate.core.latency import summaries


def search(store: Store, q: str, limit: int = 50, **filters: object) -> list[str]:
    """Every id the search finds, page after page (following scan-limited cursors)."""
    f = JobFilter(**filters)  # type: ignore[arg-type]
    parse_search(q, f)
    ids: list[str] = []
    cursor = None
    while True:
        page = store.list_jobs(f, cursor=cursor, limit=limit)
        assert len(page.jobs) <= limit
        assert all(j.payload is None for j in page.jobs)  # not asked for
        ids += [j.id for j in page.jobs]
        if page.next_cursor is None:
            return ids
        cursor = page.next_cursor


def test_latency_totals_are_kept_per_kind_and_summed_per_queue(store: Store,
                                                               client: Client) -> None:
    since = store.now_ms() - 60_000
    client.enqueue_many([Envelope("mail", b"1", queue="lat"), Envelope("mail", b"2", queue="lat"),
                         Envelope("sms", b"3", queue="lat"), Envelope("mail", b"4", queue="other")])
    claims = store.admit("w", ["lat", "other"], capacity=10, lease_ms=60_000)
    assert len(claims) == 4
    store.ack_many([AckRequest(c, Outcome.SUCCESS) for c in claims])

    rows = store.latency_totals(since, queue="lat")
    assert {r[0] for r in rows} == {"lat"}
    totals, kinds = summaries(rows, "kind")
    assert totals["wait"]["count"] == 3 and totals["run"]["count"] == 3
    assert [(k["kind"], k["wait"]["count"], k["run"]["count"]) for k in kinds] == [
        ("mail", 2, 2), ("sms", 1, 1)]
    assert kinds[0]["run"]["p50_ms"] is not None and kinds[0]["run"]["p99_ms"] >= 0

    by_kind = store.latency_totals(since, kind="mail")
    totals, queues = summaries(by_kind, "queue")
    assert [(q["queue"], q["run"]["count"]) for q in queues] == [("lat", 2), ("other", 1)]
    assert totals["run"]["count"] == 3
    # Prometheus' per-queue read still sums every kind.
    assert sum(r[4] for r in store.latency_histograms(since)
               if r[0] == "lat" and r[2] == "run") == 3
    assert store.latency_totals(store.now_ms() + 120_000) == []


def test_a_retention_zero_job_deleted_from_running_is_timed_under_its_kind(
        store: Store, client: Client) -> None:
    since = store.now_ms() - 60_000
    client.enqueue("ephemeral", b"", queue="r0", retention_ms=0)
    (claim,) = store.admit("w", ["r0"], capacity=1)
    store.ack(claim, Outcome.SUCCESS)
    rows = store.latency_totals(since, kind="ephemeral")
    assert sum(r[4] for r in rows if r[2] == "run") == 1


def test_running_jobs_name_their_worker_kind_and_start(store: Store, client: Client) -> None:
    client.enqueue_many([Envelope("a", b"", queue="busy"), Envelope("b", b"", queue="busy"),
                         Envelope("c", b"", queue="idle")])
    mine = store.admit("w-1", ["busy"], capacity=1, lease_ms=60_000)
    theirs = store.admit("w-2", ["busy"], capacity=1, lease_ms=60_000)
    running = store.running_jobs()
    assert {(r.id, r.worker_id, r.kind, r.queue) for r in running} == {
        (mine[0].job.id, "w-1", mine[0].job.kind, "busy"),
        (theirs[0].job.id, "w-2", theirs[0].job.kind, "busy")}
    assert all(r.attempted_at_ms and r.lease_expires_at_ms for r in running)
    assert len(store.running_jobs(limit=1)) == 1
    store.ack(mine[0], Outcome.SUCCESS)
    assert [r.worker_id for r in store.running_jobs()] == ["w-2"]
    with pytest.raises(InvalidInput):
        store.running_jobs(limit=0)


def _payloads(client: Client) -> dict[str, str]:
    docs = {
        "alice": {"to": "alice@example.com", "n": 42, "ok": True, "tags": ["vip", "eu"],
                  "nested": {"city": "Zürich"}},
        "bob": {"to": "bob@example.com", "n": 7, "ok": False, "tags": ["us"]},
        "carol": {"to": "Carol@Example.org", "note": "caf\u00e9"},
    }
    ids = {name: client.enqueue("mail", json.dumps(doc).encode(), queue="pay")
           for name, doc in docs.items()}
    ids["text"] = client.enqueue("raw", b"plain text mentioning alice", queue="pay")
    ids["binary"] = client.enqueue("raw", b"\xff\xfe\x00", queue="other")
    return ids


def test_payload_search_matches_text_and_json_paths(store: Store, client: Client) -> None:
    ids = _payloads(client)

    def found(q: str, **filters: object) -> set[str]:
        return set(search(store, q, **filters))

    # Substring, ignoring case, over the decoded payload (escapes undone: "é" is
    # stored as \u00e9 by json.dumps).
    assert found("payload:alice") == {ids["alice"], ids["text"]}
    assert found("payload:EXAMPLE.COM") == {ids["alice"], ids["bob"]}
    assert found("payload:café") == {ids["carol"]}
    assert found("payload:zürich") == {ids["alice"]}
    # A JSON path: the value as written (strings exact), scalars as JSON spells them,
    # a list holding it; nested keys and list indexes.
    assert found("payload.to:bob@example.com") == {ids["bob"]}
    assert found("payload.to:BOB@example.com") == set()
    assert found("payload.n:42") == {ids["alice"]}
    assert found("payload.ok:false") == {ids["bob"]}
    assert found("payload.tags:vip") == {ids["alice"]}
    assert found("payload.tags.1:eu") == {ids["alice"]}
    assert found("payload.nested.city:Zürich") == {ids["alice"]}
    assert found("payload.missing:x") == set()
    # Terms AND with each other and with the SQL filters.
    assert found("payload:example payload.ok:true") == {ids["alice"]}
    assert found("payload:alice kind:raw") == {ids["text"]}
    assert found("payload:alice", queue="other") == set()


@pytest.mark.parametrize("q", ["payload:", "payload.to:", "payload..to:x", "payload.:x"])
def test_a_payload_term_without_value_or_path_is_refused(q: str) -> None:
    with pytest.raises(InvalidInput):
        parse_search(q, JobFilter())


def test_time_ranges_on_enqueued_and_finished(store: Store, client: Client) -> None:
    first = client.enqueue("k", b"1", queue="t")
    second = client.enqueue("k", b"2", queue="t")
    third = client.enqueue("k", b"3", queue="t")
    jobs = {j.id: j for j in store.list_jobs(JobFilter(queue="t"), limit=10).jobs}
    at = {job_id: jobs[job_id].enqueued_at_ms for job_id in (first, second, third)}

    def ids(**bounds: int) -> set[str]:
        return {j.id for j in store.list_jobs(JobFilter(queue="t", **bounds), limit=10).jobs}

    # After is inclusive, before exclusive.
    assert ids(enqueued_after_ms=at[third]) >= {third}
    assert first not in ids(enqueued_after_ms=at[first] + 1)
    assert ids(enqueued_before_ms=at[first]) == set()
    assert ids(enqueued_after_ms=at[first], enqueued_before_ms=at[third] + 1) == set(at)
    assert ids(enqueued_after_ms=at[third] + 1) == set()

    # Only finished jobs have a finish time.
    claims = store.admit("w", ["t"], capacity=1)
    store.ack(claims[0], Outcome.SUCCESS)
    done = store.get_job(claims[0].job.id)
    assert done is not None and done.finalized_at_ms is not None
    assert ids(finished_after_ms=0) == {done.id}
    assert ids(finished_after_ms=done.finalized_at_ms,
               finished_before_ms=done.finalized_at_ms + 1) == {done.id}
    assert ids(finished_before_ms=done.finalized_at_ms) == set()
    assert ids(finished_after_ms=done.finalized_at_ms + 1) == set()
    # With a state, the same bounds (the state's branch walks its index).
    assert {j.id for j in store.list_jobs(
        JobFilter(state="completed", finished_after_ms=0), limit=10).jobs} == {done.id}
