"""``JobRef``: a handle on an enqueued task, and waiting for its result.

``result(timeout)`` reads the job until it reaches a terminal state. On a store that
announces finished jobs (PostgreSQL: LISTEN on ``headgate_finished``, sent by a
trigger for the task layer's jobs) it sleeps until the announcement, re-reading once a
second in case one was lost; elsewhere (SQLite) it polls, from 5 ms growing by half
each time up to 250 ms, so a quick job is seen quickly and a long wait costs a few
reads a second.

``result_async`` waits the same way without blocking the event loop: on PostgreSQL the
announcement wakes an ``asyncio.Event`` and the reads run in a thread; on SQLite the
whole wait runs in a thread (``asyncio.to_thread``).
"""

from __future__ import annotations

import asyncio
import threading
import time
from typing import TYPE_CHECKING, Any, Generic, TypeVar

from headgate.core import State

from .errors import JobFailed, ResultGone

if TYPE_CHECKING:
    from headgate.store.port import Store

    from .codec import Codec

R = TypeVar("R")

POLL_FIRST_S = 0.005
POLL_GROWTH = 1.5
POLL_MAX_S = 0.25
# With announcements: a lost one (a reconnecting listener) costs at most this.
RECHECK_S = 1.0
FAILED = (State.ARCHIVED, State.CANCELLED, State.QUARANTINED, State.UNDECODABLE)

_PENDING: Any = object()


class JobRef(Generic[R]):
    """``id`` of the job; ``state()`` now; ``result(timeout)`` its decoded return value
    once it completed (``JobFailed`` if it ended otherwise, ``ResultGone`` if the job
    no longer exists, ``TimeoutError`` if it is still going after ``timeout`` s)."""

    def __init__(self, store: Store, job_id: str, codec: Codec) -> None:
        self.store = store
        self.id = job_id
        self.codec = codec
        self._last_state: str | None = None  # as last read, for a timeout's message

    def __repr__(self) -> str:
        return f"<JobRef {self.id}>"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, JobRef) and other.id == self.id

    def __hash__(self) -> int:
        return hash(self.id)

    def state(self) -> State | None:
        """The job's state now; None once it no longer exists."""
        job = self.store.get_job(self.id)
        return None if job is None else job.state

    def _settled(self) -> Any:
        """The decoded value if the job completed, else ``_PENDING``; raises when it
        ended any other way."""
        job = self.store.get_job(self.id)
        if job is None:
            raise ResultGone(self.id)
        if job.state is State.COMPLETED:
            blob = self.store.get_result(self.id)
            if blob is None:
                return None
            try:
                return self.codec.decode_result(blob.bytes)
            except Exception as exc:  # noqa: BLE001 - any decode failure: no value
                raise JobFailed(self.id, "completed",
                                f"result cannot be decoded: {type(exc).__name__}: {exc}"
                                ) from exc
        if job.state in FAILED:
            last = job.errors[-1].get("error") if job.errors else None
            raise JobFailed(self.id, job.state.value, last)
        self._last_state = job.state.value
        return _PENDING

    def result(self, timeout: float | None = None) -> R:
        deadline = None if timeout is None else time.monotonic() + timeout
        wake = threading.Event()
        unwatch = self.store.watch_finished(self.id, wake.set)
        try:
            delay = POLL_FIRST_S
            while True:
                wake.clear()
                value = self._settled()
                if value is not _PENDING:
                    return value  # type: ignore[no-any-return]
                left = _left(deadline, self, timeout)
                if unwatch is not None:
                    wake.wait(min(RECHECK_S, left))
                else:
                    time.sleep(min(delay, left))
                    delay = min(delay * POLL_GROWTH, POLL_MAX_S)
        finally:
            if unwatch is not None:
                unwatch()

    async def result_async(self, timeout: float | None = None) -> R:
        loop = asyncio.get_running_loop()
        wake = asyncio.Event()

        def announced() -> None:
            loop.call_soon_threadsafe(wake.set)

        unwatch = await asyncio.to_thread(self.store.watch_finished, self.id, announced)
        if unwatch is None:
            return await asyncio.to_thread(self.result, timeout)
        deadline = None if timeout is None else time.monotonic() + timeout
        try:
            while True:
                wake.clear()
                value = await asyncio.to_thread(self._settled)
                if value is not _PENDING:
                    return value  # type: ignore[no-any-return]
                left = _left(deadline, self, timeout)
                try:
                    await asyncio.wait_for(wake.wait(), min(RECHECK_S, left))
                except TimeoutError:
                    pass
        finally:
            unwatch()


def _left(deadline: float | None, ref: JobRef[Any], timeout: float | None) -> float:
    if deadline is None:
        return RECHECK_S
    left = deadline - time.monotonic()
    if left <= 0:
        # The state says where it waits: "available" with no worker on its queue is the
        # common first-day mistake.
        state = ref._last_state
        hint = ""
        if state == "available":
            hint = " (still available: is a worker running for its queue?)"
        elif state:
            hint = f" (it is {state})"
        raise TimeoutError(f"job {ref.id} has not finished after {timeout} s{hint}")
    return left

__all__ = ["JobRef"]
