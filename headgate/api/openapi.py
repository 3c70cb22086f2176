"""GET /api/v1/openapi.json: the OpenAPI 3.1 document of this API, written by hand.

Kept true by tests: it must validate, every registered /api/v1 route must be in it
(and nothing else), and a schemathesis run against the live app checks responses
against these schemas. Operations are declared in one table; the conventions every
operation shares (auth, read-only, Idempotency-Key, body and query rejections, store
outages) are added by `_operation` so they cannot be forgotten on one route.
"""

from __future__ import annotations

import copy
from typing import Any

import flask

from .blueprint import bp, json_response

I32 = {"type": "integer", "minimum": -(2**31), "maximum": 2**31 - 1}
I64 = {"type": "integer", "minimum": -(2**63), "maximum": 2**63 - 1}
U32 = {"type": "integer", "minimum": 0, "maximum": 2**32 - 1}
U64 = {"type": "integer", "minimum": 0, "maximum": 2**64 - 1}
STR = {"type": "string"}
BOOL = {"type": "boolean"}
INT = {"type": "integer"}
NUM = {"type": "number"}
B64 = {"type": "string", "contentEncoding": "base64"}
# Durations added to store time: at most 2^62 ms, so the sum stays a 64-bit integer.
DURATION = {"type": "integer", "minimum": 0, "maximum": 2**62}
POSITIVE_U32 = {**U32, "minimum": 1}
# schema_version and max_attempts are 32-bit signed columns on PostgreSQL.
VERSION = {**U32, "minimum": 1, "maximum": 2**31 - 1}
# max_attempts on enqueue and schedule upsert: 0 is "not set", like an absent field.
MAX_ATTEMPTS_IN = {**VERSION, "minimum": 0, "description": "0 (or absent) means 25."}
# No text the API stores may hold NUL (PostgreSQL text cannot).
NO_NUL = "^[^\\u0000]*$"


def text(low: int, high: int, desc: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "string", "minLength": low, "maxLength": high,
                           "pattern": NO_NUL}
    if desc:
        out["description"] = desc
    return out


# Queue, partition, rate class and worker names: at most 255 characters.
NAME = text(1, 255)
NAME_OR_EMPTY = text(0, 255)
QUEUE_IN = {**NAME_OR_EMPTY, "description": "\"\" (or absent) means `default`."}
KIND = text(1, 128, "1..128 characters.")
# Canonical standard base64: padded, and the unused bits of the last group zero (the
# server re-encodes what it decoded and refuses anything that differs).
B64_CANONICAL = ("^(?:[A-Za-z0-9+/]{4})*(?:[A-Za-z0-9+/][AQgw]==|"
                 "[A-Za-z0-9+/]{2}[AEIMQUYcgkosw048]=)?$")
MAX_PAYLOAD_BYTES = 1024 * 1024


