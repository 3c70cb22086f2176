#!/usr/bin/env python3
"""Today's schema of each engine as one file a reader can take in whole:
``headgate/db/sqlite/schema.sql`` and ``headgate/db/postgres/schema.sql``, the tables
with their indexes and triggers (and on PostgreSQL its sequences, views and composite
types) that ``headgate migrate`` leaves in an empty database. The migrations are what a
database runs; these files only show where they lead, so a reader need not replay them.

Generated, never edited: after a change to a migration or a trigger file, run

    .venv/bin/python scripts/schema.py --write

(both engines: PostgreSQL's needs a server, ``--pg-url`` or ``HG_TEST_PG``, where it
creates and drops a scratch database; ``--engine sqlite`` for SQLite alone). It dumps
the checkout it lives in. The test ``tests/store/test_schema_dump.py`` migrates an
empty database on each engine and compares it with the file. A contributor's tool, so
it lives here and not in the package: a wheel ships the migrations, not this.

The dump is read from the catalogs, not from ``pg_dump`` or ``.schema``, so that it
carries no tool version and keeps one order: objects by name, each table followed by
its indexes and triggers, whitespace outside literals and comments normalised. Function
bodies are left out: they are the files of ``headgate/db/postgres/functions``.
"""

from __future__ import annotations

import argparse
import os
import re
import sqlite3
import sys
import tempfile
import uuid
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit, urlunsplit

ENGINES = ("sqlite", "postgres")
REGENERATE = ".venv/bin/python scripts/schema.py --write"
PG_ENV = "HG_TEST_PG"
ROOT = Path(__file__).resolve().parents[1]
DB_FOLDER = ROOT / "headgate" / "db"

_PLAIN_NAME = re.compile(r"[a-z_][a-z0-9_]*")


def schema_file(engine: str) -> Path:
    return DB_FOLDER / engine / "schema.sql"


def _header(engine: str) -> str:
    label = {"sqlite": "SQLite", "postgres": "PostgreSQL"}[engine]
    sources = {
        "sqlite": "the migrations (NNNN_*.sql) and the trigger files (triggers/)",
        "postgres": "the migrations (NNNN_*.sql) and the function files (functions/)",
    }[engine]
    return (
        f"-- headgate's {label} schema: what `headgate migrate` leaves in an empty database,\n"
        f"-- made by {sources}.\n"
        f"-- Generated; do not edit. Regenerate with: {REGENERATE}\n"
        "-- headgate/db/README.md says where each part is written.\n"
    )


def _ident(name: str) -> str:
    return name if _PLAIN_NAME.fullmatch(name) else '"' + name.replace('"', '""') + '"'


# -- SQLite -------------------------------------------------------------------------

def _scan(sql: str) -> Iterator[tuple[str, int]]:
    """SQL text as (piece, depth): quoted names and literals whole, comments dropped,
    whitespace runs outside them as one space; depth counts the parentheses open
    around a piece, a parenthesis itself included."""
    i, depth, n = 0, 0, len(sql)
    while i < n:
        ch = sql[i]
        if ch in "'\"`[":
            close = "]" if ch == "[" else ch
            j = i + 1
            while j < n:
                if sql[j] == close and sql[j + 1:j + 2] == close and close != "]":
                    j += 2
                    continue
                if sql[j] == close:
                    break
                j += 1
            yield sql[i:j + 1], depth
            i = j + 1
        elif sql.startswith("--", i):
            end = sql.find("\n", i)
            i = n if end < 0 else end
        elif sql.startswith("/*", i):
            end = sql.find("*/", i + 2)
            i = n if end < 0 else end + 2
            yield " ", depth
        elif ch.isspace():
            while i < n and sql[i].isspace():
                i += 1
            yield " ", depth
        else:
            depth += ch == "("
            depth -= ch == ")"
            yield ch, depth if ch != ")" else depth + 1
            i += 1


