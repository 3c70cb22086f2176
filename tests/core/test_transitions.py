"""The transition table: the data file, parsed here with `json` alone, must be exactly
the lifecycle written out below and in docs/ARCHITECTURE.md (every row, nothing more),
and `transition()` must agree with it
row for row."""

from __future__ import annotations

import itertools
import json
from collections import Counter
from pathlib import Path
from typing import Any

import pytest

from headgate import InvalidTransition, State
from headgate.core import transitions as tr
from headgate.core.transitions import GUARDS, GuardContext, transition

TABLE = Path(__file__).resolve().parents[2] / "headgate" / "core" / "transitions.json"
DOCS = Path(__file__).resolve().parents[2] / "docs" / "ARCHITECTURE.md"

# The lifecycle, written out literally: (from, on, to, condition). Cancelling from
# pending/scheduled/available/running is one row per source state. A retryable job's
# `backoff_due` condition is "its backoff is due", the same
# store-time test as schedule_due.
LIFECYCLE_TABLE: list[tuple[str, str, str, str]] = [
    ("pending", "operator_promote", "available", ""),
    ("scheduled", "schedule_due", "available", "store time ≥ scheduled_at"),
    ("available", "admitted", "running", "lease written in the same transaction"),
    ("running", "success", "completed", "retention_ms > 0"),
    ("running", "success", "deleted", "retention_ms = 0"),
    ("running", "retry", "retryable", "attempt+1 < max_attempts; backoff delay"),
    ("running", "retry", "archived", "attempt+1 ≥ max_attempts"),
    ("running", "skip", "archived", "explicit: do not retry"),
    ("running", "revoke", "deleted", "explicit: drop entirely"),
    ("running", "snooze", "scheduled", "does NOT consume an attempt"),
    ("running", "rate_limited", "available", "neither counter moves"),
    ("running", "throttled", "scheduled", "does NOT consume an attempt; an adaptive class slows"),
    ("running", "undecodable", "undecodable", "never retried"),
    ("running", "lease_lost", "retryable", "crash_attempt+1 < crash_limit (default 3)"),
    ("running", "lease_lost", "quarantined", "otherwise; fingerprint enters quarantine"),
    ("retryable", "backoff_due", "available", "backoff due (store time ≥ scheduled_at)"),
    ("archived", "operator_retry", "available", ""),
    ("cancelled", "operator_retry", "available", ""),
    # "never retried" is the runtime's word (no automatic
    # retry); once the missing handler or decoder is deployed an operator may run an
    # undecodable job again, as a dead letter.
    ("undecodable", "operator_retry", "available", ""),
    ("quarantined", "operator_release", "available", ""),
    ("pending", "operator_cancel", "cancelled", ""),
    ("scheduled", "operator_cancel", "cancelled", ""),
    ("available", "operator_cancel", "cancelled", ""),
    ("running", "operator_cancel", "cancelled", "running: the worker is told and stops"),
]

# Which named guard expresses each condition.
CONDITION_GUARD = {
    "": "always",
    "store time ≥ scheduled_at": "due",
    "backoff due (store time ≥ scheduled_at)": "due",
    "lease written in the same transaction": "always",
    "retention_ms > 0": "retention_positive",
    "retention_ms = 0": "retention_zero",
    "attempt+1 < max_attempts; backoff delay": "attempts_left",
    "attempt+1 ≥ max_attempts": "attempts_exhausted",
    "explicit: do not retry": "always",
    "explicit: drop entirely": "always",
    "does NOT consume an attempt": "always",
    "neither counter moves": "always",
    "does NOT consume an attempt; an adaptive class slows": "always",
    "never retried": "always",
    "crash_attempt+1 < crash_limit (default 3)": "crash_budget_left",
    "otherwise; fingerprint enters quarantine": "crash_budget_exhausted",
    "running: the worker is told and stops": "always",
}

# A context under which each guard holds, and one under which it does not (None: the
# guard always holds).
HOLDS: dict[str, GuardContext] = {
    "always": GuardContext(),
    "due": GuardContext(now_ms=1_000, scheduled_at_ms=1_000),
    "retention_positive": GuardContext(retention_ms=1),
    "retention_zero": GuardContext(retention_ms=0),
    "attempts_left": GuardContext(attempt=23, max_attempts=25),
    "attempts_exhausted": GuardContext(attempt=24, max_attempts=25),
    "crash_budget_left": GuardContext(crash_attempt=1, crash_limit=3),
    "crash_budget_exhausted": GuardContext(crash_attempt=2, crash_limit=3),
}
FAILS: dict[str, GuardContext | None] = {
    "always": None,
    "due": GuardContext(now_ms=999, scheduled_at_ms=1_000),
    "retention_positive": GuardContext(retention_ms=0),
    "retention_zero": GuardContext(retention_ms=1),
    "attempts_left": GuardContext(attempt=24, max_attempts=25),
    "attempts_exhausted": GuardContext(attempt=23, max_attempts=25),
    "crash_budget_left": GuardContext(crash_attempt=2, crash_limit=3),
    "crash_budget_exhausted": GuardContext(crash_attempt=1, crash_limit=3),
}

