#!/usr/bin/env bash
# The one side-by-side run: headgate beside every Python peer on the peer harness's
# four workloads, the physical limits, WAL bytes per job, HTTP enqueue against its
# ceiling and memory, then one markdown table of ratios with PASS/MISS per target.
#
#   bench/compare.sh                          # everything: N=20000, RUNS=3 (~40 minutes on 2 cores)
#   QUICK=1 bench/compare.sh                  # N=5000, one round, the QUICK_ONLY rows (minutes)
#   AB="HEAD~1 HEAD" ONLY=headgate_pg QUICK=1 bench/compare.sh   # two commits alternated
#   N=500 N_SLOW=200 RUNS=1 bench/compare.sh  # a smoke run of the scripts
#   ONLY="headgate_pg pgqueuer limits_pg" bench/compare.sh
#   SKIP="memory http" SKIP_SLOW=1 bench/compare.sh
#
# Rows (labels for ONLY/SKIP; one OUT/<label>.jsonl each):
#   headgate_sqlite headgate_pg headgate_sqlite_policies headgate_pg_policies
#                   bench/peers_headgate.py, W1-W4 (.venv, HG_SRC snapshot)
#   headgate_pg_c10 headgate_sqlite_c10
#                   W3 with --concurrency 10 (the matched in-flight row vs pgqueuer_default)
#   huey pgqueuer pgqueuer_async pgqueuer_default      /tmp/peers-venv (requirements.txt)
#   chancy          /tmp/peers-venv-chancy (requirements-chancy.txt)
#   dbos_pg dbos_sqlite                                /tmp/peers-venv-dbos
#   oban            /tmp/peers-venv-oban, Python >= 3.12; "skipped: needs Python 3.12"
#                   when no such interpreter is found
#   limits_sqlite limits_pg   bench/limits.py (raw sqlite3 / psycopg on headgate's row)
#   wal_sqlite wal_pg         bench/wal.py (WAL bytes/job, W1-W3, plain and policies)
#   http                      bench/http.py (both stores and the ceiling)
#   memory                    bench/memory.py (worker after MEM_JOBS, serve under load)
# chancy and dbos drain far slower than the others, so their W3 runs at N_SLOW (the
# harness's convention, 5000; W1, W2, W4 at N); SKIP_SLOW=1 leaves their W3 out altogether.
# WAL bytes per job run at N_WAL (5000): the figures move little with N, and the pinned
# WAL makes a run slower the longer it gets (figures in docs/PERFORMANCE.md, Method).
#
# Every harness row runs under bench/cpu_meter.py: its W1-W3 lines gain cpu_us_per_job
# {client, worker, server, total} over the same window as the jobs/s (server: the
# PostgreSQL cluster's processes, for the PostgreSQL rows), and the tables show it.
#
# QUICK=1: N=5000, RUNS=1, N_SLOW=1000 and ONLY=$QUICK_ONLY unless given.
# AB="<ref A> <ref B>": snapshots both commits and runs the selected headgate rows of each
# alternately, A B A B ..., AB_ROUNDS (3) times, the selected peer rows once a round; the
# summary (OUT/ab.md) has each ref's median and min-max of jobs/s and CPU us/job. The
# other rows (limits, wal, http, memory) are not part of an A/B.
#
# Environment: N (20000), N_SLOW (5000), N_WAL (5000), RUNS (3: rounds of the peer rows, runs of the
# others), ONLY, SKIP, SKIP_SLOW, QUICK, AB, AB_ROUNDS, MEM_JOBS (100000), MEM_SERVE (20000), HTTP_SECONDS (8),
# OUT (/tmp/hg-compare/<timestamp>), HG_PEERS_DIR (../shared/peers), HG_REF (HEAD, snapshotted with git archive; "worktree"
# measures the tree as it is), HG_COMPARE_PG (default: the harness's cluster on :5439,
# so headgate and the PostgreSQL peers share one server and its settings).
#
# PostgreSQL: the harness's private cluster is started if it is down and a selected row
# needs it without HG_COMPARE_PG (as its run_new_peers.sh does), and left running.
# Nothing else is started or stopped.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PEERS_DIR=$(cd "${HG_PEERS_DIR:-$ROOT/../shared/peers}" && pwd)
export HG_PEERS_DIR=$PEERS_DIR
HG_PY=${HG_PY:-$ROOT/.venv/bin/python}
V=/tmp/peers-venv
# The rows a quick sitting measures: the open targets' headgate rows and their references.
QUICK_ONLY="headgate_sqlite headgate_pg headgate_pg_c10 huey pgqueuer pgqueuer_async pgqueuer_default"
if [ "${QUICK:-0}" = 1 ]; then
  N=${N:-5000}; RUNS=${RUNS:-1}; N_SLOW=${N_SLOW:-1000}; ONLY=${ONLY:-$QUICK_ONLY}
