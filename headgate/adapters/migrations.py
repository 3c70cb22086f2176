"""The schema shipped inside the package: numbered migrations
(``headgate/db/<engine>/NNNN_*.sql``), PostgreSQL's server-side functions
(``headgate/db/postgres/functions/*.sql``) and SQLite's triggers
(``headgate/db/sqlite/triggers/*.sql``); ``headgate/db/README.md`` gives the rules.

The numbers that SQL needs (``headgate/core/schema_constants.py``, the latency bounds of
``headgate/core/latency.py``) are generated here, one source per engine: on PostgreSQL
a function file of IMMUTABLE SQL functions (``constants_file``), applied and
hash-tracked like the shipped ones; on SQLite the rows of ``schema_constants`` and
``latency_bounds`` (``write_sqlite_constants``).

Read through ``importlib.resources`` so an installed wheel (or a zip) finds them as a
checkout does; nothing here depends on where the package lies on disk.
"""

from __future__ import annotations

import hashlib
import re
from dataclasses import dataclass
from importlib.resources import files
from typing import Any

from headgate.adapters.shared.queries import fill, load
from headgate.core import StoreUnavailable
from headgate.core.latency import INF, LATENCY_BOUNDS_MS
from headgate.core.schema_constants import SQL_CONSTANTS

Q = load(__name__)
CONSTANT_FUNCTION = Q["constant_function"]
LATENCY_BOUND_FUNCTION = Q["latency_bound_function"]
SQLITE_CONSTANT_TABLES = Q["sqlite_constant_tables"]
SELECT_CONSTANTS = Q["select_constants"]
SELECT_BOUNDS = Q["select_bounds"]
DELETE_CONSTANTS = Q["delete_constants"]
INSERT_CONSTANT = Q["insert_constant"]
DELETE_BOUNDS = Q["delete_bounds"]
INSERT_BOUND = Q["insert_bound"]


@dataclass(frozen=True)
class Migration:
    version: int
    name: str
    sql: str


def migrations(engine: str) -> list[Migration]:
    """The numbered migrations for ``engine`` ("sqlite" or "postgres"), in order."""
    try:
        folder = files("headgate").joinpath("db", engine)
        entries = [e for e in folder.iterdir() if e.name.endswith(".sql") and e.name[:1].isdigit()]
        found = [
            Migration(int(e.name.split("_", 1)[0]), e.name, e.read_text(encoding="utf-8"))
            for e in entries
        ]
    except (OSError, ValueError) as exc:
        raise StoreUnavailable(
            f"store unavailable: cannot read headgate's {engine} migrations ({exc})"
        ) from exc
    if not found:
        raise StoreUnavailable(f"store unavailable: headgate ships no {engine} migrations")
    return sorted(found, key=lambda m: m.version)


def known_versions(engine: str) -> set[int]:
    """The migration numbers this code ships."""
    return {m.version for m in migrations(engine)}


@dataclass(frozen=True)
class FunctionFile:
    """One file of server-side function text (or, on SQLite, of triggers); ``digest``
    tells whether a database has applied this exact text."""

    name: str
    sql: str

    @property
    def digest(self) -> str:
        return hashlib.sha256(self.sql.encode()).hexdigest()


def _shipped_files(engine: str, folder_name: str) -> list[FunctionFile] | None:
    """The ``.sql`` files of ``db/<engine>/<folder_name>`` in name order; None when the
    engine has no such folder."""
    folder = files("headgate").joinpath("db", engine, folder_name)
    try:
        if not folder.is_dir():
            return None
        found = [
            FunctionFile(e.name, e.read_text(encoding="utf-8"))
            for e in folder.iterdir() if e.name.endswith(".sql")
        ]
    except (OSError, ValueError) as exc:
        raise StoreUnavailable(
            f"store unavailable: cannot read headgate's {engine} {folder_name} ({exc})"
        ) from exc
    return sorted(found, key=lambda f: f.name)