def b64(max_bytes: int, min_bytes: int = 0, desc: str | None = None) -> dict[str, Any]:
    """Base64 of `min_bytes..max_bytes` bytes."""
    out: dict[str, Any] = {"type": "string", "contentEncoding": "base64",
                           "pattern": B64_CANONICAL, "maxLength": 4 * -(-max_bytes // 3)}
    if min_bytes:
        out["minLength"] = 4 * -(-min_bytes // 3)
    if desc:
        out["description"] = desc
    return out


PAYLOAD_IN = b64(MAX_PAYLOAD_BYTES, desc="Standard base64 (padded, canonical) of at most "
                 "1 MiB.")
# A schedule spec: `@every:<ms>` (1 ms .. 100 years) or a cron expression. The cron
# branch only states its shape; the field values are checked by the server.
EVERY_SPEC = "^\\s*@every:0*[1-9][0-9]{0,11}\\s*$"
CRON_SPEC = "^\\s*(?:CRON_TZ=\\S+\\s+)?\\S+(?:\\s+\\S+){4,5}\\s*$"


def one_of(*values: str, null: bool = False) -> dict[str, Any]:
    if null:
        return {"type": ["string", "null"], "enum": [*values, None]}
    return {"type": "string", "enum": list(values)}


def nullable(schema: dict[str, Any]) -> dict[str, Any]:
    out = copy.deepcopy(schema)
    t = out.get("type")
    if isinstance(t, str):
        out["type"] = [t, "null"]
    elif "$ref" in out:
        return {"anyOf": [out, {"type": "null"}]}
    return out


def ref(name: str) -> dict[str, str]:
    return {"$ref": f"#/components/schemas/{name}"}


def obj(props: dict[str, Any], required: list[str] | None = None, *,
        extra: bool = True, desc: str | None = None) -> dict[str, Any]:
    out: dict[str, Any] = {"type": "object", "properties": props}
    if required:
        out["required"] = required
    if not extra:
        out["additionalProperties"] = False
    if desc:
        out["description"] = desc
    return out


def arr(items: dict[str, Any]) -> dict[str, Any]:
    return {"type": "array", "items": items}


HEADERS = {"type": "object", "maxProperties": 64,
           "propertyNames": text(1, 255), "additionalProperties": text(0, 4096),
           "description": "At most 64 opaque string headers (e.g. traceparent)."}
STATES = ["pending", "scheduled", "available", "running", "retryable", "completed",
          "archived", "cancelled", "quarantined", "undecodable"]
COUNTS = obj({s: INT for s in STATES}, STATES)

SCHEMAS: dict[str, Any] = {
    "Error": obj({"error": STR}, ["error"], desc=(
        "The error envelope. Structured errors add fields: 409 duplicate "
        "(`existing_id`, `replaced`), 423 (`fingerprint`), 429 (`queue`, `limit`, "
        "`current`, `incoming`), 403 enqueue forbidden (`kind`), 503 circuit "
        "(`retry_after_ms`, `state`).")),
    "DuplicateError": obj({"error": {"const": "duplicate unique key"},
                           "existing_id": STR, "replaced": BOOL},
                          ["error", "existing_id", "replaced"]),
    "QuarantinedError": obj({"error": {"const": "fingerprint is quarantined"},
                             "fingerprint": STR}, ["error", "fingerprint"]),
    "BackpressureError": obj({"error": {"const": "enqueue backpressure"}, "queue": STR,
                              "limit": INT, "current": INT, "incoming": INT},
                             ["error", "queue", "limit", "current", "incoming"]),
    "ForbiddenError": obj({"error": STR, "kind": STR}, ["error"]),
    "UnavailableError": obj({"error": STR, "retry_after_ms": INT,
                             "state": {"enum": ["closed", "open", "half_open"]}},
                            ["error"]),
    "Counts": COUNTS,
    "AttemptError": obj({"attempt": INT, "at_ms": INT, "error": STR, "logs": arr(STR),
                         "worker": nullable(STR), "outcome": STR}),
    "Job": obj({
        "id": STR, "kind": STR, "queue": STR, "state": {"enum": STATES},
        "schema_version": INT, "priority": INT, "attempt": INT, "crash_attempt": INT,
        "orphaned": BOOL, "max_attempts": INT, "partition_key": STR, "rate_class": STR,
        "sticky_worker": STR, "weight": INT, "fingerprint": STR, "enqueued_at_ms": INT,
        "scheduled_at_ms": INT,
        "periodic_origin": nullable(obj({"schedule_id": STR, "tick_ms": nullable(INT)},
                                        ["schedule_id", "tick_ms"])),
        "finalized_at_ms": nullable(INT), "errors": arr(ref("AttemptError")),
        "tags": arr(STR), "attempted_at_ms": nullable(INT), "worker_id": nullable(STR),
        "lease_expires_at_ms": nullable(INT), "fence": INT, "retention_ms": INT,
        "headers": {"type": "object", "additionalProperties": STR},
        "cancel_requested": BOOL,
        "payload": {**B64, "description": "Only with include_payload=true."},
    }, ["id", "kind", "queue", "state", "schema_version", "priority", "attempt",
        "crash_attempt", "orphaned", "max_attempts", "partition_key", "rate_class",
        "sticky_worker", "weight", "fingerprint", "enqueued_at_ms", "scheduled_at_ms",
        "periodic_origin", "finalized_at_ms", "errors", "tags"]),
    "JobList": obj({"jobs": arr(ref("Job")), "next_cursor": nullable(STR),
                    "count_is_approximate": BOOL,
                    "scan_limited": {**BOOL, "description": (
                        "The page stopped at its scan bound before filling: a "
                        "payload search, or a filter with more than its index "
                        "answers (a partition key, priority, tags or a time range, "
                        "alone or within a queue or kind), examines at most 10,000 "
                        "jobs (and 32 MiB of payload) a page; next_cursor "
                        "continues the scan.")}},
                   ["jobs", "next_cursor", "count_is_approximate"]),
    "LatencySummary": obj({
        "count": INT, "mean_ms": nullable(INT), "p50_ms": nullable(INT),
        "p95_ms": nullable(INT), "p99_ms": nullable(INT),
    }, ["count", "mean_ms", "p50_ms", "p95_ms", "p99_ms"], desc=(
        "From the store's latency histograms (5 ms .. 1 h buckets, as /metrics): "
        "percentiles are interpolated inside their bucket; null without observations.")),
    "QueueLatency": obj({
        "queue": STR, "window_ms": INT, "since_ms": INT,
        "wait": ref("LatencySummary"), "run": ref("LatencySummary"),
        "kinds": arr(obj({"kind": STR, "wait": ref("LatencySummary"),
                          "run": ref("LatencySummary")}, ["kind", "wait", "run"])),
    }, ["queue", "window_ms", "since_ms", "wait", "run", "kinds"]),
    "KindLatency": obj({
        "kind": STR, "window_ms": INT, "since_ms": INT,
        "wait": ref("LatencySummary"), "run": ref("LatencySummary"),
        "queues": arr(obj({"queue": STR, "wait": ref("LatencySummary"),
                           "run": ref("LatencySummary")}, ["queue", "wait", "run"])),
    }, ["kind", "window_ms", "since_ms", "wait", "run", "queues"]),
    "RunningJob": obj({
        "id": STR, "kind": STR, "queue": STR, "since_ms": nullable(INT),
        "lease_expires_at_ms": nullable(INT), "orphaned": BOOL,
    }, ["id", "kind", "queue", "since_ms", "lease_expires_at_ms", "orphaned"]),
    "EnqueueRequest": {**obj({
        "kind": KIND,
        "schema_version": nullable(VERSION), "payload": PAYLOAD_IN, "queue": nullable(QUEUE_IN),
        "priority": nullable(I32), "partition_key": nullable(NAME_OR_EMPTY),
        "rate_class": nullable(NAME_OR_EMPTY),
        "weight": nullable({**POSITIVE_U32, "description": "weight must be >= 1."}),
        "scheduled_at_ms": nullable({**I64, "minimum": 0}),
        "unique_key": nullable(b64(1024, 1, "Base64 of 1..1024 bytes.")),
        "unique_window_ms": nullable(DURATION),
        "unique_replace": nullable({**INT, "minimum": 0, "maximum": 15, "description": (
            "A bit set of the states whose holder is replaced; non-zero needs "
            "`unique_key`.")}),
        "unique_debounce_ms": nullable(DURATION), "unique_exclude_kind": BOOL,
        "tags": {**arr(text(1, 64)), "maxItems": 32,
                 "description": "At most 32 distinct tags of 1..64 characters."},
        "pending": BOOL, "sticky_worker": NAME_OR_EMPTY,
        "max_attempts": nullable(MAX_ATTEMPTS_IN), "retention_ms": nullable(DURATION),
        "id": nullable(text(1, 255, "A job id of your own; 409 if it is taken.")),
        "headers": HEADERS,
    }, ["kind", "payload"], desc=(
        "Absent optional fields take the envelope defaults (queue `default`, priority 0, "
        "weight 1, max_attempts 25, store retention); so do `queue: \"\"` and "
        "`max_attempts: 0`, for clients that write every field. Without `unique_key` the "
        "Idempotency-Key is the dedup key. A non-zero `unique_replace` needs "
        "`unique_key`.")),
        # unique_replace other than 0 needs a caller's unique_key (400 otherwise).
        "if": {"required": ["unique_replace"],
               "properties": {"unique_replace": {"type": "integer", "minimum": 1}}},
        "then": {"required": ["unique_key"], "properties": {"unique_key": STR}}},
    "EnqueueResponse": obj({"id": STR, "replayed": {"const": True}}, ["id"]),
    "ActionsRequest": obj({"action": {**one_of("retry", "cancel", "delete", "archive"),
                                      "description": "archive is rejected per id"},
                           "ids": {**arr(STR), "maxItems": 1000}}, ["action", "ids"]),
    "ActionsResult": obj({"succeeded": arr(STR),
                          "failed": arr(obj({"id": STR, "reason": STR}, ["id", "reason"]))},
                         ["succeeded", "failed"]),
    "BulkSelector": {**obj({"queue": nullable(NAME),
                            "state": one_of(*STATES, null=True),
                            "kind": nullable(NAME), "partition_key": nullable(NAME_OR_EMPTY),
                            "older_than_ms": nullable({**I64, "minimum": 0})},
                           desc="At least one field must be set (not null)."),
                     "anyOf": [{"required": [name], "properties": {name: {"not": {
                         "type": "null"}}}} for name in (
                         "queue", "state", "kind", "partition_key", "older_than_ms")]},
    "BulkRequest": obj({"action": one_of("retry", "cancel", "delete"),
                        "selector": ref("BulkSelector"), "dry_run": BOOL},
                       ["action", "selector"]),
    "Operation": obj({
        "id": STR, "status": {"enum": ["queued", "running", "done", "failed"]},
        "affected": INT, "total_estimated": nullable(INT), "dry_run": BOOL,
        "error": nullable(STR), "action": STR, "selector": {"type": "object"},
        "total_capped": BOOL, "created_at_ms": INT, "finished_at_ms": nullable(INT),
    }, ["id", "status", "affected", "total_estimated", "dry_run", "error"]),
    "QuietGroups": obj({
        "arrival_rate": nullable(NUM), "drain_rate": nullable(NUM),
        "time_to_drain_ms": nullable(INT), "oldest_available_ms": nullable(INT),
        "noisy_partitions": INT, "approximate": BOOL,
    }, ["arrival_rate", "drain_rate", "time_to_drain_ms", "oldest_available_ms",
        "noisy_partitions", "approximate"]),
    "Queue": obj({
        "queue": STR, "weight": INT, "unfinished_jobs": INT,
        "max_unfinished_jobs": nullable(INT), "by_state": COUNTS, "arrival_rate": NUM,
        "drain_rate": NUM, "time_to_drain_ms": nullable(INT),
        "oldest_available_ms": nullable(INT), "quiet_groups": ref("QuietGroups"),
        "paused": BOOL, "memory_bytes": nullable(INT), "memory_sampled_at_ms": nullable(INT),
        "count_is_approximate": BOOL,
        "drain_trend": {"enum": ["empty", "paused", "stalled", "steady", "draining",
                                 "growing"]},
    }, ["queue", "weight", "unfinished_jobs", "max_unfinished_jobs", "by_state",
        "arrival_rate", "drain_rate", "time_to_drain_ms", "oldest_available_ms",
        "quiet_groups", "paused", "memory_bytes", "count_is_approximate"]),
    "HistoryBucket": obj({
        "at_ms": INT, "arrived": INT, "completed": INT, "failed": INT, "depth": nullable(INT),
        "admission_rejections": obj({"rate_class": INT, "concurrency_limit": INT,
                                     "quarantine": INT}),
    }, ["at_ms", "arrived", "completed"]),
    "Result": obj({"schema_version": INT, "bytes": B64}, ["schema_version", "bytes"]),
    "Output": obj({"schema_version": INT, "bytes": B64, "fence": INT, "updated_at_ms": INT},
                  ["schema_version", "bytes", "fence", "updated_at_ms"]),
    "Progress": obj({"current": INT, "total": INT, "message": nullable(STR), "fence": INT,
                     "updated_at_ms": INT},
                    ["current", "total", "message", "fence", "updated_at_ms"]),
    "Explanation": obj({
        "admissible": BOOL,
        "blocked_by": {"enum": ["rate_class", "concurrency_limit", "fairness", "quarantine",
                                "schedule", "queue_paused", None]},
        "detail": {"type": "object"}, "estimated_admission_ms": nullable(INT),
        "expected_start": ref("ExpectedStart"),
    }, ["admissible", "blocked_by", "detail", "estimated_admission_ms", "expected_start"]),
    "ExpectedStart": obj({
        "ms": nullable({**INT, "minimum": 0}), "p10_ms": nullable({**INT, "minimum": 0}),
        "p90_ms": nullable({**INT, "minimum": 0}),
        "reason": one_of("queue_paused", "rate_class_paused", "weight_exceeds_burst",
                         "quarantined", "no_live_worker", "no_measurements", "pending",
                         "not_waiting", null=True),
        "bound": one_of("now", "workers", "rate_class", "concurrency_limit", "measured",
                        "schedule", null=True),
    }, ["ms", "p10_ms", "p90_ms", "reason", "bound"], desc=(
        "ms from now, with the 10th-90th percentile range; null with `reason` when "
        "nothing can be known. `bound` names what sets the pace (docs/forecast.md).")),
    "SimulateRequest": obj({
        "rate_class": obj({"name": NAME, "limit": nullable({**INT, "minimum": 1,
                                                            "maximum": 10**9}),
                           "window_ms": nullable({**INT, "minimum": 1, "maximum": 2**62}),
                           "burst": nullable({**INT, "minimum": 1, "maximum": 10**9})},
                          ["name"]),
        "concurrency_limit": obj({"name": NAME, "max_concurrent": {**INT, "minimum": 1,
                                                                   "maximum": 10**9}},
                                 ["name", "max_concurrent"]),
        "queue": obj({"name": NAME, "weight": {**INT, "minimum": 1, "maximum": 2**32 - 1}},
                     ["name", "weight"]),
        "worker_slots": obj({"add": {**INT, "minimum": 1, "maximum": 10**6},
                             "queues": arr(NAME)}, ["add"]),
    }, desc="At least one change; the sections combine. `worker_slots.queues` defaults "
            "to every queue with waiting jobs."),
    "SimulatedQueue": obj({
        "queue": STR, "waiting": INT, "oldest_job_id": nullable(STR),
        "before": obj({"time_to_drain": ref("ExpectedStart"),
                       "oldest_start": ref("ExpectedStart")},
                      ["time_to_drain", "oldest_start"]),
        "after": obj({"time_to_drain": ref("ExpectedStart"),
                      "oldest_start": ref("ExpectedStart")},
                     ["time_to_drain", "oldest_start"]),
    }, ["queue", "waiting", "oldest_job_id", "before", "after"]),
    "Simulation": obj({
        "change": {"type": "object"},
        "queues": arr(ref("SimulatedQueue")),
        "before": obj({"time_to_drain": ref("ExpectedStart")}, ["time_to_drain"]),
        "after": obj({"time_to_drain": ref("ExpectedStart")}, ["time_to_drain"]),
    }, ["change", "queues", "before", "after"]),
    "Schedule": obj({
        "id": STR, "kind": STR, "queue": STR, "spec": STR, "next_run_ms": INT,
        "last_enqueued_ms": nullable(INT), "on_missed": {"enum": ["skip", "run_once",
                                                                  "backfill"]},
        "backfill_limit": INT, "paused": BOOL, "partition_key": STR, "rate_class": STR,
        "priority": INT, "max_attempts": INT, "retention_ms": INT,
        "payload": {**B64, "description": "Only with include_payload=true."},
    }, ["id", "kind", "queue", "spec", "next_run_ms", "last_enqueued_ms", "on_missed",
        "backfill_limit", "paused", "partition_key", "rate_class", "priority",
        "max_attempts", "retention_ms"]),
    "ScheduleRequest": obj({
        "kind": KIND, "spec": {**STR, "anyOf": [{"pattern": EVERY_SPEC},
                                                {"pattern": CRON_SPEC}],
                               "description": (
            "`@every:<ms>` (1 ms .. 100 years) or a 5/6-field cron, optionally prefixed "
            "`CRON_TZ=<zone>`. The server also checks each cron field's values and "
            "names, that the zone exists and that the expression ever fires.")},
        "payload": nullable(PAYLOAD_IN), "queue": nullable(QUEUE_IN),
        "partition_key": nullable(NAME_OR_EMPTY), "rate_class": nullable(NAME_OR_EMPTY),
        "priority": nullable(I32),
        "max_attempts": nullable(MAX_ATTEMPTS_IN), "retention_ms": nullable(DURATION),
        "on_missed": one_of("skip", "run_once", "backfill", null=True),
        "backfill_limit": nullable({**INT, "minimum": 0, "maximum": 1000}), "paused": BOOL,
    }, ["kind", "spec"]),
    "ScheduleEvents": obj({
        "events": arr(obj({
            "event_id": INT, "schedule_id": STR, "tick_ms": INT, "job_id": nullable(STR),
            "outcome": {"enum": ["enqueued", "deduplicated", "failed", "skipped"]},
            "reason": nullable(STR), "recorded_at_ms": INT,
        }, ["event_id", "schedule_id", "tick_ms", "job_id", "outcome", "reason",
            "recorded_at_ms"])),
        "next_cursor": nullable(INT),
    }, ["events", "next_cursor"]),
    "RunResponse": obj({"id": STR, "replayed": {"const": True}}, ["id"]),
    "Worker": obj({
        "worker_id": STR, "host": STR, "pid": INT, "queues": arr(STR), "concurrency": INT,
        "started_at_ms": INT, "heartbeat_at_ms": INT, "inflight": INT, "polls": INT,
        "empty_polls": INT, "utilization": NUM, "empty_poll_ratio": NUM,
        "status": nullable(STR), "pending_signal": nullable(STR),
        "running": {**arr(ref("RunningJob")), "description": (
            "The jobs it holds leases on now, longest-running first.")},
        "agent": {**nullable(STR), "description": (
            "What a worker on the worker protocol registered as; null for a Python "
            "worker.")},
        "kinds": {**nullable(arr(STR)), "description": (
            "The kinds a worker on the worker protocol handles ([]: every kind).")},
    }, ["worker_id", "host", "pid", "queues", "concurrency", "started_at_ms",
        "heartbeat_at_ms", "inflight", "polls", "empty_polls", "utilization",
        "empty_poll_ratio"]),
    "Cluster": obj({
        "workers": obj({"live": INT, "stale": INT, "total": INT}, ["live", "stale", "total"]),
        "capacity_total": INT, "inflight_total": INT, "utilization": NUM,
        "empty_poll_ratio": NUM, "polls_total": INT, "empty_polls_total": INT,
        "queues": arr(obj({"queue": STR, "live_workers": INT}, ["queue", "live_workers"])),
    }, ["workers", "capacity_total", "inflight_total", "utilization", "empty_poll_ratio",
        "polls_total", "empty_polls_total", "queues"]),
    "SignalRequest": obj({"command": {
        **one_of("quiet", "resume", "restart", "terminate", "resign", null=True),
        "description": "null clears"}}),
    # -- the worker protocol
    "WorkerRegistration": obj({
        "queues": {**arr({"type": "string", "minLength": 1, "maxLength": 255}),
                   "minItems": 1, "description": "The queues it serves."},
        "capacity": {**U32, "minimum": 1, "maximum": 1000,
                     "description": "The most jobs it holds at once."},
        "agent": {"type": "string", "maxLength": 255, "description": (
            "Its language and library, e.g. `node/20 my-worker/1`.")},
        "kinds": {**arr({"type": "string", "minLength": 1, "maxLength": 128}),
                  "description": "The kinds it handles (absent or []: every kind). A "
                  "claimed job of another kind is recorded undecodable."},
        "worker_id": {"type": ["string", "null"], "minLength": 1, "maxLength": 255,
                      "description": "Absent: the server makes one."},
        "host": {"type": ["string", "null"], "maxLength": 255},
        "pid": nullable({**U32, "maximum": 2**31 - 1}),
    }, ["queues", "capacity"]),
    "WorkerSession": obj({
        "worker_id": STR, "queues": arr(STR), "kinds": arr(STR), "capacity": INT,
        "agent": STR, "lease_ms": INT, "heartbeat_ms": INT, "max_wait_ms": INT,
    }, ["worker_id", "queues", "kinds", "capacity", "agent", "lease_ms", "heartbeat_ms",
        "max_wait_ms"]),
    "HeartbeatRequest": obj({"running": {**arr(obj(
        {"job_id": STR, "fence": {**U64, "maximum": 2**63 - 1}}, ["job_id", "fence"])),
        "description": "The jobs it runs now, to learn which were cancelled."}}),
    "HeartbeatReply": obj({
        "signal": {**one_of("quiet", "resume", "restart", "terminate", "resign", null=True),
                   "description": "An operator's signal, delivered once."},
        "status": STR, "inflight": INT, "heartbeat_ms": INT,
        "cancelled": {**arr(obj({"job_id": STR, "fence": INT}, ["job_id", "fence"])),
                      "description": "Jobs it runs that are no longer its to run: stop "
                                     "them; their acks would be refused."},
    }, ["signal", "status", "inflight", "cancelled", "heartbeat_ms"]),
    "ClaimRequest": obj({
        "max": {**U32, "minimum": 1, "description": "At most this many (absent: every free "
                "slot); more than its free capacity is a 409."},
        "wait_ms": {**U32, "maximum": 30_000, "description": "Long poll: wait this long "
                    "for a job (default 0)."},
        "lease_ms": {**U32, "minimum": 1, "maximum": 86_400_000,
                     "description": "The leases' length (default: the server's)."},
    }),
    "ClaimedJob": obj({
        "id": STR, "kind": STR, "queue": STR, "payload": B64, "schema_version": INT,
        "attempt": INT, "crash_attempt": INT, "max_attempts": INT, "priority": INT,
        "partition_key": STR, "rate_class": STR, "weight": INT, "tags": arr(STR),
        "headers": {"type": "object", "additionalProperties": STR},
        "enqueued_at_ms": INT, "lease_id": STR, "fence": INT, "lease_expires_at_ms": INT,
    }, ["id", "kind", "queue", "payload", "schema_version", "attempt", "max_attempts",
        "lease_id", "fence", "lease_expires_at_ms"]),
    "ClaimReply": obj({"jobs": arr(ref("ClaimedJob")), "status": STR}, ["jobs", "status"]),
    "WorkerConflictError": obj({"error": STR, "capacity": INT, "held": INT, "free": INT,
                                "fence": INT, "state": STR}, ["error"], desc=(
        "409 on the worker protocol: past capacity (`capacity`, `held`, `free`), a stale "
        "fence (`fence`: the job's), a job it does not hold (`state`), a deregistered "
        "worker, a claim already waiting.")),
    "ExtendRequest": obj({"lease_id": STR, "fence": {**U64, "maximum": 2**63 - 1},
                          "lease_ms": {**U32, "minimum": 1, "maximum": 86_400_000}},
                         ["lease_id", "fence"]),
    "ExtendReply": obj({"lease_expires_at_ms": INT}, ["lease_expires_at_ms"]),
    "CompleteRequest": obj({
        "lease_id": STR, "fence": {**U64, "maximum": 2**63 - 1},
        "result": nullable(B64),
        "result_schema_version": VERSION,
        "output": nullable(B64),
        "output_schema_version": VERSION,
    }, ["lease_id", "fence"]),
    "FailRequest": obj({
        "lease_id": STR, "fence": {**U64, "maximum": 2**63 - 1},
        "error": {"type": "string", "minLength": 1, "maxLength": 65_536},
        "outcome": {**one_of("retry", "skip", "rate_limited", "throttled", "undecodable"),
                    "description": "retry (default): again after retry_in_ms or the "
                    "backoff while attempts last; skip: archived; rate_limited: back "
                    "without spending an attempt, its rate class emptied for "
                    "retry_in_ms (the throttle hint); throttled: again after "
                    "retry_in_ms (default its rate class's window) without spending an "
                    "attempt, an adaptive class's limit cut; undecodable."},
        "retry_in_ms": {**DURATION, "maximum": 31_536_000_000},
        "logs": arr(STR),
    }, ["lease_id", "fence", "error"]),
    "FailReply": obj({"outcome": STR}, ["outcome"]),
    "SnoozeRequest": obj({"lease_id": STR, "fence": {**U64, "maximum": 2**63 - 1},
                          "delay_ms": {**DURATION, "maximum": 31_536_000_000}},
                         ["lease_id", "fence", "delay_ms"]),
    "ProgressRequest": obj({"lease_id": STR, "fence": {**U64, "maximum": 2**63 - 1},
                            "current": {**U64, "maximum": 2**63 - 1},
                            "total": {**U64, "maximum": 2**63 - 1},
                            "message": {"type": ["string", "null"], "maxLength": 512}},
                           ["lease_id", "fence", "current", "total"]),
    "DeregisterReply": obj({"worker_id": STR, "released": INT}, ["worker_id", "released"]),
    "RateClass": obj({
        "name": STR, "tokens_available": NUM, "burst": INT, "limit_per_window": INT,
        "window_ms": INT, "jobs_waiting": INT, "paused": BOOL, "refill_in_ms": nullable(INT),
        "adaptive": nullable(ref("RateClassAdaptive")),
    }, ["name", "tokens_available", "burst", "limit_per_window", "window_ms", "jobs_waiting",
        "paused"], desc="For an adaptive class `limit_per_window` and `burst` are the "
                        "adapted values admission uses now."),
    "RateClassAdaptive": obj({
        "min": INT, "max": INT, "decrease_factor": NUM, "increase_step": INT,
        "configured_limit": INT, "configured_burst": INT,
        "last_decrease_ms": nullable(INT), "last_increase_ms": nullable(INT),
        "throttles_since_decrease": INT, "summary": STR,
    }, ["min", "max", "decrease_factor", "increase_step", "configured_limit",
        "configured_burst", "last_decrease_ms", "last_increase_ms",
        "throttles_since_decrease", "summary"]),
    "AdaptiveRequest": obj({
        "min": {**I64, "minimum": 1}, "max": {**I64, "minimum": 1},
        "decrease_factor": {**NUM, "exclusiveMinimum": 0, "exclusiveMaximum": 1},
        "increase_step": {**I64, "minimum": 0},
    }, ["min", "max", "decrease_factor", "increase_step"], desc=(
        "AIMD: a throttle cuts the limit to max(min, limit x decrease_factor), at most "
        "once per window fleet-wide; each window with successes adds increase_step, up "
        "to max. 400 when min > max, decrease_factor is not in (0, 1), increase_step < 0 "
        "or limit is outside min..max.")),
    "RateClassChange": obj({"at_ms": INT, "limit_per_window": INT, "window_ms": INT,
                            "change": one_of("set", "decrease", "increase"),
                            "throttles": INT},
                           ["at_ms", "limit_per_window", "window_ms", "change", "throttles"]),
    "RateClassRequest": obj({"limit": {**I64, "minimum": 1},
                             "window_ms": {**I64, "minimum": 1},
                             "burst": nullable({**I64, "minimum": 1,
                                                "description": "default max(limit, 1)"}),
                             "paused": BOOL,
                             "adaptive": nullable(ref("AdaptiveRequest"))},
                            ["limit", "window_ms"]),
    "ConcurrencyLimit": obj({"name": STR, "queue": STR, "max_concurrent": INT,
                             "on_saturated": STR},
                            ["name", "queue", "max_concurrent", "on_saturated"]),
    "ConcurrencyLimitRequest": obj({
        "queue": NAME,
        "max_concurrent": {**U64, "minimum": 1, "maximum": 2**63 - 1},
        "on_saturated": one_of("queue", "discard", "cancel_incoming", "cancel_running"),
    }, ["queue", "max_concurrent", "on_saturated"]),
    "Partition": obj({"partition_key": STR, "deficit": INT, "waiting": INT, "running": INT},
                     ["partition_key", "deficit", "waiting"]),
    "QuarantineEntry": obj({"fingerprint": STR, "kind": STR, "crash_count": INT,
                            "quarantined_at_ms": INT, "reason": STR},
                           ["fingerprint", "kind", "crash_count", "quarantined_at_ms",
                            "reason"]),
    "Meta": obj({
        "version": STR, "backend": STR, "capabilities": arr(STR),
        "limits": obj({"max_page_size": INT, "approximate_count_threshold": INT},
                      ["max_page_size", "approximate_count_threshold"]),
        "read_only": BOOL,
    }, ["version", "backend", "capabilities", "limits"]),
    "SystemInfo": obj({
        "version": STR, "backend": STR, "schema_version": INT, "os": STR, "arch": STR,
        "python_version": STR, "pid": INT, "started_at_ms": INT, "uptime_secs": INT,
        "read_only": BOOL,
        "storage": obj({"engine": STR, "path": nullable(STR), "size_bytes": nullable(INT)}),
        "jobs": obj({"total": INT, "active": INT, "by_state": COUNTS},
                    ["total", "active", "by_state"]),
    }, ["version", "backend", "uptime_secs", "jobs"]),
    "PruneRequest": obj({"older_than_ms": {**I64, "minimum": 0}, "dry_run": BOOL},
                        ["older_than_ms"]),
    "SystemStorage": obj({
        "engine": STR, "path": nullable(STR), "size_bytes": nullable(INT),
        "uniques": obj({
            "rows": INT, "expired": INT,
            "orphans": obj({"pruned": INT, "passes": INT, "pass_at_ms": nullable(I64)},
                           ["pruned", "passes", "pass_at_ms"]),
        }, ["rows", "expired", "orphans"]),
        "buckets": obj({
            "retention_ms": I64,
            **{table: obj({"rows": INT, "expired": INT, "oldest_bucket_ms": nullable(I64)},
                          ["rows", "expired", "oldest_bucket_ms"])
               for table in ("history", "latency")},
        }, ["retention_ms", "history", "latency"]),
        "horizon": obj({
            "engine": STR, "wal_bytes": nullable(I64), "wal_limit_bytes": nullable(I64),
            "oldest_transaction_ms": nullable(I64),
            "transactions_seen": nullable({"type": "string", "enum": ["process", "database"]}),
            "xmin_age": nullable(I64),
        }, ["engine", "wal_bytes", "wal_limit_bytes", "oldest_transaction_ms",
            "transactions_seen", "xmin_age"]),
    }, ["engine", "path", "size_bytes", "uniques", "buckets", "horizon"], desc=(
        "Unique keys: all kept rows, window keys past their window, and the sweep for "
        "lifecycle keys whose job was deleted (keys pruned, passes finished, when the "
        "last pass ended). History and latency buckets: kept, older than the horizon "
        "(HG_HISTORY_RETENTION_MS), the oldest. The retention duty prunes all of them "
        "in bounded batches. `horizon`: what holds cleanup back, as /metrics reports it "
        "(the WAL file on SQLite; the oldest open transaction, of this process's "
        "connections on SQLite and of any session on PostgreSQL; transactions since the "
        "oldest held snapshot on PostgreSQL); null where the engine cannot know.")),
    "PruneResult": obj({
        "dry_run": BOOL, "older_than_ms": INT, "cutoff_ms": INT,
        "counts": {"type": "object", "additionalProperties": INT}, "total": INT,
        "deleted": INT,
    }, ["dry_run", "total", "deleted"]),
    "QueueWeightRequest": obj({"weight": POSITIVE_U32},
                              ["weight"]),
    "EnqueueLimitRequest": obj({"max_unfinished_jobs": {
        **U64, "maximum": 2**63 - 1, "description": "0 closes intake (kill switch)."}},
        ["max_unfinished_jobs"]),
    "SampleMemoryRequest": obj({"limit": nullable({**U32, "description": "default 100"})}),
    "SampleMemoryResult": obj({"sampled_queues": INT}, ["sampled_queues"]),
    "OperationAccepted": obj({"operation_id": STR}, ["operation_id"]),
    "RescheduleRequest": obj({"scheduled_at_ms": {**I64, "minimum": 0}},
                             ["scheduled_at_ms"]),
    "PayloadRequest": obj({"payload": PAYLOAD_IN, "schema_version": nullable(VERSION)},
                          ["payload"]),
    "AuditEntry": obj({
        "id": INT, "at_ms": I64,
        "actor": {**STR, "description": "The token's name (the tokens file's `name=`, "
                  "else `token:` and 6 hex digits of its SHA-256); `local` without "
                  "tokens (`anonymous` with HG_API_ALLOW_REMOTE=1)."},
        "action": {**STR, "description": "e.g. job.retry, jobs.cancel (a selection), "
                   "bulk.cancel, rate_class.create|edit|pause|resume|delete, "
                   "queue.pause|resume, concurrency_limit.edit, quarantine.release."},
        "target": {**STR, "description": "job:<id>, jobs, rate_class:<name>, "
                   "queue:<name>, concurrency_limit:<name>, schedule:<id>, "
                   "fingerprint:<fp>, worker:<id>, queues."},
        "status": INT, "outcome": one_of("ok", "partial", "failed"),
        "detail": {"type": "object", "description": "What was changed: a bulk "
                   "operation's selector, operation_id and total_estimated; a setting's "
                   "new values and `before`; a selection's ids and counts."},
    }, ["id", "at_ms", "actor", "action", "target", "status", "outcome", "detail"]),
    "AuditPage": obj({"entries": arr(ref("AuditEntry")), "next_cursor": nullable(INT)},
                     ["entries", "next_cursor"]),
}


def _json(schema: dict[str, Any]) -> dict[str, Any]:
    return {"application/json": {"schema": schema}}


def _resp(desc: str, schema: dict[str, Any] | None = None,
          media: str = "application/json", headers: dict[str, Any] | None = None
          ) -> dict[str, Any]:
    out: dict[str, Any] = {"description": desc}
    if schema is not None:
        out["content"] = {media: {"schema": schema}}
    if headers:
        out["headers"] = headers
    return out


def _err(desc: str, schema: str = "Error") -> dict[str, Any]:
    return _resp(desc, ref(schema))


def _path_param(name: str, desc: str, schema: dict[str, Any] | None = None
                ) -> dict[str, Any]:
    return {"name": name, "in": "path", "required": True, "description": desc,
            "schema": schema or NAME}


def _query_param(name: str, schema: dict[str, Any], desc: str,
                 required: bool = False) -> dict[str, Any]:
    return {"name": name, "in": "query", "required": required, "description": desc,
            "schema": schema}


IDEMPOTENCY_KEY = {
    "name": "Idempotency-Key", "in": "header", "required": True,
    "description": "Required on every POST/PUT/DELETE. The first successful response "
                   "is stored and replayed (with `Idempotent-Replayed: true`) for 24 h to "
                   "the same caller's same method and path.",
    "schema": {"type": "string", "minLength": 1, "maxLength": 255},
}


def _operation(method: str, op_id: str, summary: str, tag: str, *,
               params: list[dict[str, Any]] | None = None, body: str | None = None,
               ok: dict[str, Any], errors: dict[str, dict[str, Any]] | None = None,
               store: bool = True, auth: bool = True, description: str | None = None,
               read: bool = False) -> dict[str, Any]:
    """`read`: a POST that changes nothing (blueprint.READ_POSTS): no Idempotency-Key,
    allowed read-only."""
    params = list(params or [])
    responses: dict[str, Any] = dict(ok)
    mutating = method in ("post", "put", "delete") and not read
    if mutating:
        params.append(IDEMPOTENCY_KEY)
        responses["400"] = _err("Missing Idempotency-Key, or a rejected argument.")
        responses["403"] = _err("read-only mode (or a read-only token).", "ForbiddenError")
        responses["409"] = _err("A conflict with the current state, or the same "
                                "Idempotency-Key still in progress.")
        responses["422"] = _err("The Idempotency-Key was used for a different request, or "
                                "the body does not fit the schema.")
    if any(p["in"] == "query" for p in params):
        responses.setdefault("400", _err("`missing query parameter` / `invalid query "
                                         "parameter` / `invalid query string`."))
    if any(p["in"] == "path" for p in params):
        responses.setdefault("404", _err("No such resource (or an unroutable path)."))
        responses.setdefault("400", _err("A rejected argument."))
    if body is not None:
        responses["413"] = _err("Body larger than the server accepts.")
        responses["415"] = _err("expected Content-Type: application/json")
        responses.setdefault("400", _err("bad json, or a rejected argument."))
        responses.setdefault("422", _err("`missing field` / `invalid request body`."))
    if auth:
        responses["401"] = _err("Tokens are configured and none (or a wrong one) was sent.")
        responses["429"] = _err("Too many failed token attempts from this address "
                                "(Retry-After).")
    if store:
        responses.setdefault("503", _err("Store unavailable (Retry-After).",
                                         "UnavailableError"))
    for status, value in (errors or {}).items():
        responses[status] = value
    op: dict[str, Any] = {"operationId": op_id, "summary": summary, "tags": [tag],
                          "responses": dict(sorted(responses.items()))}
    if description:
        op["description"] = description
    if params:
        op["parameters"] = params
    if body is not None:
        op["requestBody"] = {"required": True, "content": _json(ref(body))}
    if not auth:
        op["security"] = []
    return op


Q = "queue name"
JOB_ID = _path_param("job_id", "job id")
QUEUE = _path_param("queue", Q)
# PUT names a rate class or a concurrency limit by one rule; DELETE takes any stored
# name (one saved before the rule still goes).
POLICY_NAME = {"type": "string", "pattern": "^[A-Za-z0-9][A-Za-z0-9._:/@+-]{0,127}$",
               "description": "1-128 characters from letters, digits and `. _ - : / @ +`, "
                              "starting with a letter or digit."}
LIMIT_200 = _query_param("limit", {**U32, "minimum": 1, "maximum": 200}, "1..200, default 50")
EMPTY_200 = {"200": _resp("Done (empty body).")}
NO_CONTENT = {"204": _resp("Done.")}
INCLUDE_PAYLOAD = _query_param("include_payload", BOOL, "`true` to include the payload "
                               "(base64). Exactly `true` or `false`.")


def _paths() -> dict[str, dict[str, Any]]:
    p: dict[str, dict[str, Any]] = {}

    def add(path: str, method: str, op: dict[str, Any]) -> None:
        p.setdefault(path, {})[method] = op

    add("/healthz", "get", _operation(
        "get", "healthz", "Liveness (never touches the store)", "system", store=False,
        auth=False, ok={"200": _resp("ok", {"type": "string"}, "text/plain")}))
    add("/readyz", "get", _operation(
        "get", "readyz", "Readiness: one index lookup", "system",
        ok={"200": _resp("ready", {"type": "string"}, "text/plain")}))
    add("/meta", "get", _operation("get", "getMeta", "Version, backend, capabilities, "
                                   "limits", "system", ok={"200": _resp("Meta", ref("Meta"))}))
    add("/openapi.json", "get", _operation(
        "get", "getOpenapi", "This document", "system", store=False,
        ok={"200": _resp("OpenAPI 3.1", {"type": "object"})}))
    add("/system/info", "get", _operation(
        "get", "getSystemInfo", "Version, backend, uptime, storage, job counts", "system",
        ok={"200": _resp("System info", ref("SystemInfo"))}))
    add("/system/storage", "get", _operation(
        "get", "getSystemStorage", "Storage size and unique keys kept/expired", "system",
        ok={"200": _resp("System storage", ref("SystemStorage"))}))
    add("/system/prune", "post", _operation(
        "post", "pruneJobs", "Delete (or count) old terminal jobs", "system",
        body="PruneRequest", ok={"200": _resp("Prune result", ref("PruneResult"))}))

    # -- queues
    add("/queues", "get", _operation(
        "get", "listQueues", "Queues with counters, rates and settings", "queues",
        ok={"200": _resp("Queues", arr(ref("Queue")))}))
    add("/queues/{queue}", "put", _operation(
        "put", "putQueue", "Set a queue's weight", "queues", params=[QUEUE],
        body="QueueWeightRequest", ok=EMPTY_200))
    add("/queues/{queue}", "delete", _operation(
        "delete", "deleteQueue", "Delete a queue", "queues",
        params=[QUEUE, _query_param("force", BOOL, "Delete its jobs too (async).")],
        ok={"202": _resp("Deleting its jobs first", ref("OperationAccepted")),
            "204": _resp("Deleted (it was empty).")},
        description="An empty queue is deleted at once (204). A non-empty one is "
                    "refused with 409 unless `force=true`, which pauses it, closes its "
                    "intake and starts an operation that deletes its jobs, then the "
                    "queue (202)."))
    add("/queues/actions/sample-memory", "post", _operation(
        "post", "sampleQueueMemory", "Estimate queue memory from bounded samples", "queues",
        body="SampleMemoryRequest", ok={"200": _resp("Sampled", ref("SampleMemoryResult"))}))
    add("/queues/{queue}/enqueue-limit", "put", _operation(
        "put", "putEnqueueLimit", "Set max unfinished jobs (backpressure)", "queues",
        params=[QUEUE], body="EnqueueLimitRequest", ok=EMPTY_200))
    add("/queues/{queue}/enqueue-limit", "delete", _operation(
        "delete", "deleteEnqueueLimit", "Remove the enqueue limit", "queues",
        params=[QUEUE], ok=NO_CONTENT))
    add("/queues/{queue}/pause", "post", _operation(
        "post", "pauseQueue", "Pause admission from a queue", "queues", params=[QUEUE],
        ok=NO_CONTENT))
    add("/queues/{queue}/resume", "post", _operation(
        "post", "resumeQueue", "Resume a queue", "queues", params=[QUEUE], ok=NO_CONTENT))
    add("/queues/{queue}/history", "get", _operation(
        "get", "queueHistory", "Per-bucket arrivals, completions, failures, rejections",
        "queues", params=[QUEUE, _query_param("since_ms", I64, "default 0"),
                          _query_param("bucket_ms", {**I64, "minimum": 60_000},
                                       "default 60000; >= 60000")],
        ok={"200": _resp("Buckets", arr(ref("HistoryBucket")))}))
    window = _query_param("window_ms", {**I64, "minimum": 60_000, "maximum": 86_400_000},
                          "default 3600000 (an hour); 60000..86400000")
    add("/queues/{queue}/latency", "get", _operation(
        "get", "queueLatency", "Wait and run time percentiles, in all and per kind",
        "queues", params=[QUEUE, window],
        ok={"200": _resp("Percentiles", ref("QueueLatency"))}))
    add("/kinds/{kind}/latency", "get", _operation(
        "get", "kindLatency", "A kind's wait and run time percentiles, in all and per "
        "queue", "jobs", params=[_path_param("kind", "job kind", KIND), window],
        ok={"200": _resp("Percentiles", ref("KindLatency"))}))

    # -- jobs
    add("/jobs", "get", _operation(
        "get", "listJobs", "Jobs, newest first, keyset-paginated", "jobs",
        params=[
            _query_param("q", STR, "Search: space-separated `field:value` terms (id, "
                         "queue, state, kind, partition, rate_class, fingerprint, tag, "
                         "tag_any, priority, error: the start of the last error's first "
                         "line, as written; payload: text in the decoded payload, any "
                         "case; payload.a.b: the JSON value at a.b), ANDed; a bare term "
                         "is a kind prefix. Payload terms examine at most 10,000 jobs "
                         "(32 MiB) a page: see scan_limited."),
            _query_param("queue", STR, Q), _query_param("state", one_of(*STATES), "job state"),
            _query_param("kind", STR, "kind"), _query_param("partition_key", STR, "partition"),
            _query_param("cursor", {**STR, "pattern": "^[A-Za-z0-9_-]{1,1400}={0,2}$"},
                         "next_cursor of the previous page (anything else is a 400)"),
            LIMIT_200,
            _query_param("tags_all", STR, "comma-separated: jobs with all of these tags "
                         "(at most 100)"),
            _query_param("tags_any", STR, "comma-separated: jobs with any of these tags "
                         "(at most 100)"),
            INCLUDE_PAYLOAD,
            *(_query_param(name, I64, desc) for name, desc in (
                ("enqueued_after_ms", "enqueued at or after (epoch ms)"),
                ("enqueued_before_ms", "enqueued before (epoch ms)"),
                ("finished_after_ms", "finished at or after (epoch ms); unfinished jobs "
                 "do not match"),
                ("finished_before_ms", "finished before (epoch ms); unfinished jobs do "
                 "not match"))),
        ],
        ok={"200": _resp("A page of jobs", ref("JobList"))}))
    add("/jobs", "post", _operation(
        "post", "enqueue", "Enqueue a job", "jobs", body="EnqueueRequest",
        ok={"201": _resp("Enqueued (or, for a replayed Idempotency-Key, the original "
                         "job with `replayed: true`)", ref("EnqueueResponse"))},
        errors={
            "403": _err("read-only mode, or enqueue forbidden for this kind.",
                        "ForbiddenError"),
            "409": _resp("Duplicate unique key (`existing_id`, `replaced`), id conflict, "
                         "or the Idempotency-Key still in progress.",
                         {"anyOf": [ref("DuplicateError"), ref("Error")]}),
            "423": _err("The payload's fingerprint is quarantined.", "QuarantinedError"),
            "429": _resp("Queue backpressure, or too many failed token attempts from "
                         "this address (Retry-After).",
                         {"anyOf": [ref("BackpressureError"), ref("Error")]}),
            "503": _err("Store unavailable, or the enqueue circuit is open.",
                        "UnavailableError"),
        }))
    add("/jobs/counts", "get", _operation(
        "get", "jobCounts", "Counts by state from maintained counters", "jobs",
        params=[_query_param("queue", STR, Q)],
        ok={"200": _resp("Counts", obj({"counts": COUNTS, "approximate": BOOL},
                                       ["counts", "approximate"]))}))
    add("/jobs/actions", "post", _operation(
        "post", "jobActions", "retry / cancel / delete up to 1000 jobs by id", "jobs",
        body="ActionsRequest", ok={"200": _resp("Per-id outcome", ref("ActionsResult"))}))
    add("/jobs/bulk", "post", _operation(
        "post", "bulkJobs", "Filter-based bulk action (async operation, or dry-run count)",
        "jobs", body="BulkRequest", ok={"202": _resp("The operation", ref("Operation"))}))
    add("/jobs/{job_id}", "get", _operation(
        "get", "getJob", "One job", "jobs", params=[JOB_ID, INCLUDE_PAYLOAD],
        ok={"200": _resp("The job", ref("Job"))}))
    add("/jobs/{job_id}", "delete", _operation(
        "delete", "deleteJob", "Delete a job", "jobs", params=[JOB_ID], ok=NO_CONTENT))
    add("/jobs/{job_id}/result", "get", _operation(
        "get", "getJobResult", "The recorded result", "jobs", params=[JOB_ID],
        ok={"200": _resp("Result", ref("Result"))}))
    add("/jobs/{job_id}/output", "get", _operation(
        "get", "getJobOutput", "The latest mid-run output", "jobs", params=[JOB_ID],
        ok={"200": _resp("Output", ref("Output"))}))
    add("/jobs/{job_id}/progress", "get", _operation(
        "get", "getJobProgress", "The latest progress", "jobs", params=[JOB_ID],
        ok={"200": _resp("Progress", ref("Progress"))}))
    for action, summary in (("retry", "Retry (archived, cancelled or undecodable)"),
                            ("cancel", "Cancel (pending/scheduled/available/running)"),
                            ("promote", "Promote a pending job")):
        add(f"/jobs/{{job_id}}/{action}", "post", _operation(
            "post", f"{action}Job", summary, "jobs", params=[JOB_ID], ok=NO_CONTENT))
    add("/jobs/{job_id}/reschedule", "post", _operation(
        "post", "rescheduleJob", "Move a scheduled/retryable/pending job's due time", "jobs",
        params=[JOB_ID], body="RescheduleRequest", ok=NO_CONTENT))
    add("/jobs/{job_id}/payload", "put", _operation(
        "put", "editPayload", "Replace the payload (new fingerprint)", "jobs",
        params=[JOB_ID], body="PayloadRequest", ok=NO_CONTENT))
    add("/jobs/{job_id}/admission", "get", _operation(
        "get", "explainAdmission", "Why the job is (not) running", "jobs", params=[JOB_ID],
        ok={"200": _resp("Explanation", ref("Explanation"))}))
    add("/simulate", "post", _operation(
        "post", "simulate", "What if a policy changed: time to drain and oldest jobs' "
        "starts, before and after", "policy", body="SimulateRequest", read=True,
        ok={"200": _resp("Before and after", ref("Simulation"))},
        errors={"400": _err("An unknown rate class, concurrency limit or queue, a limit "
                            "out of range, or no change named.")},
        description="A read: changes nothing, needs no Idempotency-Key, is allowed in "
                    "read-only mode and for read-only tokens, and is not audited."))
    add("/operations/{op_id}", "get", _operation(
        "get", "getOperation", "Progress of a bulk operation", "jobs",
        params=[_path_param("op_id", "operation id")],
        ok={"200": _resp("The operation", ref("Operation"))}))

    # -- periodic
    sched = _path_param("schedule_id", "schedule id", text(1, 200))
    add("/periodic", "get", _operation(
        "get", "listPeriodic", "Periodic schedules", "periodic", params=[INCLUDE_PAYLOAD],
        ok={"200": _resp("Schedules", arr(ref("Schedule")))}))
    add("/periodic/{schedule_id}", "put", _operation(
        "put", "putPeriodic", "Create or replace a schedule", "periodic", params=[sched],
        body="ScheduleRequest", ok=EMPTY_200))
    add("/periodic/{schedule_id}", "delete", _operation(
        "delete", "deletePeriodic", "Delete a schedule (its events are kept)", "periodic",
        params=[sched], ok=NO_CONTENT))
    add("/periodic/{schedule_id}/enqueue-events", "get", _operation(
        "get", "periodicEvents", "Enqueue events, newest first", "periodic",
        params=[sched, _query_param("limit", {**U32, "minimum": 1, "maximum": 1000},
                                    "1..1000, default 30"),
                _query_param("cursor", U64, "event_id to continue before")],
        ok={"200": _resp("Events", ref("ScheduleEvents"))}))
    add("/periodic/{schedule_id}/run", "post", _operation(
        "post", "runPeriodic", "Enqueue one job from the schedule now", "periodic",
        params=[sched], ok={"202": _resp("Enqueued (or replayed)", ref("RunResponse"))},
        errors={"423": _err("Quarantined.", "QuarantinedError"),
                "429": _resp("Backpressure, or too many failed token attempts from this "
                             "address (Retry-After).",
                             {"anyOf": [ref("BackpressureError"), ref("Error")]})}))

    # -- workers
    add("/workers", "get", _operation(
        "get", "listWorkers", "Live workers (heartbeat within 15 min)", "workers",
        ok={"200": _resp("Workers", arr(ref("Worker")))}))
    add("/cluster", "get", _operation(
        "get", "cluster", "Fleet capacity, utilization, and queue coverage", "workers",
        ok={"200": _resp("Cluster", ref("Cluster"))}))
    add("/workers/{worker_id}/signal", "post", _operation(
        "post", "signalWorker", "Deliver a signal on the next heartbeat", "workers",
        params=[_path_param("worker_id", "worker id")], body="SignalRequest", ok=NO_CONTENT))

    # -- the worker protocol: a worker in any language, under the same admission
    wid = _path_param("worker_id", "worker id (from registerWorker)")
    held = [wid, _path_param("job_id", "a job the worker holds")]
    conflict = {"409": _err("Past capacity, a stale fence, a job it does not hold, a "
                            "deregistered worker, or the same Idempotency-Key in "
                            "progress.", "WorkerConflictError")}
    add("/workers", "post", _operation(
        "post", "registerWorker", "Register a worker (worker protocol)", "worker protocol",
        body="WorkerRegistration", ok={"201": _resp("Registered", ref("WorkerSession"))},
        errors=conflict,
        description="Creates or renews its registry row; heartbeat every `heartbeat_ms`. "
                    "A worker token may register only for the queues it is bound to."))
    add("/workers/{worker_id}", "delete", _operation(
        "delete", "deregisterWorker", "Leave: hand its jobs back, uncharged",
        "worker protocol", params=[wid],
        ok={"200": _resp("Deregistered", ref("DeregisterReply"))}, errors=conflict))
    add("/workers/{worker_id}/heartbeat", "post", _operation(
        "post", "workerHeartbeat", "Heartbeat: signals and cancels", "worker protocol",
        params=[wid], body="HeartbeatRequest",
        ok={"200": _resp("The reply", ref("HeartbeatReply"))}, errors=conflict,
        description="A worker silent for 15 minutes is aged out (404: register again); "
                    "leases it does not extend expire and the reclaimer takes the jobs "
                    "back."))
    add("/workers/{worker_id}/claim", "post", _operation(
        "post", "claimJobs", "Claim jobs by the store's admission (long poll)",
        "worker protocol", params=[wid], body="ClaimRequest",
        ok={"200": _resp("Claimed jobs (maybe none)", ref("ClaimReply"))}, errors=conflict,
        description="The same admission as a Python worker's: rate classes, fairness, "
                    "concurrency ceilings and quarantine hold across both."))
    for verb, op_id, summary, body, ok in (
        ("extend", "extendLease", "Extend a lease", "ExtendRequest",
         {"200": _resp("Extended", ref("ExtendReply"))}),
        ("complete", "completeJob", "Complete a job (result, output)", "CompleteRequest",
         NO_CONTENT),
        ("fail", "failJob", "Fail an attempt (retry hint, throttle)", "FailRequest",
         {"200": _resp("The outcome applied", ref("FailReply"))}),
        ("snooze", "snoozeJob", "Run it later without spending an attempt",
         "SnoozeRequest", NO_CONTENT),
        ("progress", "reportProgress", "Report progress", "ProgressRequest", NO_CONTENT),
    ):
        add(f"/workers/{{worker_id}}/jobs/{{job_id}}/{verb}", "post", _operation(
            "post", op_id, summary, "worker protocol", params=held, body=body, ok=ok,
            errors=conflict))
    add("/events", "get", _operation(
        "get", "events", "Server-Sent Events: queue_activity", "events",
        params=[{"name": "Last-Event-ID", "in": "header", "required": False,
                 "description": "Resume after this event id.", "schema": STR},
                _query_param("last_event_id", STR, "The same, for clients that cannot "
                             "set headers (the header wins).")],
        ok={"200": _resp(
            "`event: queue_activity` with `data: {\"queues\": [...]}` (coalesced over "
            "200 ms), `:hb` keepalives every 15 s, `event: resync` after a gap.",
            {"type": "string"}, "text/event-stream")}))

    # -- policy
    add("/rate-classes", "get", _operation(
        "get", "listRateClasses", "Rate classes with live token counts", "policy",
        ok={"200": _resp("Rate classes", arr(ref("RateClass")))}))
    add("/rate-classes/{name}", "put", _operation(
        "put", "putRateClass", "Create or update a rate class (paused = kill switch; "
        "adaptive = AIMD)",
        "policy", params=[_path_param("name", "rate class", POLICY_NAME)],
        body="RateClassRequest",
        ok=EMPTY_200))
    add("/rate-classes/{name}/history", "get", _operation(
        "get", "getRateClassHistory", "An adaptive class's limit changes, oldest first",
        "policy", params=[_path_param("name", "rate class"),
                          _query_param("since_ms", I64, "From this store time on "
                                       "(default: the last hour)."),
                          _query_param("limit", {**U32, "minimum": 1, "maximum": 10_000},
                                       "At most this many, the newest (default 1000).")],
        ok={"200": _resp("Changes", arr(ref("RateClassChange")))},
        description="404 for an unknown class. Consecutive increases within a minute "
                    "share one row."))
    add("/rate-classes/{name}", "delete", _operation(
        "delete", "deleteRateClass", "Delete a rate class", "policy",
        params=[_path_param("name", "rate class"),
                _query_param("force", BOOL, "Delete it even while jobs wait on it.")],
        ok=NO_CONTENT,
        description="204 when deleted; 404 for an unknown class; 409 (with `jobs`, how "
                    "many available jobs name it) while jobs wait on it, unless "
                    "`force=true` (those jobs then run without a budget). PUT names "
                    "follow one rule: 1-128 characters from letters, digits and "
                    "`. _ - : / @ +`, starting with a letter or digit."))
    add("/concurrency-limits", "get", _operation(
        "get", "listConcurrencyLimits", "Concurrency ceilings", "policy",
        ok={"200": _resp("Limits", arr(ref("ConcurrencyLimit")))}))
    add("/concurrency-limits/{name}", "put", _operation(
        "put", "putConcurrencyLimit", "Create or update a concurrency ceiling", "policy",
        params=[_path_param("name", "limit name", POLICY_NAME)],
        body="ConcurrencyLimitRequest",
        ok=EMPTY_200))
    add("/concurrency-limits/{name}", "delete", _operation(
        "delete", "deleteConcurrencyLimit", "Delete a concurrency ceiling", "policy",
        params=[_path_param("name", "limit name"),
                _query_param("force", BOOL, "Delete it even while its queue has work.")],
        ok=NO_CONTENT,
        description="204 when deleted; 404 for an unknown limit; 409 (with `jobs`, how "
                    "many jobs of its queue are available or running) unless "
                    "`force=true`. Names follow the rate-class rule."))
    add("/partitions", "get", _operation(
        "get", "listPartitions", "Partitions of a queue (busiest 200)", "policy",
        params=[_query_param("queue", STR, Q, required=True)],
        ok={"200": _resp("Partitions", arr(ref("Partition")))}))
    add("/quarantine", "get", _operation(
        "get", "listQuarantine", "Quarantined fingerprints", "policy",
        ok={"200": _resp("Entries", arr(ref("QuarantineEntry")))}))
    add("/quarantine/{fingerprint}", "delete", _operation(
        "delete", "releaseQuarantine", "Release a fingerprint (its jobs become available)",
        "policy", params=[_path_param("fingerprint", "fingerprint")],
        ok={"204": _resp("Released", headers={"x-released-jobs": {
            "description": "How many quarantined jobs were made available.",
            "schema": {"type": "string", "pattern": "^[0-9]+$"}}})}))

    # -- audit
    add("/audit", "get", _operation(
        "get", "listAudit", "Operator actions, newest first", "audit",
        params=[LIMIT_200,
                _query_param("cursor", {**U64, "maximum": 2**63 - 1},
                             "next_cursor of the previous page"),
                _query_param("action", STR, "Only this action (e.g. `job.retry`)."),
                _query_param("target", STR, "Only this target (e.g. `job:<id>`)."),
                _query_param("target_prefix", STR, "Only targets starting with this "
                             "text (e.g. `rate_class:`)."),
                _query_param("since_ms", I64, "Only entries at or after this time.")],
        ok={"200": _resp("Entries", ref("AuditPage"))},
        description="Every accepted (2xx) POST/PUT/DELETE except an enqueue and a dry "
                    "run, recorded right after its change; refused requests and "
                    "Idempotency-Key replays record nothing. Kept for "
                    "HG_AUDIT_RETENTION_MS (90 days by default)."))
    _add_links(p)
    return p


# -- links: from the responses that create or list a thing to the routes that name it --

JOB_OPS = ("getJob", "deleteJob", "getJobResult", "getJobOutput", "getJobProgress",
           "retryJob", "cancelJob", "promoteJob", "rescheduleJob", "editPayload",
           "explainAdmission")
RUN_OPS = ("getJobResult", "getJobOutput", "getJobProgress")
QUEUE_OPS = ("putQueue", "deleteQueue", "putEnqueueLimit", "deleteEnqueueLimit",
             "pauseQueue", "resumeQueue", "queueHistory", "queueLatency")
SCHEDULE_OPS = ("putPeriodic", "deletePeriodic", "periodicEvents", "runPeriodic")

# (source path, method, status, {target operationId: {parameter: runtime expression}})
LINKS: tuple[tuple[str, str, str, dict[str, dict[str, str]]], ...] = (
    # A new job has no result, output or progress yet: those follow reading the job.
    ("/jobs", "post", "201", {
        **{op: {"job_id": "$response.body#/id"} for op in JOB_OPS if op not in RUN_OPS},
        "kindLatency": {"kind": "$request.body#/kind"}}),
    ("/jobs", "get", "200", {op: {"job_id": "$response.body#/jobs/0/id"} for op in JOB_OPS}),
    ("/jobs/{job_id}", "get", "200", {
        **{op: {"job_id": "$response.body#/id"} for op in RUN_OPS},
        "kindLatency": {"kind": "$response.body#/kind"},
        **{op: {"queue": "$response.body#/queue"} for op in QUEUE_OPS},
        "listPartitions": {"queue": "$response.body#/queue"}}),
    ("/jobs/bulk", "post", "202", {"getOperation": {"op_id": "$response.body#/id"}}),
    ("/queues/{queue}", "delete", "202", {
        "getOperation": {"op_id": "$response.body#/operation_id"}}),
    ("/queues/{queue}", "put", "200", {
        **{op: {"queue": "$request.path.queue"} for op in QUEUE_OPS},
        "listPartitions": {"queue": "$request.path.queue"}}),
    ("/queues/{queue}/enqueue-limit", "put", "200", {
        op: {"queue": "$request.path.queue"} for op in QUEUE_OPS}),
    ("/queues", "get", "200", {op: {"queue": "$response.body#/0/queue"} for op in QUEUE_OPS}),
    ("/periodic/{schedule_id}", "put", "200", {
        op: {"schedule_id": "$request.path.schedule_id"} for op in SCHEDULE_OPS}),
    ("/periodic", "get", "200", {
        op: {"schedule_id": "$response.body#/0/id"} for op in SCHEDULE_OPS}),
    ("/periodic/{schedule_id}/run", "post", "202", {
        op: {"job_id": "$response.body#/id"} for op in JOB_OPS if op not in RUN_OPS}),
    ("/rate-classes/{name}", "put", "200", {
        op: {"name": "$request.path.name"}
        for op in ("putRateClass", "deleteRateClass", "getRateClassHistory")}),
    ("/rate-classes", "get", "200", {
        op: {"name": "$response.body#/0/name"}
        for op in ("putRateClass", "deleteRateClass", "getRateClassHistory")}),
    ("/concurrency-limits/{name}", "put", "200", {
        **{op: {"name": "$request.path.name"}
           for op in ("putConcurrencyLimit", "deleteConcurrencyLimit")},
        **{op: {"queue": "$request.body#/queue"} for op in QUEUE_OPS}}),
    ("/concurrency-limits", "get", "200", {
        op: {"name": "$response.body#/0/name"}
        for op in ("putConcurrencyLimit", "deleteConcurrencyLimit")}),
    ("/workers", "get", "200", {
        "signalWorker": {"worker_id": "$response.body#/0/worker_id"}}),
    ("/quarantine", "get", "200", {
        "releaseQuarantine": {"fingerprint": "$response.body#/0/fingerprint"}}),
)


def _add_links(paths: dict[str, dict[str, Any]]) -> None:
    """OpenAPI links, so a client (or a stateful fuzzer) can follow what a response
    created or listed to the routes that act on it."""
    for path, method, status, targets in LINKS:
        responses = paths[path][method]["responses"]
        # A copy: the plain answers (EMPTY_200, NO_CONTENT) are shared between routes.
        responses[status] = {**responses[status], "links": {
            op: {"operationId": op, "parameters": dict(params)}
            for op, params in targets.items()}}


def document() -> dict[str, Any]:
    return {
        "openapi": "3.1.0",
        "info": {
            "title": "headgate control API",
            "version": "1",
            "description": (
                "A job queue whose dequeue is an admission decision. Errors are JSON "
                "`{\"error\": ...}`. Every POST/PUT/DELETE needs an Idempotency-Key "
                "(except POST /simulate, a read). "
                "Payloads are base64 and hidden unless include_payload=true."
            ),
        },
        "servers": [{"url": "/api/v1"}],
        "security": [{"bearer": []}, {}],
        "paths": _paths(),
        "components": {
            "schemas": SCHEMAS,
            "securitySchemes": {"bearer": {"type": "http", "scheme": "bearer",
                                           "description": "Required when API tokens "
                                           "are configured."}},
        },
    }


_DOCUMENT = document()


@bp.get("/openapi.json")
def openapi() -> flask.Response:
    return json_response(_DOCUMENT)
