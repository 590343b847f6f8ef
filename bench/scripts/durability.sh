#!/usr/bin/env bash
# Durability cost (paper Table 3): peak throughput of YCSB A, B, C, D over
# the tcp fabric against a server with --durability sync and with none, on
# one machine in one run; then the recovery time of the loaded data
# directory after a SIGKILL.
#
# "Peak" as in the paper: each mode is measured at several client shapes,
# THREADS:PIPELINE (client threads : writes each keeps in flight, the
# paper's coroutines per thread), and its best is kept. 32:1 is the plain
# closed loop (one request at a time per thread).
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
trap 'kill -9 ${pid:-0} 2>/dev/null || true; rm -rf "$data" "$data.log" "$data.log2"' EXIT
: > "$out"
run=0
for mode in none sync; do
  rm -rf "$data"; mkdir -p "$data"
  "$bin" server --listen 127.0.0.1:0 --keys "$keys" --data-dir "$data" --durability "$mode" > "$data.log" 2>&1 &
  pid=$!
  until grep -q '^serving' "$data.log"; do sleep 0.5; kill -0 $pid; done
  url=$(grep -o 'tcp://[0-9.:]*' "$data.log" | head -1)
  for w in c b a d; do
    for shape in $shapes; do
      t=${shape%:*}; p=${shape#*:}; run=$((run + 1))
      "$bin" bench --fabric tcp --server "$url" --keys "$keys" --workload "$w" --ops "$ops" \
        --threads "$t" --pipeline "$p" --op-seed "$run" --warmup 200 --json - 2>/dev/null \
        | python3 -c "import json,sys; r=json.loads(sys.stdin.read()); r['durability']='$mode'; print(json.dumps(r))" >> "$out"
      tail -1 "$out" | python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print(r['durability'], r['workload'], '$shape', round(r['throughput_ops_per_s']), 'ops/s, p50', r['latency_us']['p50'], 'us, mismatches', r['correctness']['mismatches'])"
    done
  done
  if [ "$mode" = sync ]; then
    kill -9 $pid; wait $pid 2>/dev/null || true
    start=$(date +%s.%N)
    "$bin" server --listen 127.0.0.1:0 --data-dir "$data" > "$data.log2" 2>&1 &
    pid=$!
    until grep -q '^serving' "$data.log2"; do sleep 0.1; done
    end=$(date +%s.%N)
    grep recovered "$data.log2"
    echo "restart to serving: $(python3 -c "print(round($end - $start, 2))") s"
  fi
  kill -INT $pid; wait $pid 2>/dev/null || true
done