def _join(pieces: list[str]) -> str:
    """Scanned pieces as text: no space at either end, after "(" or before ")"."""
    kept: list[str] = []
    for piece in pieces:
        if piece == " " and (not kept or kept[-1] in (" ", "(")):
            continue
        if piece == ")" and kept and kept[-1] == " ":
            kept.pop()
        kept.append(piece)
    if kept and kept[-1] == " ":
        kept.pop()
    return "".join(kept)


def _one_line(sql: str) -> str:
    """A statement on one line: comments dropped, whitespace outside literals single."""
    return _join([p for p, _ in _scan(sql)])


def _sqlite_table(name: str, sql: str) -> str:
    """CREATE TABLE with one column or constraint a line, whatever layout the migration
    and any ALTER TABLE ADD COLUMN since left in sqlite_master."""
    items: list[list[str]] = []
    tail: list[str] = []
    opened = closed = False
    for piece, depth in _scan(sql):
        if not opened:
            if piece == "(" and depth == 1:
                opened = True
                items.append([])
        elif closed:
            tail.append(piece)
        elif piece == ")" and depth == 1:
            closed = True
        elif piece == "," and depth == 1:
            items.append([])
        else:
            items[-1].append(piece)
    if not closed:  # CREATE TABLE … AS SELECT: no column list to lay out
        return _one_line(sql) + ";"
    lines = ",\n".join("    " + _join(item) for item in items)
    options = _join(tail)
    return f"CREATE TABLE {_ident(name)} (\n{lines}\n){' ' + options if options else ''};"


def _sqlite_trigger(sql: str) -> str:
    """A trigger as its file writes it (sqlite_master keeps that text), trailing blanks
    off each line."""
    return "\n".join(line.rstrip() for line in sql.strip().splitlines()) + ";"


def sqlite_schema(conn: sqlite3.Connection) -> str:
    """The schema of a migrated SQLite database, as schema.sql holds it."""
    rows = conn.execute(
        "SELECT type, name, tbl_name, sql FROM sqlite_master "
        "WHERE sql IS NOT NULL AND name NOT LIKE 'sqlite^_%' ESCAPE '^'"
    ).fetchall()
    unknown = sorted({kind for kind, *_ in rows} - {"table", "index", "trigger", "view"})
    if unknown:
        raise ValueError(f"scripts/schema.py renders no SQLite {', '.join(unknown)}")
    by_kind: dict[str, dict[str, list[tuple[str, str]]]] = {}
    for kind, name, table, sql in rows:
        by_kind.setdefault(kind, {}).setdefault(table, []).append((name, sql))
    blocks: list[str] = []
    for table, [(name, sql)] in sorted(by_kind.get("table", {}).items()):
        parts = [_sqlite_table(name, sql)]
        parts += [_one_line(s) + ";" for _, s in sorted(by_kind.get("index", {}).get(table, []))]
        blocks.append("\n".join(parts))
        blocks += [_sqlite_trigger(s)
                   for _, s in sorted(by_kind.get("trigger", {}).get(table, []))]
    views = sorted(v for group in by_kind.get("view", {}).values() for v in group)
    blocks += [_one_line(s) + ";" for _, s in views]
    return _header("sqlite") + "\n" + "\n\n".join(blocks) + "\n"


# -- PostgreSQL ---------------------------------------------------------------------