OPERATOR_EVENTS = {"operator_promote", "operator_retry", "operator_release", "operator_cancel"}
TERMINAL = {"completed", "archived", "cancelled", "quarantined", "undecodable"}


def load() -> dict[str, Any]:
    return json.loads(TABLE.read_text())


def rows() -> list[dict[str, Any]]:
    return load()["transitions"]


def keyed(row: dict[str, Any]) -> tuple[str, str, str, str]:
    return (row["from"], row["on"], row["to"], row["guard"])


def all_events() -> set[str]:
    return {r["on"] for r in rows()}


# -- the data file is the lifecycle -----------------------------------------------------

def test_every_row_has_exactly_the_expected_fields() -> None:
    for row in rows():
        assert set(row) == {"from", "on", "to", "guard", "effects"}, row
        assert isinstance(row["effects"], list)


def test_table_equals_the_lifecycle_row_for_row() -> None:
    expected = Counter((f, on, to, CONDITION_GUARD[c]) for f, on, to, c in LIFECYCLE_TABLE)
    actual = Counter(keyed(r) for r in rows())
    assert actual - expected == Counter(), "rows in the data file that the lifecycle lacks"
    assert expected - actual == Counter(), "lifecycle rows missing from the data file"
    assert len(rows()) == len(LIFECYCLE_TABLE) == 24


def documented_rows() -> list[tuple[str, str, str]]:
    """(from, on, to) of each row of the table under "## Job lifecycle" in
    docs/ARCHITECTURE.md, in the page's order."""
    section = DOCS.read_text(encoding="utf-8").split("\n## Job lifecycle\n", 1)[1]
    section = section.split("\n## ", 1)[0]
    found = []
    for line in section.splitlines():
        if not line.startswith("|"):
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if cells[0] == "from" or set(cells[0]) <= {"-"}:
            continue  # header and rule
        found.append((cells[0], cells[1], cells[2]))
    return found


def test_the_documented_lifecycle_is_the_data_file_in_order() -> None:
    assert documented_rows() == [(r["from"], r["on"], r["to"]) for r in rows()]


def test_rows_are_unique() -> None:
    assert len({keyed(r) for r in rows()}) == len(rows())


def test_states_in_the_table_are_the_known_states() -> None:
    known_states = {s.value for s in State}
    used = {r["from"] for r in rows()} | {r["to"] for r in rows()}
    assert used <= known_states
    assert "deleted" not in {r["from"] for r in rows()}


def test_every_guard_is_described_and_evaluable() -> None:
    described = load()["guards"]
    assert set(described) == set(GUARDS)
    for row in rows():
        guard = row["guard"]
        assert guard in described and described[guard]
        assert GUARDS[guard](HOLDS[guard]) is True
        failing = FAILS[guard]
        if failing is not None:
            assert GUARDS[guard](failing) is False


def test_rows_sharing_from_and_event_are_mutually_exclusive() -> None:
    by_key: dict[tuple[str, str], list[str]] = {}
    for row in rows():
        by_key.setdefault((row["from"], row["on"]), []).append(row["guard"])
    for key, guards in by_key.items():
        if len(guards) == 1:
            continue
        for ctx in (*HOLDS.values(), *(c for c in FAILS.values() if c is not None)):
            assert sum(GUARDS[g](ctx) for g in guards) <= 1, key
        for g in guards:
            assert sum(GUARDS[h](HOLDS[g]) for h in guards) == 1, key


def test_code_loaded_the_same_table() -> None:
    code_rows = Counter(
        (r.source.value, r.event, r.target.value, r.guard, frozenset(r.effects))
        for r in tr.ROWS
    )
    data_rows = Counter(
        (r["from"], r["on"], r["to"], r["guard"], frozenset(r["effects"])) for r in rows()
    )
    assert code_rows == data_rows


# -- transition() returns each row --------------------------------------------------------

@pytest.mark.parametrize("row", rows(), ids=lambda r: f"{r['from']}-{r['on']}-{r['to']}")
def test_transition_returns_each_row(row: dict[str, Any]) -> None:
    got = transition(row["from"], row["on"], HOLDS[row["guard"]])
    assert (got.source.value, got.event, got.target.value, got.guard) == keyed(row)
    assert set(got.effects) == set(row["effects"])


@pytest.mark.parametrize(
    "row", [r for r in rows() if r["guard"] == "due"], ids=lambda r: f"{r['from']}-{r['on']}"
)
def test_time_guarded_rows_refuse_before_their_time(row: dict[str, Any]) -> None:
    failing = FAILS["due"]
    assert failing is not None
    with pytest.raises(InvalidTransition):
        transition(row["from"], row["on"], failing)


