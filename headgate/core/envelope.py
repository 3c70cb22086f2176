"""The producer's envelope (docs/ARCHITECTURE.md, Jobs) and its validation at the boundary.

Validation lives here, not in the adapters, so every way in (client, API, periodic
scheduler) rejects the same inputs with the same words before anything is written.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields
from typing import Any

from .errors import InvalidInput
from .fingerprint import fingerprint as compute_fingerprint
from .ids import new_id

MAX_KIND = 128
MAX_NAME = 255
MAX_PAYLOAD = 1024 * 1024
MAX_TAGS = 32
MAX_TAG = 64
MAX_ID = 255
MAX_HEADERS = 64
MAX_UNIQUE_KEY = 1024
REPLACE_BITS = 0b1111
INT64_MAX = 2**63 - 1
# Durations are added to store time (expiry, debounce, unique windows); capped so the sum
# stays a 64-bit integer on both engines (~146 million years is still "forever").
MAX_DURATION_MS = 2**62
INT32_MIN, INT32_MAX = -(2**31), 2**31 - 1

# Envelope's headers default: a fresh dict per envelope, as field(default_factory=dict).
_NO_HEADERS: Any = object()


@dataclass(frozen=True, slots=True, init=False)
class Envelope:
    kind: str
    payload: bytes = b""
    id: str | None = None
    schema_version: int = 1
    queue: str = "default"
    priority: int = 0
    partition_key: str = ""
    rate_class: str = ""
    weight: int = 1
    scheduled_at_ms: int = 0
    max_attempts: int = 25
    retention_ms: int | None = None
    unique_key: bytes | None = None
    unique_window_ms: int = 0
    unique_debounce_ms: int = 0
    unique_replace: int = 0
    unique_exclude_kind: bool = False
    tags: Sequence[str] = ()
    pending: bool = False
    sticky_worker: str = ""
    headers: Mapping[str, str] = field(default_factory=dict)
    fingerprint: str | None = None
    periodic_schedule_id: str = ""
    periodic_tick_ms: int | None = None

    def __init__(
        self, kind: str, payload: bytes = b"", id: str | None = None, schema_version: int = 1,
        queue: str = "default", priority: int = 0, partition_key: str = "",
        rate_class: str = "", weight: int = 1, scheduled_at_ms: int = 0,
        max_attempts: int = 25, retention_ms: int | None = None,
        unique_key: bytes | None = None, unique_window_ms: int = 0,
        unique_debounce_ms: int = 0, unique_replace: int = 0,
        unique_exclude_kind: bool = False, tags: Sequence[str] = (), pending: bool = False,
        sticky_worker: str = "", headers: Mapping[str, str] = _NO_HEADERS,
        fingerprint: str | None = None, periodic_schedule_id: str = "",
        periodic_tick_ms: int | None = None,
    ) -> None:
        # Hand-written (the field defaults above are the same; a test holds them equal):
        # the generated frozen __init__ sets each of the 24 slots with object.__setattr__,
        # which costs ~4 µs an envelope, built twice per job. The slots' own descriptors
        # set them in about a third of that.
        (s_kind, s_payload, s_id, s_schema_version, s_queue, s_priority, s_partition_key,
         s_rate_class, s_weight, s_scheduled_at_ms, s_max_attempts, s_retention_ms,
         s_unique_key, s_unique_window_ms, s_unique_debounce_ms, s_unique_replace,
         s_unique_exclude_kind, s_tags, s_pending, s_sticky_worker, s_headers, s_fingerprint,
         s_periodic_schedule_id, s_periodic_tick_ms) = _SLOT_SETTERS
        s_kind(self, kind)
        s_payload(self, payload)
        s_id(self, id)
        s_schema_version(self, schema_version)
        s_queue(self, queue)
        s_priority(self, priority)
        s_partition_key(self, partition_key)
        s_rate_class(self, rate_class)
        s_weight(self, weight)
        s_scheduled_at_ms(self, scheduled_at_ms)
        s_max_attempts(self, max_attempts)
        s_retention_ms(self, retention_ms)
        s_unique_key(self, unique_key)
        s_unique_window_ms(self, unique_window_ms)
        s_unique_debounce_ms(self, unique_debounce_ms)
        s_unique_replace(self, unique_replace)
        s_unique_exclude_kind(self, unique_exclude_kind)
        s_tags(self, tags)
        s_pending(self, pending)
        s_sticky_worker(self, sticky_worker)
        s_headers(self, {} if headers is _NO_HEADERS else headers)
        s_fingerprint(self, fingerprint)
        s_periodic_schedule_id(self, periodic_schedule_id)
        s_periodic_tick_ms(self, periodic_tick_ms)

    def validated(self) -> Envelope:
        """A checked, normalized copy: id and fingerprint filled, tags sorted and unique."""
        self._check_fields()
        payload = bytes(self.payload)
        tags = normalize_tags(self.tags)
        headers = _headers(self.headers)
        fp = compute_fingerprint(self.kind, payload)
        if self.fingerprint is not None and self.fingerprint != fp:
            raise InvalidInput("fingerprint does not match kind and payload")
        # An explicit constructor call: dataclasses.replace costs more than the checks.
        return Envelope(
            self.kind, payload, self.id if self.id is not None else new_id(),
            self.schema_version, self.queue, self.priority, self.partition_key,
            self.rate_class, self.weight, self.scheduled_at_ms, self.max_attempts,
            self.retention_ms,
            bytes(self.unique_key) if self.unique_key is not None else None,
            self.unique_window_ms, self.unique_debounce_ms, self.unique_replace,
            self.unique_exclude_kind, tags, self.pending, self.sticky_worker, headers, fp,
            self.periodic_schedule_id, self.periodic_tick_ms,
        )

    def _check_fields(self) -> None:
        """Field by field, in a fixed order: the first bad field names the error."""
        _text("kind", self.kind, 1, MAX_KIND)
        if not isinstance(self.payload, bytes | bytearray | memoryview):
            raise InvalidInput("payload must be bytes")
        size = self.payload.nbytes if isinstance(self.payload, memoryview) else len(self.payload)
        if size > MAX_PAYLOAD:
            raise InvalidInput(f"payload must be at most {MAX_PAYLOAD} bytes")
        if self.id is not None:
            _text("id", self.id, 1, MAX_ID)
        _int("schema_version", self.schema_version, 1, INT32_MAX)  # 32-bit columns
        _text("queue", self.queue, 1, MAX_NAME)
        _int("priority", self.priority, INT32_MIN, INT32_MAX)
        _text("partition_key", self.partition_key, 0, MAX_NAME)
        _text("rate_class", self.rate_class, 0, MAX_NAME)
        _int("weight", self.weight, 1)
        _int("scheduled_at_ms", self.scheduled_at_ms, 0)
        _int("max_attempts", self.max_attempts, 1, INT32_MAX)
        if self.retention_ms is not None:
            _int("retention_ms", self.retention_ms, 0, MAX_DURATION_MS)
        if self.unique_key is not None:
            if not isinstance(self.unique_key, bytes | bytearray):
                raise InvalidInput("unique_key must be bytes")
            if not 1 <= len(self.unique_key) <= MAX_UNIQUE_KEY:
                raise InvalidInput(f"unique_key must be 1..{MAX_UNIQUE_KEY} bytes")
        _int("unique_window_ms", self.unique_window_ms, 0, MAX_DURATION_MS)
        _int("unique_debounce_ms", self.unique_debounce_ms, 0, MAX_DURATION_MS)
        _int("unique_replace", self.unique_replace, 0, REPLACE_BITS)
        if self.unique_replace and self.unique_key is None:
            raise InvalidInput("unique_replace requires caller-supplied unique_key")
        if not isinstance(self.unique_exclude_kind, bool):
            raise InvalidInput("unique_exclude_kind must be a boolean")
        if not isinstance(self.pending, bool):
            raise InvalidInput("pending must be a boolean")
        _text("sticky_worker", self.sticky_worker, 0, MAX_NAME)


# The slot descriptors of Envelope's fields, in field order (see Envelope.__init__).
_SLOT_SETTERS = tuple(vars(Envelope)[f.name].__set__ for f in fields(Envelope))


def normalize_tags(tags: Any) -> tuple[str, ...]:
    if tags == () or tags == []:
        return ()
    if isinstance(tags, str) or not isinstance(tags, Sequence | set | frozenset):
        raise InvalidInput("tags must be a list of strings")
    for tag in tags:
        _text("tag", tag, 1, MAX_TAG)
    unique = tuple(sorted(set(tags)))
    if len(unique) > MAX_TAGS:
        raise InvalidInput(f"at most {MAX_TAGS} tags")
    return unique


def _headers(headers: Any) -> dict[str, str]:
    if type(headers) is dict and not headers:
        return {}
    if not isinstance(headers, Mapping):
        raise InvalidInput("headers must be a map of strings")
    if len(headers) > MAX_HEADERS:
        raise InvalidInput(f"at most {MAX_HEADERS} headers")
    for key, value in headers.items():
        _text("header name", key, 1, MAX_NAME)
        _text(f"header {key}", value, 0, 4096)
    return dict(headers)


def _text(name: str, value: Any, low: int, high: int) -> None:
    if type(value) is str and low <= len(value) <= high and "\x00" not in value:
        return
    if not isinstance(value, str):
        raise InvalidInput(f"{name} must be a string")
    if len(value) < low:
        raise InvalidInput(f"{name} must not be empty")
    if len(value) > high:
        raise InvalidInput(f"{name} must be at most {high} characters")
    if "\x00" in value:
        raise InvalidInput(f"{name} must not contain NUL")


def _int(name: str, value: Any, low: int, high: int = INT64_MAX) -> None:
    if type(value) is int and low <= value <= high:
        return
    if isinstance(value, bool) or not isinstance(value, int):
        raise InvalidInput(f"{name} must be an integer")
    if value < low:
        raise InvalidInput(f"{name} must be >= {low}")
    if value > high:
        raise InvalidInput(f"{name} must be <= {high}")


def check_int(name: str, value: Any, low: int, high: int = INT64_MAX) -> int:
    """Shared argument check for store methods (durations, limits)."""
    _int(name, value, low, high)
    return value


def check_text(name: str, value: Any, low: int = 1, high: int = MAX_NAME) -> str:
    _text(name, value, low, high)
    return value