# Every catalog read is limited to the schema the migrations ran in.
_IN_SCHEMA = "relnamespace = current_schema()::regnamespace"
_PG_TABLES = (
    "SELECT oid, relname, relkind, relpersistence, reloptions, "
    "       pg_get_partkeydef(oid), relispartition, pg_get_expr(relpartbound, oid) "
    f"FROM pg_class WHERE {_IN_SCHEMA} AND relkind IN ('r', 'p') ORDER BY relname"
)
_PG_COLUMNS = (
    "SELECT quote_ident(a.attname), format_type(a.atttypid, a.atttypmod), a.attnotnull, "
    "       pg_get_expr(d.adbin, d.adrelid), a.attidentity, a.attgenerated, "
    "       CASE WHEN a.attcollation <> t.typcollation THEN quote_ident(co.collname) END "
    "FROM pg_attribute a JOIN pg_type t ON t.oid = a.atttypid "
    "LEFT JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum "
    "LEFT JOIN pg_collation co ON co.oid = a.attcollation "
    "WHERE a.attrelid = %s AND a.attnum > 0 AND NOT a.attisdropped ORDER BY a.attnum"
)
# NOT NULL is said on its column; a constraint trigger is listed with the triggers.
_PG_CONSTRAINTS = (
    "SELECT quote_ident(conname), pg_get_constraintdef(oid, true) FROM pg_constraint "
    "WHERE conrelid = %s AND contype NOT IN ('n', 't') "
    "ORDER BY position(contype IN 'pufcx'), conname"
)
# Indexes a constraint owns are that constraint's (PRIMARY KEY, UNIQUE, EXCLUDE).
_PG_INDEXES = (
    "SELECT i.relname, pg_get_indexdef(i.oid, 0, true) FROM pg_index x "
    "JOIN pg_class i ON i.oid = x.indexrelid WHERE x.indrelid = %s AND NOT EXISTS ("
    "    SELECT 1 FROM pg_constraint c WHERE c.conrelid = x.indrelid "
    "    AND c.conindid = x.indexrelid AND c.contype IN ('p', 'u', 'x')) "
    "ORDER BY i.relname"
)
_PG_TRIGGERS = (
    "SELECT tgname, pg_get_triggerdef(oid, true) FROM pg_trigger "
    "WHERE tgrelid = %s AND NOT tgisinternal ORDER BY tgname"
)
# Sequences an identity column owns are said by GENERATED … AS IDENTITY.
_PG_SEQUENCES = (
    "SELECT quote_ident(c.relname), format_type(s.seqtypid, NULL), s.seqstart, "
    "       s.seqincrement, s.seqmin, s.seqmax, s.seqcache, s.seqcycle, "
    "       (SELECT quote_ident(t.relname) || '.' || quote_ident(a.attname) "
    "        FROM pg_depend d JOIN pg_class t ON t.oid = d.refobjid "
    "        JOIN pg_attribute a ON a.attrelid = d.refobjid AND a.attnum = d.refobjsubid "
    "        WHERE d.classid = 'pg_class'::regclass AND d.objid = c.oid "
    "        AND d.deptype = 'a') "
    "FROM pg_class c JOIN pg_sequence s ON s.seqrelid = c.oid "
    f"WHERE c.{_IN_SCHEMA} AND c.relkind = 'S' AND NOT EXISTS ("
    "    SELECT 1 FROM pg_depend d WHERE d.classid = 'pg_class'::regclass "
    "    AND d.objid = c.oid AND d.deptype = 'i') "
    "ORDER BY c.relname"
)
_PG_VIEWS = (
    "SELECT quote_ident(relname), relkind, pg_get_viewdef(oid, true) FROM pg_class "
    f"WHERE {_IN_SCHEMA} AND relkind IN ('v', 'm') ORDER BY relname"
)
_PG_TYPES = (
    "SELECT c.oid, quote_ident(t.typname) FROM pg_type t JOIN pg_class c ON c.oid = t.typrelid "
    f"WHERE c.{_IN_SCHEMA} AND c.relkind = 'c' ORDER BY t.typname"
)
_PG_ENUMS = (
    "SELECT quote_ident(t.typname), array_agg(quote_literal(e.enumlabel) "
    "       ORDER BY e.enumsortorder) "
    "FROM pg_type t JOIN pg_enum e ON e.enumtypid = t.oid "
    "WHERE t.typnamespace = current_schema()::regnamespace GROUP BY t.typname ORDER BY 1"
)
# What the dump does not render: it fails rather than leave an object out.
_PG_UNRENDERED = (
    "SELECT 'relation ' || relname || ' (relkind ' || relkind::text || ')' FROM pg_class "
    f"WHERE {_IN_SCHEMA} AND relkind NOT IN ('r', 'p', 'i', 'I', 'S', 'v', 'm', 'c') "
    "UNION ALL SELECT 'type ' || typname FROM pg_type "
    "WHERE typnamespace = current_schema()::regnamespace AND typtype IN ('d', 'r', 'm') "
    "UNION ALL SELECT 'table ' || inhrelid::regclass::text || ' inherits' FROM pg_inherits i "
    f"JOIN pg_class c ON c.oid = i.inhrelid WHERE c.{_IN_SCHEMA} AND NOT c.relispartition "
    "ORDER BY 1"
)
_PG_EXTENSIONS = (
    "SELECT quote_ident(extname) FROM pg_extension WHERE extname <> 'plpgsql' ORDER BY 1"
)


