"""Core layer (pure): envelope validation at the boundary, the fingerprint computed
independently, and the states and outcomes (docs/ARCHITECTURE.md, Jobs and Job
lifecycle)."""

from __future__ import annotations

import array
import hashlib
import os
import struct
from typing import Any

import pytest

from headgate import Envelope, InvalidInput, Outcome, State, fingerprint
from headgate.core import STORED_STATES, TERMINAL, UNFINISHED, ids

MIB = 1024 * 1024


def valid(**fields: Any) -> Envelope:
    return Envelope(**{"kind": "k", **fields}).validated()


def rejected(**fields: Any) -> str:
    with pytest.raises(InvalidInput) as info:
        Envelope(**{"kind": "k", **fields}).validated()
    return str(info.value)


# -- defaults and normalization -------------------------------------------------------

def test_defaults_are_filled_and_normalized() -> None:
    env = valid(payload=b"x", tags=["b", "a", "b"])
    assert env.id and isinstance(env.id, str)
    assert env.fingerprint == fingerprint("k", b"x")
    assert env.tags == ("a", "b")  # sorted and de-duplicated
    assert (env.queue, env.priority, env.partition_key, env.rate_class) == ("default", 0, "", "")
    assert (env.weight, env.max_attempts, env.schema_version) == (1, 25, 1)
    assert (env.scheduled_at_ms, env.retention_ms, env.pending, env.sticky_worker) == (
        0, None, False, "")


def test_generated_ids_are_unique_and_time_sortable() -> None:
    ids = [valid().id for _ in range(500)]
    assert len(set(ids)) == 500
    assert ids == sorted(ids)  # type: ignore[type-var]


def test_forked_children_mint_ids_their_siblings_do_not() -> None:
    """Isolated handlers run in children forked from one fork server: each must get its
    own id prefixes, or two children enqueueing in the same millisecond collide."""
    minted = []
    for _ in range(2):
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:  # the child: report its first ids, then leave without cleanup
            os.write(write, f"{ids.new_id()} {ids.new_lease_id()}".encode())
            os._exit(0)
        os.close(write)
        os.waitpid(pid, 0)
        minted.append(os.read(read, 200).decode().split())
        os.close(read)
    mine = [ids.new_id(), ids.new_lease_id()]
    job_prefixes = {m[0][12:22] for m in (*minted, mine)}
    lease_prefixes = {m[1][:16] for m in (*minted, mine)}
    assert len(job_prefixes) == 3 and len(lease_prefixes) == 3, (minted, mine)


def test_lease_ids_are_unique_32_hex_digits() -> None:
    leases = {ids.new_lease_id() for _ in range(1000)}
    assert len(leases) == 1000
    assert all(len(lease) == 32 and int(lease, 16) >= 0 for lease in leases)


def test_payload_may_be_empty_and_bytearray_is_accepted() -> None:
    assert valid(payload=b"").payload == b""
    assert valid(payload=bytearray(b"ab")).payload == b"ab"


# -- string limits --------------------------------------------------------------------

@pytest.mark.parametrize(
    ("name", "low", "high"),
    [
        ("kind", 1, 128),
        ("queue", 1, 255),
        ("partition_key", 0, 255),
        ("rate_class", 0, 255),
        ("sticky_worker", 0, 255),
        ("id", 1, 255),
    ],
)
def test_string_length_limits(name: str, low: int, high: int) -> None:
    assert getattr(valid(**{name: "x" * high}), name) == "x" * high
    msg = rejected(**{name: "x" * (high + 1)})
    assert name in msg and str(high) in msg
    if low == 1:
        assert name in rejected(**{name: ""})
    else:
        assert getattr(valid(**{name: ""}), name) == ""
    assert name in rejected(**{name: 7})
    assert "NUL" in rejected(**{name: "a\x00b"})


