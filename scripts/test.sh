#!/usr/bin/env bash
# Set up (if needed) and run the whole suite: ruff, then pytest (tests/ and e2e/)
# against a throw-away PostgreSQL cluster and Debian's Chromium.
# Arguments go to pytest (e.g. -k admission, -x).
#
# Exported to the tests:
#   HG_TEST_PG        postgresql://headgate@127.0.0.1:PORT/headgate_test
#   HG_TEST_PG_BIN    PostgreSQL bin dir, HG_TEST_PG_DATA its data dir, and
#   HG_TEST_PG_OSUSER the OS user that owns it (for tests that restart the server)
#   HG_TEST_CHROMIUM  /usr/bin/chromium, when present
set -euo pipefail

root="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
"$root/scripts/setup.sh" --test
cd "$root"

log() { printf 'test: %s\n' "$*" >&2; }
die() { printf 'test: error: %s\n' "$*" >&2; exit 1; }

# --- throw-away PostgreSQL -----------------------------------------------------------
pg_bin="$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -n 1)"
[ -x "$pg_bin/initdb" ] || die "no PostgreSQL server found under /usr/lib/postgresql"

pg_super=headgate # database superuser name; auth is trust, so any name works
pg_tmp=""
pg_osuser=""

if [ "$(id -u)" -eq 0 ]; then
    # initdb refuses to run as root.
    if id postgres >/dev/null 2>&1; then
        pg_osuser=postgres
    else
        id hgtest >/dev/null 2>&1 ||
            useradd --system --no-create-home --shell /usr/sbin/nologin hgtest
        pg_osuser=hgtest
    fi
    # Not $TMPDIR: it may sit under /root, which that user cannot reach.
    pg_tmp="$(mktemp -d /tmp/headgate-pg.XXXXXX)"
    chown "$pg_osuser" "$pg_tmp"
    as_pg() { (cd "$pg_tmp" && runuser -u "$pg_osuser" -- "$@"); }
else
    pg_osuser="$(id -un)"
    pg_tmp="$(mktemp -d "${TMPDIR:-/tmp}/headgate-pg.XXXXXX")"
    as_pg() { (cd "$pg_tmp" && "$@"); }
fi
pg_data="$pg_tmp/data"

cleanup() {
    local rc=$?
    if [ -f "$pg_data/postmaster.pid" ]; then
        as_pg "$pg_bin/pg_ctl" -D "$pg_data" stop -m fast -w >/dev/null 2>&1 ||
            log "could not stop PostgreSQL in $pg_data"
    fi
    rm -rf "$pg_tmp"
    exit "$rc"
}
trap cleanup EXIT
# Make Ctrl-C / kill go through the EXIT trap too.
trap 'exit 130' INT
trap 'exit 143' TERM

port="$(.venv/bin/python -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])')"

if ! as_pg "$pg_bin/initdb" -D "$pg_data" -U "$pg_super" -A trust -E UTF8 --no-locale \
    >"$pg_tmp/initdb.log" 2>&1; then
    cat "$pg_tmp/initdb.log" >&2
    die "initdb failed"
fi
as_pg mkdir "$pg_tmp/sock"
# Durability settings are off: this cluster is deleted when the run ends.
cat >>"$pg_data/postgresql.conf" <<EOF
listen_addresses = '127.0.0.1'
port = $port
unix_socket_directories = '$pg_tmp/sock'
fsync = off
synchronous_commit = off
full_page_writes = off
EOF
if ! as_pg "$pg_bin/pg_ctl" -D "$pg_data" -l "$pg_tmp/postgres.log" -w start >/dev/null; then
    cat "$pg_tmp/postgres.log" >&2 || true
    die "PostgreSQL did not start"
fi
"$pg_bin/createdb" -h 127.0.0.1 -p "$port" -U "$pg_super" headgate_test
log "PostgreSQL $(basename "$(dirname "$pg_bin")") on 127.0.0.1:$port"

export HG_TEST_PG="postgresql://$pg_super@127.0.0.1:$port/headgate_test"
export HG_TEST_PG_BIN="$pg_bin" HG_TEST_PG_DATA="$pg_data" HG_TEST_PG_OSUSER="$pg_osuser"
if [ -x /usr/bin/chromium ]; then
    export HG_TEST_CHROMIUM=/usr/bin/chromium
fi

# --- checks --------------------------------------------------------------------------
# Run both even if the first fails, so one run shows every problem.
status=0
.venv/bin/ruff check . || status=$?
.venv/bin/python -m pytest -q "$@" || { rc=$?; [ "$status" -ne 0 ] || status=$rc; }
exit "$status"
