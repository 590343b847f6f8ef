#!/usr/bin/env bash
# Byte-string XStore's `sync` writes/s before and after its group commit
# (docs/durability.md, "Byte-string XStore"): 100 % updates (zipfian)
# against `xstore server --system xstore-bytes --durability sync` over tcp
# on this machine, with 1 and 8 client threads; a fresh data directory and
# server per run, every answer judged by the bench's ledger.
#
#   cargo build --release --bin xstore
#   bench/results/xstore-bytes-sync/run.sh LABEL [BINARY] [KEYS] [SECONDS] [DATA_PARENT]
#
# LABEL names the outputs (before / after); BINARY defaults to
# target/release/xstore (for "before", a build of the commit before the
# group commit, 4e8dfe5). Writes OUT/LABEL-tN.jsonl and .txt and appends
# the load to OUT/uptime.txt. DATA_PARENT (default: mktemp's, often a
# tmpfs) decides what an fdatasync costs: give a directory on a real disk.
set -euo pipefail
cd "$(dirname "$0")/../../.."
LABEL=${1:?label}
X=${2:-target/release/xstore}
KEYS=${3:-100000}
SECONDS_RUN=${4:-10}
PARENT=${5:-}
OUT=bench/results/xstore-bytes-sync
mkdir -p "$OUT"
for threads in 1 8; do
  { echo "== $LABEL threads $threads"; date -u; uptime; } >>"$OUT/uptime.txt"
  if [ -n "$PARENT" ]; then data=$(mktemp -d -p "$PARENT"); else data=$(mktemp -d); fi
  log=$(mktemp)
  "$X" server --system xstore-bytes --listen 127.0.0.1:0 --keys "$KEYS" --seed 7 \
    --data-dir "$data/d" --durability sync >"$log" 2>/dev/null &
  pid=$!
  url=""
  for _ in $(seq 1 600); do
    if grep -q '^serving' "$log"; then
      url=$(sed -n 's/^listening on \(tcp:.*\)$/\1/p' "$log" | head -1)
      break
    fi
    sleep 0.2
  done
  [ -n "$url" ] || { echo "server did not start" >&2; kill "$pid"; exit 1; }
  txt="$OUT/$LABEL-t$threads.txt"
  { echo "== $LABEL, $threads threads: $(grep '^serving' "$log")"; df -T "$data" | tail -1; } | tee "$txt"
  "$X" bench --system xstore-bytes --fabric tcp --server "$url" --keys "$KEYS" --seed 7 \
    --mix update=100 --seconds "$SECONDS_RUN" --warmup 2000 --threads "$threads" \
    --json "$OUT/$LABEL-t$threads.jsonl" | tee -a "$txt"
  kill -TERM "$pid"
  wait "$pid" || true
  rm -rf "$data" "$log"
  { date -u; uptime; } >>"$OUT/uptime.txt"
done