def test_guards_pick_between_rows() -> None:
    assert transition("running", "success", GuardContext(retention_ms=0)).target is State.DELETED
    assert transition("running", "success", GuardContext(retention_ms=5)).target is (
        State.COMPLETED)
    assert transition("running", "retry", GuardContext(attempt=0, max_attempts=1)).target is (
        State.ARCHIVED)
    assert transition("running", "retry", GuardContext(attempt=0, max_attempts=2)).target is (
        State.RETRYABLE)
    assert transition("running", "lease_lost", GuardContext(crash_attempt=0)).target is (
        State.RETRYABLE)
    assert transition("running", "lease_lost", GuardContext(crash_attempt=2)).target is (
        State.QUARANTINED)
    # crash_limit is a parameter, default 3
    assert GuardContext().crash_limit == 3
    assert transition(
        "running", "lease_lost", GuardContext(crash_attempt=2, crash_limit=5)
    ).target is State.RETRYABLE


def test_undefined_pairs_raise_invalid_transition() -> None:
    defined = {(r["from"], r["on"]) for r in rows()}
    stored = [s.value for s in State if s is not State.DELETED]
    undefined = [
        (s, e) for s, e in itertools.product(stored, sorted(all_events())) if (s, e) not in defined
    ]
    assert len(undefined) > 100
    for state, event in undefined:
        for ctx in HOLDS.values():
            with pytest.raises(InvalidTransition):
                transition(state, event, ctx)


def test_unknown_event_raises_invalid_transition() -> None:
    with pytest.raises(InvalidTransition):
        transition("running", "explode")


# -- invariants -------------------------------------------------------------------------

@pytest.mark.parametrize("state", sorted(TERMINAL))
def test_terminal_states_never_auto_transition(state: str) -> None:
    automatic = all_events() - OPERATOR_EVENTS
    assert {"schedule_due", "backoff_due", "admitted", "lease_lost", "success"} <= automatic
    assert not [r for r in rows() if r["from"] == state and r["on"] in automatic]
    for event in automatic:
        for ctx in HOLDS.values():
            with pytest.raises(InvalidTransition):
                transition(state, event, ctx)
    # Only operators move terminal jobs, and only back to available.
    assert {r["to"] for r in rows() if r["from"] == state} <= {"available"}


def test_pending_never_auto_transitions() -> None:
    pending_events = {r["on"] for r in rows() if r["from"] == "pending"}
    assert pending_events == {"operator_promote", "operator_cancel"}
    for event in all_events() - OPERATOR_EVENTS:
        for ctx in HOLDS.values():
            with pytest.raises(InvalidTransition):
                transition("pending", event, ctx)


def test_only_admission_enters_running_and_writes_fence_and_lease() -> None:
    into_running = [r for r in rows() if r["to"] == "running"]
    assert [(r["from"], r["on"]) for r in into_running] == [("available", "admitted")]
    assert set(into_running[0]["effects"]) >= {"fence", "lease"}
    for row in rows():
        if row["on"] != "admitted":
            assert "fence" not in row["effects"], row
            assert "lease" not in row["effects"], row


def test_attempt_moves_only_on_retry_rows() -> None:
    for row in rows():
        assert ("attempt" in row["effects"]) == (row["on"] == "retry"), row


def test_crash_attempt_moves_only_on_lease_lost_rows() -> None:
    for row in rows():
        assert ("crash_attempt" in row["effects"]) == (row["on"] == "lease_lost"), row


def test_quarantine_effect_only_when_entering_quarantined() -> None:
    for row in rows():
        assert ("quarantine" in row["effects"]) == (row["to"] == "quarantined"), row


def test_rate_limited_and_snooze_move_no_counter() -> None:
    for row in rows():
        if row["on"] in ("rate_limited", "snooze"):
            assert not {"attempt", "crash_attempt"} & set(row["effects"]), row
    (rl,) = [r for r in rows() if r["on"] == "rate_limited"]
    assert rl["effects"] == []


def test_only_running_cancel_notifies_the_worker() -> None:
    for row in rows():
        notify = "notify_worker" in row["effects"]
        assert notify == (row["from"] == "running" and row["on"] == "operator_cancel"), row


def test_archived_is_reached_only_by_failure() -> None:
    """archived is the dead-letter queue: only exhausted retries and explicit skips."""
    into = {(r["on"], r["guard"]) for r in rows() if r["to"] == "archived"}
    assert into == {("retry", "attempts_exhausted"), ("skip", "always")}


def test_every_state_is_reachable_and_every_non_terminal_state_can_leave() -> None:
    targets = {r["to"] for r in rows()}
    sources = {r["from"] for r in rows()}
    for state in State:
        if state.value != "pending":
            assert state.value in targets, state  # pending is only entered at enqueue
        if state.value not in TERMINAL and state.value != "deleted":
            assert state.value in sources, state
