#!/usr/bin/env bash
# headgate beside the Python peers, side by side, on the peer harness's four workloads,
# then one markdown table of issue 8's targets with headgate/peer ratios and PASS/MISS.
#
#   bench/compare.sh                         # N=20000, RUNS=3: peers needed by the targets + headgate
#   N=5000 RUNS=1 bench/compare.sh           # quicker
#   PEERS=readme bench/compare.sh            # do not re-run the peers: README figures, labelled so
#   PEERS=all bench/compare.sh               # also rq and procrastinate (as run_all.sh does)
#   HEADGATE="sqlite sqlite+policies" bench/compare.sh
#
# Environment (the same N/RUNS knobs as the peers' run_all.sh):
#   N, RUNS        jobs per workload and runs per workload (20000, 3)
#   PEERS          targets (huey, pgqueuer, pgqueuer async producer, pgqueuer default worker)
#                  | all | readme | a space-separated list of labels below
#   HEADGATE       headgate variants: "sqlite pg sqlite+policies pg+policies"
#   OUT            raw JSON lines, logs and table.md (default /tmp/hg-compare/<timestamp>)
#   HG_PEERS_DIR   the peer harness (default ../shared/peers next to the repository)
#   PEERS_PY       the peers' interpreter (default /tmp/peers-venv/bin/python, created from
#                  the harness's requirements.txt when missing)
#   HG_REF         headgate commit to measure (default HEAD, snapshotted with git archive
#                  into OUT/src); "worktree" measures the working tree as it is
#   HG_COMPARE_PG  PostgreSQL server URL for headgate (default: the peers' own cluster, so
#                  headgate and the PostgreSQL peers share one server and its settings)
#
# Servers: the peers' servers.sh starts its private loopback PostgreSQL (5439) and Redis
# (6390) if they are not up; this script stops them at the end only if it started them.
set -uo pipefail
ROOT=$(cd "$(dirname "$0")/.." && pwd)
PEERS_DIR=$(cd "${HG_PEERS_DIR:-$ROOT/../shared/peers}" && pwd)
export HG_PEERS_DIR=$PEERS_DIR
HG_PY=${HG_PY:-$ROOT/.venv/bin/python}
PEERS_PY=${PEERS_PY:-/tmp/peers-venv/bin/python}
N=${N:-20000}
RUNS=${RUNS:-3}
PEERS=${PEERS:-targets}
HEADGATE=${HEADGATE:-sqlite pg sqlite+policies pg+policies}
OUT=${OUT:-/tmp/hg-compare/$(date +%Y%m%d-%H%M%S)}
mkdir -p "$OUT"
say() { printf 'compare: %s\n' "$*" >&2; }

case "$PEERS" in
  targets) PEERS="huey pgqueuer pgqueuer_async pgqueuer_default" ;;
  all) PEERS="huey rq procrastinate pgqueuer procrastinate_async pgqueuer_async pgqueuer_default" ;;
  readme|none) PEERS="" ;;
esac

needs_pg=0; needs_redis=0
for p in $PEERS; do
  case "$p" in pg*|procrastinate*) needs_pg=1 ;; rq*) needs_redis=1 ;; esac
done
for h in $HEADGATE; do case "$h" in pg*) needs_pg=1 ;; esac; done

# --- the peers' interpreter ---------------------------------------------------------
if [ -n "$PEERS" ] && [ ! -x "$PEERS_PY" ]; then
  venv=$(dirname "$(dirname "$PEERS_PY")")
  say "creating $venv from $PEERS_DIR/requirements.txt"
  python3.11 -m venv "$venv" && "$venv/bin/pip" install -q -r "$PEERS_DIR/requirements.txt" \
    || { say "could not create the peers' venv"; exit 1; }
fi

# --- servers (servers.sh starts PostgreSQL and Redis together) -----------------------
started=0
if [ $needs_pg = 1 ] || [ $needs_redis = 1 ]; then
  if ! command -v redis-server >/dev/null 2>&1; then
    say "installing redis-server (servers.sh starts it beside PostgreSQL)"
    apt-get install -y redis-server >"$OUT/apt-redis.log" 2>&1 \
      || { apt-get update >/dev/null 2>&1 && apt-get install -y redis-server >"$OUT/apt-redis.log" 2>&1; } \
      || { say "could not install redis-server (see $OUT/apt-redis.log)"; exit 1; }
  fi
  if ! "$PEERS_DIR/servers.sh" check >/dev/null 2>&1; then
    "$PEERS_DIR/servers.sh" start >&2 && started=1
  fi