def test_payload_at_most_one_mib() -> None:
    assert len(valid(payload=b"\0" * MIB).payload) == MIB
    msg = rejected(payload=b"\0" * (MIB + 1))
    assert "payload" in msg and str(MIB) in msg


def test_payload_limit_counts_bytes_of_a_memoryview() -> None:
    """A memoryview of 4-byte items has a quarter as many items as bytes: the limit is
    on the bytes stored."""
    words = array.array("I", [7]) * (MIB // 4)
    assert valid(payload=memoryview(words)).payload == words.tobytes()
    msg = rejected(payload=memoryview(words + array.array("I", [7])))
    assert "payload" in msg and str(MIB) in msg
    assert "payload" in rejected(payload="text is not bytes")


# -- integer limits -------------------------------------------------------------------

@pytest.mark.parametrize(
    ("name", "minimum"),
    [
        ("schema_version", 1),
        ("weight", 1),
        ("max_attempts", 1),
        ("scheduled_at_ms", 0),
        ("retention_ms", 0),
        ("unique_window_ms", 0),
        ("unique_debounce_ms", 0),
    ],
)
def test_integer_minimums_name_field_and_minimum(name: str, minimum: int) -> None:
    assert getattr(valid(**{name: minimum}), name) == minimum
    msg = rejected(**{name: minimum - 1})
    assert name in msg and f">= {minimum}" in msg


def test_explicit_weight_zero_is_rejected() -> None:
    msg = rejected(weight=0)
    assert msg == "weight must be >= 1"


@pytest.mark.parametrize(
    "name",
    ["schema_version", "weight", "max_attempts", "scheduled_at_ms", "retention_ms",
     "priority", "unique_window_ms", "unique_debounce_ms", "unique_replace"],
)
def test_bool_is_not_an_int(name: str) -> None:
    assert rejected(**{name: True}) == f"{name} must be an integer"


@pytest.mark.parametrize("name", ["unique_window_ms", "retention_ms", "scheduled_at_ms"])
def test_durations_are_integer_milliseconds_never_rounded(name: str) -> None:
    assert rejected(**{name: 1.5}) == f"{name} must be an integer"
    assert rejected(**{name: "100"}) == f"{name} must be an integer"


def test_priority_is_any_int32() -> None:
    assert valid(priority=-(2**31)).priority == -(2**31)
    assert valid(priority=2**31 - 1).priority == 2**31 - 1
    assert "priority" in rejected(priority=2**31)


def test_retention_zero_means_delete_on_success_and_is_allowed() -> None:
    assert valid(retention_ms=0).retention_ms == 0


# -- tags -----------------------------------------------------------------------------

def test_tags_sorted_and_deduplicated() -> None:
    assert valid(tags=["z", "a", "m", "a", "z"]).tags == ("a", "m", "z")
    assert valid(tags=()).tags == ()


def test_at_most_32_tags_after_deduplication() -> None:
    tags = [f"t{i:02d}" for i in range(32)]
    assert len(valid(tags=tags).tags) == 32
    assert len(valid(tags=tags + tags).tags) == 32  # duplicates do not count
    assert "32" in rejected(tags=[*tags, "one-more"])


def test_each_tag_is_1_to_64_characters() -> None:
    assert valid(tags=["x" * 64]).tags == ("x" * 64,)
    assert "64" in rejected(tags=["x" * 65])
    assert "tag" in rejected(tags=[""])
    assert "tag" in rejected(tags=[3])


def test_tags_must_be_a_list_not_a_string() -> None:
    assert "tags" in rejected(tags="abc")


# -- uniqueness fields ----------------------------------------------------------------

@pytest.mark.parametrize("bits", range(16))
def test_unique_replace_bits_0_to_15(bits: int) -> None:
    assert valid(unique_key=b"u", unique_replace=bits).unique_replace == bits


def test_unknown_unique_replace_bits_are_rejected() -> None:
    assert "unique_replace" in rejected(unique_key=b"u", unique_replace=16)
    assert "unique_replace" in rejected(unique_key=b"u", unique_replace=-1)


def test_unique_replace_requires_unique_key() -> None:
    msg = rejected(unique_replace=1)
    assert "unique_replace" in msg and "unique_key" in msg
    assert valid(unique_replace=0).unique_key is None


def test_unique_key_must_be_nonempty_bytes() -> None:
    assert "unique_key" in rejected(unique_key="text")
    assert "unique_key" in rejected(unique_key=b"")


def test_booleans_must_be_booleans() -> None:
    assert "unique_exclude_kind" in rejected(unique_exclude_kind=1)
    assert "pending" in rejected(pending="yes")


def test_headers_are_a_map_of_strings() -> None:
    assert valid(headers={"traceparent": "00-abc"}).headers == {"traceparent": "00-abc"}
    assert "headers" in rejected(headers=["a"])
    assert "header" in rejected(headers={"a": 1})


def test_fingerprint_supplied_must_match() -> None:
    good = fingerprint("k", b"p")
    assert valid(payload=b"p", fingerprint=good).fingerprint == good
    assert "fingerprint" in rejected(payload=b"p", fingerprint="0" * 32)


# -- fingerprint ----------------------------------------------------------------------

def independent_fingerprint(kind: str, payload: bytes) -> str:
    k = kind.encode("utf-8")
    blob = struct.pack("<I", len(k)) + k + struct.pack("<I", len(payload)) + payload
    return hashlib.sha256(blob).hexdigest()[:32]


@pytest.mark.parametrize(
    ("kind", "payload"),
    [
        ("email.send", b'{"to": "a@example.com"}'),
        ("k", b""),
        ("ünïcødé.kind", b"\x00\xff" * 300),  # length is of the UTF-8 bytes
        ("x" * 128, b"y" * 70_000),            # length prefix beyond one byte
        ("ab", b"c"),
        ("a", b"bc"),                          # same concatenation, different split
    ],
)
def test_fingerprint_matches_the_formula(kind: str, payload: bytes) -> None:
    fp = fingerprint(kind, payload)
    assert fp == independent_fingerprint(kind, payload)
    assert len(fp) == 32 and fp == fp.lower() and int(fp, 16) >= 0


def test_fingerprint_known_vector() -> None:
    # u32_le(10) ‖ "email.send" ‖ u32_le(5) ‖ "hello", assembled by hand.
    preimage = b"\x0a\x00\x00\x00" b"email.send" b"\x05\x00\x00\x00" b"hello"
    expected = "404edf2a022cbf70e5aefd73b9575280"
    assert hashlib.sha256(preimage).digest()[:16].hex() == expected
    assert fingerprint("email.send", b"hello") == expected
    # u32_le(1) ‖ "a" ‖ u32_le(0)
    assert fingerprint("a", b"") == "9f7059dea53b801cd0608b789f11aa65"


def test_fingerprint_separates_kind_and_payload() -> None:
    assert fingerprint("ab", b"c") != fingerprint("a", b"bc")



# -- states and outcomes --------------------------------------------------------------

def test_states() -> None:
    assert {s.value for s in State} == {
        "pending", "scheduled", "available", "running", "retryable", "completed",
        "archived", "cancelled", "quarantined", "undecodable", "deleted",
    }
    assert {s.value for s in TERMINAL} == {
        "completed", "archived", "cancelled", "quarantined", "undecodable"}
    assert {s.value for s in UNFINISHED} == {
        "pending", "scheduled", "available", "running", "retryable"}
    assert State.DELETED not in STORED_STATES
    assert set(STORED_STATES) == TERMINAL | UNFINISHED
    assert not TERMINAL & UNFINISHED


def test_outcomes() -> None:
    assert {o.value for o in Outcome} == {
        "success", "retry", "skip", "revoke", "snooze", "rate_limited", "throttled",
        "undecodable"}
    assert Outcome("retry") is Outcome.RETRY