def function_files(engine: str) -> list[FunctionFile]:
    """The current function text for ``engine`` (none for SQLite): the generated
    constants first, since the shipped files' SQL-language functions are checked against
    them when created, then the shipped files in name order."""
    found = _shipped_files(engine, "functions")
    if found is None:
        return []
    return [constants_file(), *found]


def trigger_files() -> list[FunctionFile]:
    """SQLite's triggers, one file per concern in name order: the current definitions,
    which take over from the migrations that first created them (a migration creates
    no trigger any more; its file does, see ``headgate/db/README.md``)."""
    found = _shipped_files("sqlite", "triggers")
    if not found:
        raise StoreUnavailable("store unavailable: headgate ships no sqlite triggers")
    return found


# Not a file on disk: its schema_functions row has a name no shipped file can have.
CONSTANTS_FILE = "(generated) constants"


def constants_file() -> FunctionFile:
    """PostgreSQL's copy of the Python constants: one IMMUTABLE SQL function per value,
    and ``headgate_latency_bound(v)`` from the latency bounds. A function of a single
    SELECT without FROM is inlined by the planner and folded to its value, so naming a
    constant costs what its literal did. All are bigint, whatever the value, so a
    changed value never changes a function's type (which CREATE OR REPLACE refuses); a
    caller that needs an integer casts."""
    head = ("-- Generated by headgate migrate (headgate/adapters/migrations.py) from\n"
            "-- headgate/core/schema_constants.py and headgate/core/latency.py; edit those.\n")
    body = [fill(CONSTANT_FUNCTION, name=name, value=str(int(value))) + "\n"
            for name, value in SQL_CONSTANTS.items()]
    ladder = "\n".join(f"        WHEN v <= {b} THEN {b}" for b in LATENCY_BOUNDS_MS)
    body.append("-- The upper bound of v's latency bucket (INF for the +Inf bucket).\n"
                + fill(LATENCY_BOUND_FUNCTION, ladder=ladder, inf=str(int(INF))) + "\n")
    return FunctionFile(CONSTANTS_FILE, head + "\n" + "\n".join(body))


BIGINT_MAX = 2**63 - 1


def sqlite_constant_rows() -> tuple[list[tuple[str, int]], list[tuple[int, int]]]:
    """What SQLite's two tables hold: (name, value) for ``schema_constants``, and
    (upper_ms, le_ms) for ``latency_bounds``, ending with the +Inf bucket so that the
    smallest upper_ms >= v always exists."""
    constants = sorted((name, int(value)) for name, value in SQL_CONSTANTS.items())
    bounds = [(int(b), int(b)) for b in LATENCY_BOUNDS_MS] + [(BIGINT_MAX, int(INF))]
    return constants, bounds


def _sqlite_tables_exist(conn: Any) -> bool:
    found = conn.execute(SQLITE_CONSTANT_TABLES).fetchone()[0]
    return found == 2


def sqlite_constants_differ(conn: Any) -> bool:
    """True when SQLite's constant tables exist and hold other values than the Python
    constants (a release changed one and the database has not migrated since)."""
    if not _sqlite_tables_exist(conn):
        return False
    constants, bounds = sqlite_constant_rows()
    have_constants = sorted(conn.execute(SELECT_CONSTANTS))
    have_bounds = list(conn.execute(SELECT_BOUNDS))
    return ([tuple(r) for r in have_constants] != constants
            or [tuple(r) for r in have_bounds] != bounds)


def write_sqlite_constants(conn: Any) -> bool:
    """Rewrite SQLite's constant tables from the Python constants when they differ, in
    the caller's write transaction; False (nothing written) when they already agree or
    do not exist yet (before migration 0016)."""
    if not sqlite_constants_differ(conn):
        return False
    constants, bounds = sqlite_constant_rows()
    conn.execute(DELETE_CONSTANTS)
    conn.executemany(INSERT_CONSTANT, constants)
    conn.execute(DELETE_BOUNDS)
    conn.executemany(INSERT_BOUND, bounds)
    return True


_COMMENT = re.compile(r"--[^\n]*")


def has_statements(sql: str) -> bool:
    """False for a comment-only migration (a number that concerns the other engine)."""
    return bool(_COMMENT.sub("", sql).strip())