fi
cleanup() { if [ "$started" = 1 ]; then "$PEERS_DIR/servers.sh" stop >&2; fi; }
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
PG_URL=${HG_COMPARE_PG:-postgresql://${PEERS_PG_USER:-postgres}@${PEERS_PG_HOST:-127.0.0.1}:${PEERS_PG_PORT:-5439}/postgres}

# --- which headgate: a snapshot of one commit (HG_REF, default HEAD), so that commits
# landing during a long run do not mix versions; HG_REF=worktree uses the live tree.
HG_REF=${HG_REF:-HEAD}
if [ "$HG_REF" != worktree ] && [ -n "$HEADGATE" ]; then
  sha=$(git -C "$ROOT" rev-parse --short "$HG_REF") || { say "bad HG_REF $HG_REF"; exit 1; }
  rm -rf "$OUT/src" && mkdir -p "$OUT/src"
  git -C "$ROOT" archive "$sha" headgate | tar -x -C "$OUT/src"
  echo "$sha" >"$OUT/src/.hg-commit"
  export HG_SRC="$OUT/src"
  say "headgate snapshot of $sha in $HG_SRC"
fi

T0=$(date +%s)
# The machine may be shared: the 1-minute load average is sampled every 10 s into
# load.txt and summarised under the table (a figure taken under load is not a clean one).
( while sleep 10; do echo "$(date +%s) $(cut -d' ' -f1 /proc/loadavg)"; done >>"$OUT/load.txt" ) &
sampler=$!
cleanup() {
  kill "$sampler" 2>/dev/null
  if [ "$started" = 1 ]; then "$PEERS_DIR/servers.sh" stop >&2; fi
}
run() {  # run <label> <python> <script> [args...]
  local label=$1 py=$2; shift 2
  say ">> $label: $*"
  local t; t=$(date +%s)
  if ! "$py" "$@" --n "$N" --runs "$RUNS" >"$OUT/$label.jsonl" 2> >(tee "$OUT/$label.log" >&2); then
    say "!! $label FAILED (see $OUT/$label.log)"
  fi
  say ">> $label took $(( $(date +%s) - t ))s"
}

# --- headgate ------------------------------------------------------------------------
for h in $HEADGATE; do
  store=${h%%+*}
  args=(--store "$store")
  [ "$store" = pg ] && args+=(--pg-url "$PG_URL")
  case "$h" in *+policies) args+=(--policies) ;; esac
  run "headgate_${h/+/_}" "$HG_PY" "$ROOT/bench/peers_headgate.py" "${args[@]}"
done

# --- peers (the same invocations as run_all.sh) ---------------------------------------
for p in $PEERS; do
  case "$p" in
    huey) run huey "$PEERS_PY" "$PEERS_DIR/bench_huey.py" ;;
    rq) run rq "$PEERS_PY" "$PEERS_DIR/bench_rq.py" ;;
    procrastinate) run procrastinate "$PEERS_PY" "$PEERS_DIR/bench_procrastinate.py" ;;
    pgqueuer) run pgqueuer "$PEERS_PY" "$PEERS_DIR/bench_pgqueuer.py" ;;
    procrastinate_async) run procrastinate_async "$PEERS_PY" "$PEERS_DIR/bench_procrastinate.py" \
                           --producer async --workloads w1,w2 ;;
    pgqueuer_async) run pgqueuer_async "$PEERS_PY" "$PEERS_DIR/bench_pgqueuer.py" \
                      --producer async --workloads w1,w2 ;;
    pgqueuer_default) run pgqueuer_default "$PEERS_PY" "$PEERS_DIR/bench_pgqueuer.py" \
                        --worker-mode default --workloads w3,w4 ;;
    *) say "unknown peer label $p (skipped)" ;;
  esac
done

# --- tables --------------------------------------------------------------------------
{
  echo "## Results (N=$N, $RUNS runs each, median (min-max); $(date -u +%Y-%m-%dT%H:%MZ))"
  echo
  shopt -s nullglob
  files=("$OUT"/headgate_*.jsonl)
  for p in $PEERS; do [ -s "$OUT/$p.jsonl" ] && files+=("$OUT/$p.jsonl"); done
  "$HG_PY" "$PEERS_DIR/make_table.py" "${files[@]}"
  echo
  echo "## Issue 8 targets"
  echo
  "$HG_PY" "$ROOT/bench/compare_table.py" "$OUT"
} | tee "$OUT/table.md"
echo
say "total wall time: $(( $(date +%s) - T0 ))s; raw results in $OUT"
