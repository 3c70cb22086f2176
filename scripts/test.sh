#!/usr/bin/env bash
# Set up (if needed) and run the whole suite: ruff, then pytest (tests/ and e2e/)
# against a throw-away PostgreSQL cluster and Debian's Chromium, in two phases: the
# tests marked `serial` in one process, then the rest in two (pytest-xdist;
# HG_TEST_PROCESSES=1 runs them in one, for debugging). Every step runs even if an
# earlier one failed; the exit code is the first failure's.
# Arguments go to both pytest phases (e.g. -k admission, -x, a test path); a -m
# expression is combined with each phase's own. Not -n: phase 1 must stay one process.
# A phase that selects no test is no failure.
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

processes="${HG_TEST_PROCESSES:-2}"
[[ "$processes" =~ ^[1-9][0-9]*$ ]] || die "HG_TEST_PROCESSES must be a positive integer"
# pytest keeps only the last -m, so the arguments' own is taken out and combined with
# each phase's (-m "not soak" must not bring the serial tests back into phase 2).
marks=""
args=()
while [ "$#" -gt 0 ]; do
    case "$1" in
        -m) [ "$#" -ge 2 ] || die "-m needs an expression"; marks="$2"; shift 2 ;;
        -m?*) marks="${1#-m}"; shift ;;
        *) args+=("$1"); shift ;;
    esac
done
selecting() {
    if [ -n "$marks" ]; then printf '(%s) and (%s)' "$1" "$marks"; else printf '%s' "$1"; fi
}

# --- throw-away PostgreSQL -----------------------------------------------------------
pg_bin="$(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V | tail -n 1)"
[ -x "$pg_bin/initdb" ] || die "no PostgreSQL server found under /usr/lib/postgresql"

pg_super=headgate # database superuser name; auth is trust, so any name works
pg_tmp=""
pg_osuser=""
# The cluster lives on a RAM file system when there is one with room: most tests create
# a database of their own (CREATE DATABASE writes some three hundred files, migrating
# more), and file creation on a disk's file system made that a third of a second a
# test. The server is the same real PostgreSQL; only files that fsync=off already
# left undurable move.
ram_dir=""
if [ -d /dev/shm ] && [ -w /dev/shm ] && [ "$(stat -f -c %T /dev/shm 2>/dev/null)" = tmpfs ] &&
    [ "$(df -Pk /dev/shm | awk 'NR == 2 { print $4 }')" -ge $((4 * 1024 * 1024)) ]; then
    ram_dir=/dev/shm
fi

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
    pg_tmp="$(mktemp -d "${ram_dir:-/tmp}/headgate-pg.XXXXXX")"
    chown "$pg_osuser" "$pg_tmp"
    as_pg() { (cd "$pg_tmp" && runuser -u "$pg_osuser" -- "$@"); }
else
    pg_osuser="$(id -un)"
    pg_tmp="$(mktemp -d "${ram_dir:-${TMPDIR:-/tmp}}/headgate-pg.XXXXXX")"
    as_pg() { (cd "$pg_tmp" && "$@"); }
fi
pg_data="$pg_tmp/data"
py_cache=""

cleanup() {
    local rc=$?
    if [ -f "$pg_data/postmaster.pid" ]; then
        as_pg "$pg_bin/pg_ctl" -D "$pg_data" stop -m fast -w >/dev/null 2>&1 ||
            log "could not stop PostgreSQL in $pg_data"
    fi
    rm -rf "$pg_tmp"
    [ -z "$py_cache" ] || rm -rf "$py_cache"
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
log "PostgreSQL $(basename "$(dirname "$pg_bin")") on 127.0.0.1:$port, data in $pg_data"

export HG_TEST_PG="postgresql://$pg_super@127.0.0.1:$port/headgate_test"
export HG_TEST_PG_BIN="$pg_bin" HG_TEST_PG_DATA="$pg_data" HG_TEST_PG_OSUSER="$pg_osuser"
if [ -x /usr/bin/chromium ]; then
    export HG_TEST_CHROMIUM=/usr/bin/chromium
fi
# Bytecode for this run, in a directory of its own: the suite starts hundreds of Python
# processes (servers, workers, CLI calls), and with PYTHONDONTWRITEBYTECODE set (as some
# environments do) each compiled the checkout's modules again, a third of a second of
# CPU each. Nothing is written into the checkout; the directory goes with the run.
py_cache="$(mktemp -d "${ram_dir:-${TMPDIR:-/tmp}}/headgate-pycache.XXXXXX")"
export PYTHONPYCACHEPREFIX="$py_cache"
unset PYTHONDONTWRITEBYTECODE

# --- checks --------------------------------------------------------------------------
# Run every step even if one fails, so one run shows every problem.
status=0
empty=0 # phases that selected no test (pytest's exit code 5)
failed() { [ "$status" -ne 0 ] || status=$1; }
phase() {
    local rc=0
    # The slowest tests of each phase are listed: the budget for the whole suite is 15 min.
    .venv/bin/python -m pytest -q --durations=15 "$@" || rc=$?
    if [ "$rc" -eq 5 ]; then
        empty=$((empty + 1))
    elif [ "$rc" -ne 0 ]; then
        failed "$rc"
    fi
}
.venv/bin/ruff check . || failed $?
# Phase 1, alone: tests that restart the shared PostgreSQL cluster (another process's
# tests would fail), count cluster-wide figures (transaction ids) or keep tight timing;
# each says why.
log "phase 1: tests marked serial, one process"
phase -m "$(selecting serial)" "${args[@]}"
# Phase 2: most tests wait on workers, servers and browsers, not on the CPU. A file's
# tests stay in one process (--dist loadfile), so its module fixtures and servers are
# built once.
log "phase 2: the other tests, $processes process(es)"
if [ "$processes" -gt 1 ]; then
    phase -n "$processes" --dist loadfile -m "$(selecting "not serial")" "${args[@]}"
else
    phase -m "$(selecting "not serial")" "${args[@]}"
fi
# Arguments that select nothing in either phase (a mistyped -k) are still an error.
[ "$empty" -lt 2 ] || failed 5
exit "$status"
