"""Recording finished attempts: decide the outcome once, queue it, write it in batches.

Pool threads (and the lease keeper, for a handler past its timeout grace) never write
an ack themselves: they queue the decision, and the dispatcher writes everything queued
since its last turn in ONE transaction — together with its next admission when it has
free slots (``store.ack_and_admit``), else alone (``store.ack_many``). Acks therefore
batch themselves under load (whatever finished while the previous transaction ran goes
into the next), and no two of our own threads queue for SQLite's write lock.

While acks cannot be written (store unavailable) they stay queued and the dispatcher
admits nothing, so at most ``concurrency`` wait. They are kept however long the outage
lasts: the store still takes an ack whose lease ran out as long as nobody reclaimed the
job (and refuses it by the fence otherwise), so giving up early would only turn finished
work into a re-run and a charged crash. Only a halting worker drops them.
"""

from __future__ import annotations

import collections
import logging
import threading
import time
from collections.abc import Callable, Iterable

from headgate.core import AckRequest, InvalidInput, LeaseLost, Outcome, StoreUnavailable
from headgate.store.port import Admission

from .attempts import DEADLINE, TIMED_OUT, Attempt, Inflight, lock_order
from .execution import Decision
from .observe import fields_of, outcome_label

log = logging.getLogger("headgate.worker")

Queued = tuple[Attempt, Decision]