def _pg_column(row: tuple[Any, ...]) -> str:
    name, type_, notnull, default, identity, generated, collation = row
    words = [name, type_]
    if collation:
        words.append(f"COLLATE {collation}")
    if identity:
        words.append("GENERATED ALWAYS AS IDENTITY" if identity == "a"
                     else "GENERATED BY DEFAULT AS IDENTITY")
    elif generated:
        words.append(f"GENERATED ALWAYS AS ({default}) STORED")
    elif default is not None:
        words.append(f"DEFAULT {default}")
    if notnull:
        words.append("NOT NULL")
    return " ".join(words)


def _pg_table(conn: Any, row: tuple[Any, ...]) -> str:
    oid, name, kind, persistence, options, partkey, is_partition, bound = row
    head = "CREATE UNLOGGED TABLE" if persistence == "u" else "CREATE TABLE"
    items = [_pg_column(c) for c in conn.execute(_PG_COLUMNS, (oid,))]
    items += [f"CONSTRAINT {n} {d}" for n, d in conn.execute(_PG_CONSTRAINTS, (oid,))]
    body = ",\n".join("    " + item for item in items)
    if is_partition:
        parent = conn.execute(
            "SELECT inhparent::regclass::text FROM pg_inherits "
            "WHERE inhrelid = %s", (oid,)).fetchone()[0]
        text = f"{head} {_ident(name)} PARTITION OF {parent} {bound}"
    else:
        text = f"{head} {_ident(name)} (\n{body}\n)"
    if kind == "p":
        text += f" PARTITION BY {partkey}"
    if options:
        text += f" WITH ({', '.join(sorted(options))})"
    return text + ";"


def postgres_schema(conn: Any) -> str:
    """The schema of a migrated PostgreSQL database (a psycopg connection), as
    schema.sql holds it."""
    unrendered = [r[0] for r in conn.execute(_PG_UNRENDERED)]
    if unrendered:
        raise ValueError(f"scripts/schema.py renders no {', '.join(unrendered)}")
    blocks = [f"CREATE EXTENSION {n};" for (n,) in conn.execute(_PG_EXTENSIONS)]
    for name, labels in conn.execute(_PG_ENUMS):
        blocks.append(f"CREATE TYPE {name} AS ENUM ({', '.join(labels)});")
    for oid, name in conn.execute(_PG_TYPES).fetchall():
        fields = [f"    {n} {t}{' COLLATE ' + c if c else ''}"
                  for n, t, _, _, _, _, c in conn.execute(_PG_COLUMNS, (oid,))]
        blocks.append(f"CREATE TYPE {name} AS (\n" + ",\n".join(fields) + "\n);")
    for name, type_, start, step, low, high, cache, cycle, owner in conn.execute(_PG_SEQUENCES):
        text = (f"CREATE SEQUENCE {name} AS {type_} START {start} INCREMENT {step} "
                f"MINVALUE {low} MAXVALUE {high} CACHE {cache}{' CYCLE' if cycle else ''}")
        blocks.append(text + (f" OWNED BY {owner};" if owner else ";"))
    for row in conn.execute(_PG_TABLES).fetchall():
        parts = [_pg_table(conn, row)]
        parts += [d + ";" for _, d in conn.execute(_PG_INDEXES, (row[0],))]
        parts += [d + ";" for _, d in conn.execute(_PG_TRIGGERS, (row[0],))]
        blocks.append("\n".join(parts))
    for name, kind, definition in conn.execute(_PG_VIEWS):
        head = "CREATE MATERIALIZED VIEW" if kind == "m" else "CREATE VIEW"
        blocks.append(f"{head} {name} AS\n{definition.rstrip().rstrip(';')};")
    return _header("postgres") + "\n" + "\n\n".join(blocks) + "\n"


