"""What several conformance tests do to a store, through the port only: recount every
job, finish one, lose a lease for real, get a fingerprint quarantined."""

from __future__ import annotations

import time

from headgate import Client, Job, JobFilter, Outcome, State, fingerprint
from headgate.store.port import Store


def all_jobs(store: Store, queue: str | None = None) -> list[Job]:
    """Every job, by paging the public listing (the test's own recount)."""
    jobs: list[Job] = []
    cursor: str | None = None
    while True:
        page = store.list_jobs(JobFilter(queue=queue), cursor=cursor, limit=200)
        jobs.extend(page.jobs)
        if page.next_cursor is None:
            return jobs
        cursor = page.next_cursor


def job_count(store: Store) -> int:
    """Every job the store holds, whatever its state (from the maintained counters)."""
    return sum(store.counts().values())


def stored_job(store: Store, job_id: str, payload: bool = False) -> Job:
    job = store.get_job(job_id, include_payload=payload)
    assert job is not None, f"job {job_id} is not stored"
    return job


def finish_job(store: Store, job_id: str, outcome: Outcome | None = None) -> None:
    """Claim `job_id` (among whatever else its queue admits) and ack it: success
    unless another outcome is named."""
    claims = store.admit("w", [stored_job(store, job_id).queue], capacity=100)
    (claim,) = [c for c in claims if c.job.id == job_id]
    store.ack(claim, Outcome.SUCCESS if outcome is None else outcome)


def lose_lease(store: Store, job_id: str, queue: str, worker: str = "crasher") -> Job:
    """Admit `job_id` (alone in `queue`) on a 30 ms lease, let it expire and reclaim it:
    one real lost lease. A retryable job is made due again at once so the next crash
    need not wait out the reclaim backoff."""
    claims = store.admit(worker, [queue], capacity=1, lease_ms=30)
    assert [c.job.id for c in claims] == [job_id]
    deadline = claims[0].lease_expires_at_ms
    while store.now_ms() <= deadline:
        time.sleep(0.01)
    assert store.reclaim_expired() == 1
    job = store.get_job(job_id)
    assert job is not None
    if job.state is State.RETRYABLE:
        store.reschedule_job(job_id, 0)
    return job


def quarantine_fingerprint(store: Store, kind: str, payload: bytes) -> str:
    """Get (kind, payload)'s fingerprint quarantined the real way: a job with it loses
    its lease three times. The crasher lives in its own queue, `crash-<fp>`."""
    fp = fingerprint(kind, payload)
    queue = f"crash-{fp[:8]}"
    job_id = Client(store).enqueue(kind, payload, queue=queue)
    for _ in range(3):
        job = lose_lease(store, job_id, queue)
    assert job.state is State.QUARANTINED
    return fp
