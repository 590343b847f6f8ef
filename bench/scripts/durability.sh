#!/usr/bin/env bash
# Durability cost (paper Table 3): peak throughput of YCSB A, B, C, D over
# the tcp fabric against a server with --durability sync and one with
# none, on one machine in one run; then the recovery time of the sync
# server's data directory after a SIGKILL.
#
# "Peak" as in the paper: each mode is measured at several client shapes,
# THREADS:PIPELINE (client threads : writes each keeps in flight, the
# paper's coroutines per thread), and its best is kept. 32:1 is the plain
# closed loop (one request at a time per thread).
#
# Both servers run side by side and every shape is measured on one right
# after the other (alternating which goes first), so that the machine's
# drift over the run (a shared VM) does not masquerade as a durability
# cost.
#
# Usage: bench/scripts/durability.sh [KEYS] [OPS] [SHAPES] [OUT.jsonl]
#   e.g. bench/scripts/durability.sh 10000000 2000000 "32:1 8:16 16:32 32:16"
# Every run gets its own --op-seed so repeated D runs insert fresh keys.
set -euo pipefail
keys=${1:-10000000}
ops=${2:-1000000}
shapes=${3:-"32:1 8:16 16:32 32:16"}
out=${4:-bench/durability.jsonl}
bin=${XSTORE_BIN:-target/release/xstore}
data=$(mktemp -d /tmp/xstore-durability.XXXXXX)
declare -A pid url
trap 'kill -9 ${pid[none]:-0} ${pid[sync]:-0} ${rpid:-0} 2>/dev/null || true; rm -rf "$data"' EXIT
: > "$out"
for mode in none sync; do
  mkdir -p "$data/$mode"
  "$bin" server --listen 127.0.0.1:0 --keys "$keys" --data-dir "$data/$mode" --durability "$mode" > "$data/$mode.log" 2>&1 &
  pid[$mode]=$!
  until grep -q '^serving' "$data/$mode.log"; do sleep 0.5; kill -0 ${pid[$mode]}; done
  url[$mode]=$(grep -o 'tcp://[0-9.:]*' "$data/$mode.log" | head -1)
done
run=0
for w in c b a d; do
  for shape in $shapes; do
    t=${shape%:*}; p=${shape#*:}; run=$((run + 1))
    if [ $((run % 2)) = 1 ]; then order="none sync"; else order="sync none"; fi
    for mode in $order; do
      "$bin" bench --fabric tcp --server "${url[$mode]}" --keys "$keys" --workload "$w" --ops "$ops" \
        --threads "$t" --pipeline "$p" --op-seed "$run" --warmup 200 --json - 2>/dev/null \
        | python3 -c "import json,sys; r=json.loads(sys.stdin.read()); r['durability']='$mode'; print(json.dumps(r))" >> "$out"
      tail -1 "$out" | python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print(r['durability'], r['workload'], '$shape', round(r['throughput_ops_per_s']), 'ops/s, p50', r['latency_us']['p50'], 'us, mismatches', r['correctness']['mismatches'])"
    done
  done
done
kill -INT ${pid[none]}; wait ${pid[none]} 2>/dev/null || true
kill -9 ${pid[sync]}; wait ${pid[sync]} 2>/dev/null || true
start=$(date +%s.%N)
"$bin" server --listen 127.0.0.1:0 --data-dir "$data/sync" > "$data/restart.log" 2>&1 &
rpid=$!
until grep -q '^serving' "$data/restart.log"; do sleep 0.1; kill -0 $rpid; done
end=$(date +%s.%N)
grep recovered "$data/restart.log"
echo "restart to serving: $(python3 -c "print(round($end - $start, 2))") s"
kill -INT $rpid; wait $rpid 2>/dev/null || true
