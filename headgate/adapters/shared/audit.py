"""The audit log of operator actions (migration 20), in the SQL both engines share.

Rows are appended by the control API after an accepted change and read newest first by
id (a keyset cursor: the previous page's last id), optionally narrowed to one action,
one target or a start time; the retention duty deletes the oldest by `at_ms` in
bounded batches.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from headgate.core import InvalidInput
from headgate.core.envelope import check_int, check_text
from headgate.core.records import AuditEntry

from .conn import Connection
from .queries import fill, load

# A detail is a few fields (a bulk filter, a rate class's values, up to a hundred ids);
# anything larger is a caller's mistake, refused rather than stored.
MAX_DETAIL_BYTES = 64 * 1024
MAX_PAGE = 1000
COLUMNS = "id, at_ms, actor, action, target, status, outcome, detail"

Q = load(__name__)
INSERT = fill(Q["insert"], columns=COLUMNS)
PAGE = fill(Q["page"], columns=COLUMNS)
PRUNE = Q["prune"]


def _entry(row: Any) -> AuditEntry:
    return AuditEntry(id=int(row[0]), at_ms=int(row[1]), actor=row[2], action=row[3],
                      target=row[4], status=int(row[5]), outcome=row[6],
                      detail=json.loads(row[7]))


def record(conn: Connection, now: int, actor: str, action: str, target: str,
           status: int, outcome: str, detail: Mapping[str, Any]) -> AuditEntry:
    text = json.dumps(dict(detail), sort_keys=True, separators=(",", ":"))
    row = conn.execute(INSERT, (now, actor, action, target, status, outcome, text)).fetchone()
    return _entry(row)


def page(conn: Connection, action: str | None, target: str | None, since_ms: int | None,
         cursor: int | None, limit: int, target_prefix: str | None = None
         ) -> list[AuditEntry]:
    where: list[str] = []
    params: list[Any] = []
    for column, value in (("action", action), ("target", target)):
        if value is not None:
            where.append(f"{column} = ?")
            params.append(value)
    if target_prefix:
        test = conn.dialect.prefix_test("target")
        where.append(test)
        params.extend([target_prefix] * test.count("?"))
    if since_ms is not None:
        where.append("at_ms >= ?")
        params.append(since_ms)
    if cursor is not None:
        where.append("id < ?")
        params.append(cursor)
    clause = f" WHERE {' AND '.join(where)}" if where else ""
    sql = fill(PAGE, where=clause)
    return [_entry(r) for r in conn.execute(sql, (*params, limit)).fetchall()]


def prune_older(conn: Connection, cutoff_ms: int, limit: int) -> int:
    return int(conn.execute(PRUNE, (cutoff_ms, limit)).rowcount)


def checked_detail(detail: Mapping[str, Any] | None) -> Mapping[str, Any]:
    if detail is None:
        return {}
    if not isinstance(detail, Mapping):
        raise InvalidInput("detail must be a mapping")
    try:
        size = len(json.dumps(dict(detail)).encode())
    except (TypeError, ValueError) as exc:
        raise InvalidInput(f"detail must be JSON: {exc}") from None
    if size > MAX_DETAIL_BYTES:
        raise InvalidInput(f"detail must be at most {MAX_DETAIL_BYTES} bytes of JSON")
    return detail


class AuditMethods:
    """The port's audit log methods: append, page, prune."""

    if TYPE_CHECKING:  # provided by the concrete store
        db: Any

    def record_audit(self, actor: str, action: str, target: str, *, status: int = 200,
                     outcome: str = "ok",
                     detail: Mapping[str, Any] | None = None) -> AuditEntry:
        check_text("actor", actor)
        check_text("action", action)
        check_text("target", target, high=1024)
        check_text("outcome", outcome)
        check_int("status", status, 100, 599)
        details = checked_detail(detail)
        with self.db.write() as (conn, now):
            return record(conn, now, actor, action, target, status, outcome, details)

    def list_audit(self, *, action: str | None = None, target: str | None = None,
                   since_ms: int | None = None, cursor: int | None = None,
                   limit: int = 50, target_prefix: str | None = None) -> list[AuditEntry]:
        check_int("limit", limit, 1, MAX_PAGE)
        for name, value in (("action", action), ("target", target),
                            ("target_prefix", target_prefix)):
            if value is not None:
                check_text(name, value, high=1024)
        if cursor is not None:
            check_int("cursor", cursor, 0)
        if since_ms is not None:
            check_int("since_ms", since_ms, 0)
        with self.db.read() as conn:
            return page(conn, action, target, since_ms, cursor, limit, target_prefix)

    def prune_audit(self, older_than_ms: int, limit: int = 1000) -> int:
        check_int("older_than_ms", older_than_ms, 0)
        check_int("limit", limit, 1)
        with self.db.write() as (conn, now):
            return prune_older(conn, now - older_than_ms, limit)