class AckQueue:
    def __init__(self, store: Admission, inflight: Inflight, *, lease_ms: int,
                 log_on_success: bool, halted: threading.Event,
                 on_queued: Callable[[], None]) -> None:
        self.store = store
        self.inflight = inflight
        self.lease_ms = lease_ms
        self.log_on_success = log_on_success
        self.halted = halted
        self.on_queued = on_queued
        self._lock = threading.Lock()
        self._queue: collections.deque[Queued] = collections.deque()

    def finish(self, attempt: Attempt, decision: Decision) -> bool:
        """Decide the attempt's end, unless another path already did, and queue its ack
        for the dispatcher; True when an ack was queued."""
        if not attempt.settle():
            return False
        gate = attempt.gate
        if gate.closed:
            log.info("job %s %s: abandoned (%s); its outcome %s is discarded",
                     attempt.job.id, attempt.job.kind, gate.reason, decision.label)
            self.inflight.done_with(attempt)
            return False
        if gate.reason == TIMED_OUT:
            decision = Decision(Outcome.RETRY, f"timed out after {attempt.timeout_ms} ms")
        elif gate.reason == DEADLINE:
            decision = Decision(Outcome.SKIP, "deadline exceeded while running")
        if attempt.capture is not None and (
            decision.outcome is not Outcome.SUCCESS or self.log_on_success
        ):
            decision.logs = attempt.capture.lines()
        attempt.acking = True
        with self._lock:
            self._queue.append((attempt, decision))
        self.on_queued()
        return True

    def take(self) -> list[Queued]:
        """Everything queued so far, in job-row order (see ``lock_order``); the caller
        writes it with ``write`` or its own combined call, then ``settle`` or
        ``refused``."""
        with self._lock:
            batch = list(self._queue)
            self._queue.clear()
        batch.sort(key=lambda item: lock_order(item[0]))
        return batch

    @staticmethod
    def requests(batch: list[Queued]) -> list[AckRequest]:
        return [
            AckRequest(a.claim, d.outcome.value, d.error, d.delay_ms, d.result,
                       d.result_schema_version, tuple(d.logs))
            for a, d in batch
        ]

    def write(self, batch: list[Queued]) -> bool:
        """Write a taken batch in one transaction; False when the store was unavailable
        (the batch is queued again)."""
        if not batch:
            return True
        try:
            lost = self.store.ack_many(self.requests(batch))
        except StoreUnavailable as exc:
            self.refused(batch, exc)
            return False
        except Exception as exc:  # noqa: BLE001 - e.g. one invalid outcome: isolate it
            log.warning("batch ack failed (%s); acking one by one", exc)
            for attempt, decision in batch:
                self._ack_one(attempt, decision)
            return True
        self.settle(batch, lost)
        return True

    def settle(self, batch: list[Queued], lost: Iterable[str]) -> None:
        """The batch is written; ``lost`` names the jobs whose lease was gone, so their
        outcome was discarded by the store."""
        gone = set(lost)
        for attempt, decision in batch:
            if attempt.job.id in gone:
                attempt.gate.close("lease lost")
                log.info("job %s %s: lease lost before the ack; outcome %s discarded",
                         attempt.job.id, attempt.job.kind, decision.label)
            else:
                self._log_outcome(attempt, decision)
            self.inflight.done_with(attempt)

    def refused(self, batch: list[Queued], exc: Exception) -> None:
        """The store was unavailable: queue the batch again, ahead of newer acks."""
        log.warning("acking %d job(s) failed, will retry: %s", len(batch), exc)
        with self._lock:
            self._queue.extendleft(reversed(batch))
        self.give_up()

    def give_up(self) -> bool:
        """Drop the queued acks once the worker is halting; True while some are still
        worth retrying."""
        if not self.halted.is_set():
            with self._lock:
                return bool(self._queue)
        with self._lock:
            dropped, self._queue = list(self._queue), collections.deque()
        for attempt, _ in dropped:
            log.error("job %s: ack could not be written; the lease will expire and the "
                      "reclaimer will retry it", attempt.job.id)
            self.inflight.done_with(attempt)
        return False

    def _ack_one(self, attempt: Attempt, decision: Decision) -> None:
        job = attempt.job
        give_up_at = time.monotonic() + self.lease_ms / 1000
        delay = 0.05
        try:
            while True:
                try:
                    self.store.ack(
                        attempt.claim, decision.outcome, decision.error, decision.delay_ms,
                        decision.result, result_schema_version=decision.result_schema_version,
                        logs=decision.logs,
                    )
                    self._log_outcome(attempt, decision)
                    return
                except LeaseLost:
                    attempt.gate.close("lease lost")
                    log.info("job %s %s: lease lost before the ack; outcome %s discarded",
                             job.id, job.kind, decision.label)
                    return
                except StoreUnavailable as exc:
                    if time.monotonic() + delay > give_up_at or self.halted.is_set():
                        log.error("job %s: ack (%s) failed, store unavailable: %s; the lease "
                                  "will expire and the reclaimer will retry it",
                                  job.id, decision.label, exc)
                        return
                    time.sleep(delay)
                    delay = min(delay * 2, 1.0)
                except InvalidInput as exc:
                    if decision.outcome is Outcome.RETRY:
                        log.error("job %s: ack rejected: %s", job.id, exc)
                        return
                    decision = Decision(Outcome.RETRY, f"invalid outcome from handler: {exc}",
                                        logs=decision.logs)
        finally:
            self.inflight.done_with(attempt)

    def _log_outcome(self, attempt: Attempt, decision: Decision) -> None:
        if not log.isEnabledFor(logging.INFO):
            return
        job = attempt.job
        elapsed_ms = int((time.monotonic() - attempt.started) * 1000)
        label = outcome_label(decision, job)
        exhausted = label != decision.label
        detail = f": {decision.error.splitlines()[0]}" if decision.error else ""
        if exhausted:
            # The retry the handler asked for does not happen: say why, and no delay.
            detail += f" (attempts exhausted: {job.attempt + 1} of {job.max_attempts})"
        elif decision.delay_ms is not None and decision.outcome is not Outcome.SUCCESS:
            detail += f" (delay {decision.delay_ms} ms)"
        worker_id = attempt.ctx.worker_id if attempt.ctx is not None else job.worker_id
        log.info("job %s %s run %d: %s in %d ms%s", job.id, job.kind, attempt.claim.fence,
                 label, elapsed_ms, detail,
                 extra={**fields_of(job, worker_id or ""), "outcome": label,
                        "elapsed_ms": elapsed_ms})