fi
AB=${AB:-}
AB_ROUNDS=${AB_ROUNDS:-3}
N=${N:-20000}
N_SLOW=${N_SLOW:-5000}
N_WAL=${N_WAL:-5000}
RUNS=${RUNS:-3}
ONLY=${ONLY:-}
SKIP=${SKIP:-}
SKIP_SLOW=${SKIP_SLOW:-0}
MEM_JOBS=${MEM_JOBS:-100000}
MEM_SERVE=${MEM_SERVE:-20000}
HTTP_SECONDS=${HTTP_SECONDS:-8}
OUT=${OUT:-/tmp/hg-compare/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
say() { printf 'compare: %s\n' "$*" >&2; }
want() {  # want <label>: selected by ONLY (if set) and not in SKIP
  { [ -z "$ONLY" ] || grep -qw -- "$1" <<<"$ONLY"; } && ! grep -qw -- "$1" <<<"$SKIP"
}

# --- interpreters and venvs -----------------------------------------------------------
find_python() {  # find_python 3.12 -> a working python3.12 (pyenv shims may not run)
  local c
  for c in "python$1" /root/.pyenv/versions/"$1".*/bin/"python$1" /usr/bin/"python$1"; do
    if command -v "$c" >/dev/null 2>&1 && "$c" -c 'import sys' >/dev/null 2>&1; then
      command -v "$c"; return 0
    fi
  done
  return 1
}
ensure_venv() {  # ensure_venv <venv> <python version> <requirements file>
  local venv=$1 ver=$2 req=$3 py
  [ -x "$venv/bin/python" ] && return 0
  py=$(find_python "$ver") || { say "no Python $ver for $venv"; return 1; }
  say "creating $venv ($py) from $req"
  "$py" -m venv "$venv" && "$venv/bin/pip" install -q -r "$req" >"$OUT/pip-$(basename "$venv").log" 2>&1 \
    || { say "could not create $venv (see $OUT/pip-$(basename "$venv").log)"; rm -rf "$venv"; return 1; }
}
need_base=0; need_chancy=0; need_dbos=0
for l in huey pgqueuer pgqueuer_async pgqueuer_default; do want $l && need_base=1; done
want chancy && need_chancy=1
{ want dbos_pg || want dbos_sqlite; } && need_dbos=1
[ $need_base = 1 ] && { ensure_venv $V 3.11 "$PEERS_DIR/requirements.txt" || exit 1; }
[ $need_chancy = 1 ] && { ensure_venv $V-chancy 3.11 "$PEERS_DIR/requirements-chancy.txt" || exit 1; }
[ $need_dbos = 1 ] && { ensure_venv $V-dbos 3.11 "$PEERS_DIR/requirements-dbos.txt" || exit 1; }
oban_skip=""
if want oban; then
  if ! find_python 3.12 >/dev/null && ! find_python 3.13 >/dev/null && [ ! -x $V-oban/bin/python ]; then
    oban_skip="needs Python 3.12"
  elif [ ! -x $V-oban/bin/python ]; then
    py=$(find_python 3.12 || find_python 3.13)
    say "creating $V-oban ($py)"
    { "$py" -m venv $V-oban && $V-oban/bin/pip install -q -r "$PEERS_DIR/requirements-oban.txt" \
        >"$OUT/pip-peers-venv-oban.log" 2>&1; } || { rm -rf $V-oban; oban_skip="needs Python 3.12 (venv creation failed, see $OUT/pip-peers-venv-oban.log)"; }
  fi
fi

# --- PostgreSQL: the harness's cluster, started if down, left up ----------------------
need_pg=0
for l in headgate_pg headgate_pg_policies headgate_pg_c10 pgqueuer pgqueuer_async \
         pgqueuer_default oban chancy dbos_pg limits_pg wal_pg http memory; do
  want $l && need_pg=1
done
pgstatus=$("$PEERS_DIR/servers.sh" status)
if [ $need_pg = 1 ] && [ -z "${HG_COMPARE_PG:-}" ] && ! grep -q '^postgres pid: .* up' <<<"$pgstatus"; then
  PGBIN=$(ls -d /usr/lib/postgresql/*/bin | sort -V | tail -1)
  mkdir -p /tmp/peers-pg && chown postgres:postgres /tmp/peers-pg
  [ -f /tmp/peers-pg/data/PG_VERSION ] || su postgres -c "$PGBIN/initdb -D /tmp/peers-pg/data -U postgres --auth=trust -E UTF8 >/tmp/peers-pg/initdb.log"
  su postgres -c "$PGBIN/pg_ctl -D /tmp/peers-pg/data -l /tmp/peers-pg/server.log -w -o '-p 5439 -k /tmp/peers-pg -c listen_addresses=127.0.0.1 -c max_connections=100' start" >&2 \
    || { say "could not start the harness's PostgreSQL"; exit 1; }
fi
PG_URL=${HG_COMPARE_PG:-postgresql://${PEERS_PG_USER:-postgres}@${PEERS_PG_HOST:-127.0.0.1}:${PEERS_PG_PORT:-5439}/postgres}
# The server's pid, for its processes' CPU (bench/cpu_meter.py); none: the rows say so.
PG_PM=""
if [ $need_pg = 1 ]; then
  PG_PM=$("$HG_PY" "$ROOT/bench/cpu_meter.py" --find-postmaster "$PG_URL") \
    || say "the PostgreSQL rows get no server CPU (its processes are not on this machine)"
fi

# --- which headgate: a snapshot of one commit, so commits landing meanwhile do not mix --
snapshot() {  # snapshot <ref> <dir>: headgate at <ref> into <dir>; prints its short sha
  local sha
  sha=$(git -C "$ROOT" rev-parse --short --verify "$1^{commit}") || return 1
  rm -rf "$2" && mkdir -p "$2"
  # Migrations live in headgate/db/ now; an older commit also had a top-level db/.
  git -C "$ROOT" archive "$sha" headgate $(git -C "$ROOT" ls-tree --name-only "$sha" db) \
    | tar -x -C "$2" || return 1
  echo "$sha" >"$2/.hg-commit"
  echo "$sha"
}
if [ -n "$AB" ]; then
  read -r AB_A AB_B ab_extra <<<"$AB"
  { [ -n "${AB_B:-}" ] && [ -z "${ab_extra:-}" ]; } || { say "AB needs two refs, got '$AB'"; exit 1; }
  sha_a=$(snapshot "$AB_A" "$OUT/src-a") || { say "bad ref $AB_A"; exit 1; }
  sha_b=$(snapshot "$AB_B" "$OUT/src-b") || { say "bad ref $AB_B"; exit 1; }
  say "A/B: A = $AB_A ($sha_a), B = $AB_B ($sha_b), $AB_ROUNDS rounds"
else
  HG_REF=${HG_REF:-HEAD}
  if [ "$HG_REF" != worktree ]; then
    sha=$(snapshot "$HG_REF" "$OUT/src") || { say "bad HG_REF $HG_REF"; exit 1; }
    export HG_SRC="$OUT/src"
    say "headgate snapshot of $sha in $HG_SRC"
  fi
fi

T0=$(date +%s)
# The 1-minute load average every 10 s (load.txt), summarised under the table.
( while sleep 10; do echo "$(date +%s) $(cut -d' ' -f1 /proc/loadavg)"; done >>"$OUT/load.txt" ) &
sampler=$!
trap 'kill $sampler 2>/dev/null' EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
for f in "$OUT"/*.jsonl "$OUT"/rounds/*.jsonl "$OUT"/[ab]/*.jsonl "$OUT"/[ab]/rounds/*.jsonl; do
  [ -e "$f" ] && rm -f "$f"
done

DEST=$OUT  # where run() writes; an A/B's headgate rows go to OUT/a and OUT/b
run() {  # run <label> <python> <script> [args...]: appends JSON lines to DEST/<label>.jsonl
  local label=$1 py=$2; shift 2
  want "$label" || return 0
  say ">> $label: $*"
  local t; t=$(date +%s)
  echo "$(date -u +%FT%TZ) $label $* | before: $(cut -d' ' -f1-3 /proc/loadavg)" >>"$OUT/loadavg.txt"
  if ! "$py" "$@" >>"$DEST/$label.jsonl" 2> >(tee -a "$DEST/$label.log" >&2); then
    say "!! $label FAILED (see $DEST/$label.log)"
  fi
  echo "$(date -u +%FT%TZ) $label | after: $(cut -d' ' -f1-3 /proc/loadavg) | $(( $(date +%s) - t ))s" >>"$OUT/loadavg.txt"
  say ">> $label took $(( $(date +%s) - t ))s"
}
metered() {  # metered <label> <python> <script> [args...]: run() under bench/cpu_meter.py
  local label=$1 py=$2; shift 2
  local pm=()
  case $label in
    *sqlite*|huey) ;;
    *) [ -n "$PG_PM" ] && pm=(--postmaster "$PG_PM") ;;
  esac
  run "$label" "$py" "$ROOT/bench/cpu_meter.py" "${pm[@]}" "$@"
}
w3_slow() { [ "$SKIP_SLOW" = 1 ] && return 1; return 0; }
HG="$ROOT/bench/peers_headgate.py"
P="--runs $RUNS"

# --- headgate and the peers, in rounds --------------------------------------------------
# Each round runs every row once (--runs 1); RUNS rounds, merged per row afterwards
# (bench/merge_rounds.py). A row's runs then span the same stretch of time as every other
# row's, so the machine's drift moves both sides of a ratio alike.
hg_rows() {
  local P="--runs 1"
# Each engine's policy-free and policies rows back to back: their ratio is a target, and
# the machine's speed drifts within the hour.
metered headgate_sqlite          "$HG_PY" "$HG" --store sqlite --n "$N" $P
metered headgate_sqlite_policies "$HG_PY" "$HG" --store sqlite --policies --n "$N" $P
metered headgate_pg              "$HG_PY" "$HG" --store pg --pg-url "$PG_URL" --n "$N" $P
metered headgate_pg_policies     "$HG_PY" "$HG" --store pg --pg-url "$PG_URL" --policies --n "$N" $P
metered headgate_pg_c10          "$HG_PY" "$HG" --store pg --pg-url "$PG_URL" --concurrency 10 --workloads w3 --n "$N" $P
metered headgate_sqlite_c10      "$HG_PY" "$HG" --store sqlite --concurrency 10 --workloads w3 --n "$N" $P
}

# --- peers (as the harness's run_all.sh / run_new_peers.sh invoke them) -----------------
peer_rows() {
  local P="--runs 1"
metered huey             $V/bin/python "$PEERS_DIR/bench_huey.py" --n "$N" $P
metered pgqueuer         $V/bin/python "$PEERS_DIR/bench_pgqueuer.py" --n "$N" $P
metered pgqueuer_async   $V/bin/python "$PEERS_DIR/bench_pgqueuer.py" --producer async --workloads w1,w2 --n "$N" $P
metered pgqueuer_default $V/bin/python "$PEERS_DIR/bench_pgqueuer.py" --worker-mode default --workloads w3,w4 --n "$N" $P
if want oban && [ -n "$oban_skip" ]; then
  say ">> oban skipped: $oban_skip"
  printf '{"peer": "oban", "skipped": "%s"}\n' "$oban_skip" >"$OUT/oban.jsonl"
else
  metered oban $V-oban/bin/python "$PEERS_DIR/bench_oban.py" --n "$N" $P
fi
metered chancy $V-chancy/bin/python "$PEERS_DIR/bench_chancy.py" --workloads w1,w2,w4 --n "$N" $P
w3_slow && metered chancy $V-chancy/bin/python "$PEERS_DIR/bench_chancy.py" --workloads w3 --n "$N_SLOW" $P
for s in pg sqlite; do
  metered dbos_$s $V-dbos/bin/python "$PEERS_DIR/bench_dbos.py" --store $s --workloads w1,w2,w4 --n "$N" $P
  w3_slow && metered dbos_$s $V-dbos/bin/python "$PEERS_DIR/bench_dbos.py" --store $s --workloads w3 --n "$N_SLOW" $P
done
}

# --- an A/B: two commits' headgate rows alternated, then the summary and nothing else ----
if [ -n "$AB" ]; then
  mkdir -p "$OUT/a" "$OUT/b"
  for round in $(seq 1 "$AB_ROUNDS"); do
    for side in a b; do
      say "== A/B round $round of $AB_ROUNDS: $side"
      export HG_SRC="$OUT/src-$side"; DEST="$OUT/$side"
      hg_rows
    done
    DEST=$OUT
    peer_rows
  done
  "$HG_PY" "$ROOT/bench/merge_rounds.py" "$OUT"/*.jsonl "$OUT"/a/*.jsonl "$OUT"/b/*.jsonl
  "$HG_PY" "$ROOT/bench/compare_table.py" --ab "$OUT" "$AB_A" "$AB_B" | tee "$OUT/ab.md"
  echo
  say "total wall time: $(( $(date +%s) - T0 ))s; raw results in $OUT"
  exit 0
fi

# The raw loops on headgate's table, once a round beside the headgate rows: a target
# measured against them (W1, W2) is then a ratio of one stretch of time too.
limit_rows() {
  local P="--runs 1"
run limits_sqlite "$HG_PY" "$ROOT/bench/limits.py" --store sqlite --n "$N" $P
run limits_pg     "$HG_PY" "$ROOT/bench/limits.py" --store pg --pg-url "$PG_URL" --n "$N" $P
}

for round in $(seq 1 "$RUNS"); do
  say "== round $round of $RUNS"
  hg_rows
  limit_rows
  peer_rows
done
"$HG_PY" "$ROOT/bench/merge_rounds.py" "$OUT"/*.jsonl

# --- WAL volume, HTTP and memory --------------------------------------------------------
run wal_sqlite    "$HG_PY" "$ROOT/bench/wal.py" --store sqlite --n "$N_WAL" $P
run wal_pg        "$HG_PY" "$ROOT/bench/wal.py" --store pg --pg-url "$PG_URL" --n "$N_WAL" $P
run http          "$HG_PY" "$ROOT/bench/http.py" --pg-url "$PG_URL" --seconds "$HTTP_SECONDS" $P
run memory        "$HG_PY" "$ROOT/bench/memory.py" --pg-url "$PG_URL" --jobs "$MEM_JOBS" \
                  --serve-requests "$MEM_SERVE" $P

# --- tables -----------------------------------------------------------------------------
{
  echo "## Results (N=$N, W3 of chancy/dbos at N_SLOW=$N_SLOW, $RUNS rounds of one run each, median (min-max); $(date -u +%Y-%m-%dT%H:%MZ))"
  echo
  files=()
  for f in "$OUT"/headgate_*.jsonl "$OUT"/{huey,pgqueuer,pgqueuer_async,pgqueuer_default,oban,chancy,dbos_pg,dbos_sqlite}.jsonl; do
    [ -s "$f" ] && grep -q '"workload"' "$f" && files+=("$f")
  done
  [ ${#files[@]} -gt 0 ] && "$HG_PY" "$PEERS_DIR/make_table.py" "${files[@]}"
  echo
  echo "## Targets (ratios from this run)"
  echo
  "$HG_PY" "$ROOT/bench/compare_table.py" "$OUT"
} | tee "$OUT/table.md"
echo
say "total wall time: $(( $(date +%s) - T0 ))s; raw results in $OUT"