# -- generating from an empty database ------------------------------------------------

def generate_sqlite() -> str:
    """Migrate a new SQLite file the way `headgate migrate` does and dump it."""
    from headgate.store import open_store

    with tempfile.TemporaryDirectory(prefix="headgate-schema-") as folder:
        path = Path(folder) / "schema.db"
        open_store(f"sqlite:///{path}").close()
        conn = sqlite3.connect(path)
        try:
            return sqlite_schema(conn)
        finally:
            conn.close()


@contextmanager
def scratch_postgres(admin_url: str) -> Iterator[str]:
    """A new, empty database on `admin_url`'s server for the length of the block."""
    import psycopg

    name = f"hg_schema_{uuid.uuid4().hex[:12]}"
    parts = urlsplit(admin_url)
    with psycopg.connect(admin_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield urlunsplit((parts.scheme, parts.netloc, "/" + name, parts.query, parts.fragment))
    finally:
        with psycopg.connect(admin_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def generate_postgres(admin_url: str) -> str:
    """Migrate a scratch database on `admin_url`'s server and dump it."""
    import psycopg

    from headgate.store import open_store

    with scratch_postgres(admin_url) as url:
        open_store(url).close()
        with psycopg.connect(url) as conn:
            return postgres_schema(conn)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="scripts/schema.py",
        description="Dump the schema `headgate migrate` makes in an empty database.")
    parser.add_argument("--engine", choices=[*ENGINES, "all"], default="all")
    action = parser.add_mutually_exclusive_group()
    action.add_argument("--write", action="store_true",
                        help="write headgate/db/<engine>/schema.sql")
    action.add_argument("--check", action="store_true",
                        help="exit 1 if a schema.sql differs from the dump")
    parser.add_argument("--pg-url", default=os.environ.get(PG_ENV),
                        help=f"a PostgreSQL server to make a scratch database on "
                             f"(default: ${PG_ENV})")
    args = parser.parse_args(argv)
    engines = ENGINES if args.engine == "all" else (args.engine,)
    if "postgres" in engines and not args.pg_url:
        parser.error(f"PostgreSQL needs a server: --pg-url or {PG_ENV} "
                     "(or --engine sqlite for SQLite alone)")
    makers: dict[str, Callable[[], str]] = {
        "sqlite": generate_sqlite, "postgres": lambda: generate_postgres(args.pg_url)}
    stale = False
    for engine in engines:
        text = makers[engine]()
        target = schema_file(engine)
        current = target.read_text(encoding="utf-8") if target.exists() else None
        shown = target.relative_to(ROOT)
        if args.write:
            if current != text:
                target.write_text(text, encoding="utf-8")
            print(f"{shown}: {'unchanged' if current == text else 'written'}")
        elif args.check:
            stale = stale or current != text
            print(f"{shown}: {'current' if current == text else 'stale, run ' + REGENERATE}")
        else:
            sys.stdout.write(text)
    return 1 if stale else 0


if __name__ == "__main__":
    sys.path.insert(0, str(ROOT))  # this checkout's headgate, whatever is installed
    sys.exit(main())
