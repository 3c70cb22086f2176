"""A task that raises headgate.Throttled: the task layer passes it through (the task's
retry policy does not apply), the job is snoozed for retry_after_ms without using an
attempt, and the job's adaptive rate class is cut; after the wait it runs again."""

from __future__ import annotations

import headgate
from headgate import State
from headgate.core.adaptive import Adaptive


def test_throttled_task_is_snoozed_and_its_class_cut() -> None:
    app = headgate.App()
    runs: list[int] = []

    @app.task(rate_class="relay", max_attempts=1, retry=None)
    def send() -> str:
        runs.append(headgate.tasks.current().attempt)
        if len(runs) == 1:
            raise headgate.Throttled(retry_after_ms=30_000)
        return "sent"

    with app.testing() as t:
        t.store.upsert_rate_class("relay", 10, 1000, adaptive=Adaptive(1, 20, 0.5, 1))
        ref = send.enqueue()
        t.run_all()
        job = t.store.get_job(ref.id)
        assert runs == [0] and job.state is State.SCHEDULED and job.attempt == 0
        assert 29_000 < job.scheduled_at_ms - t.now_ms() <= 30_000
        [rc] = t.store.rate_classes()
        assert rc.limit_per_window == 5
        t.advance(seconds=30)
        t.run_all()
        assert ref.result(timeout=5) == "sent" and runs == [0, 0]
