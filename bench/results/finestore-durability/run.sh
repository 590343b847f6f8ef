#!/usr/bin/env bash
# FineStore's durability modes (docs/finestore.md, "Durability"): YCSB A
# (50 % reads, 50 % updates, zipfian) against `xstore server --system
# finestore` over tcp on this machine, once per mode: memory only (no
# --data-dir), none, async, sync. Each mode gets a fresh data directory
# and a fresh server; every read is judged by the bench's ledger.
#
#   cargo build --release --bin xstore
#   bench/results/finestore-durability/run.sh [KEYS] [SECONDS] [THREADS] [OUT_DIR]
#
# Writes OUT_DIR/MODE.jsonl and OUT_DIR/MODE.txt, and OUT_DIR/uptime.txt
# (the machine's load before and after: the figures mean little on a
# loaded machine).
set -euo pipefail
cd "$(dirname "$0")/../../.."
KEYS=${1:-1000000}
SECONDS_RUN=${2:-20}
THREADS=${3:-8}
OUT=${4:-bench/results/finestore-durability}
X=target/release/xstore
mkdir -p "$OUT"
{ date -u; uptime; nproc; } >"$OUT/uptime.txt"
for mode in memory none async sync; do
  data=$(mktemp -d)
  flags=()
  if [ "$mode" != memory ]; then
    flags=(--data-dir "$data/d" --durability "$mode")
  fi
  log=$(mktemp)
  "$X" server --system finestore --listen 127.0.0.1:0 --keys "$KEYS" --seed 7 "${flags[@]}" >"$log" 2>/dev/null &
  pid=$!
  url=""
  for _ in $(seq 1 600); do
    if grep -q '^serving' "$log"; then
      url=$(sed -n 's/^listening on \(tcp:.*\)$/\1/p' "$log" | head -1)
      break
    fi
    sleep 0.5
  done
  [ -n "$url" ] || { echo "server for $mode did not start" >&2; kill "$pid"; exit 1; }
  echo "== $mode: $(grep '^serving' "$log")" | tee "$OUT/$mode.txt"
  "$X" bench --system finestore --fabric tcp --server "$url" --keys "$KEYS" --seed 7 \
    --workload a --seconds "$SECONDS_RUN" --warmup 20000 --threads "$THREADS" \
    --json "$OUT/$mode.jsonl" | tee -a "$OUT/$mode.txt"
  kill -TERM "$pid"
  wait "$pid" || true
  du -sh "$data" | sed 's/^/data dir after the run: /' >>"$OUT/$mode.txt"
  rm -rf "$data" "$log"
done
{ date -u; uptime; } >>"$OUT/uptime.txt"
