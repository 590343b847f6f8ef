#!/usr/bin/env bash
# Durability cost: YCSB A, B, C, D over the tcp fabric against a server
# with --durability sync and with none, same machine, one run each; then
# the recovery time of the loaded data directory after a SIGKILL.
# Usage: bench/scripts/durability.sh [KEYS] [OPS] [THREADS] [OUT.jsonl]
set -euo pipefail
keys=${1:-10000000}
ops=${2:-1000000}
threads=${3:-32}
out=${4:-bench/durability.jsonl}
bin=${XSTORE_BIN:-target/release/xstore}
data=$(mktemp -d /tmp/xstore-durability.XXXXXX)
: > "$out"
for mode in none sync; do
  rm -rf "$data"; mkdir -p "$data"
  "$bin" server --listen 127.0.0.1:0 --keys "$keys" --data-dir "$data" --durability "$mode" > "$data.log" 2>&1 &
  pid=$!
  until grep -q '^serving' "$data.log"; do sleep 0.5; kill -0 $pid; done
  url=$(grep -o 'tcp://[0-9.:]*' "$data.log" | head -1)
  for w in c b a d; do
    "$bin" bench --fabric tcp --server "$url" --keys "$keys" --workload "$w" --ops "$ops" \
      --threads "$threads" --warmup 200 --json - 2>/dev/null \
      | python3 -c "import json,sys; r=json.loads(sys.stdin.read()); r['durability']='$mode'; print(json.dumps(r))" >> "$out"
    tail -1 "$out" | python3 -c "import json,sys; r=json.loads(sys.stdin.read()); print(r['durability'], r['workload'], round(r['throughput_ops_per_s']), 'ops/s, p50', r['latency_us']['p50'], 'us, mismatches', r['correctness']['mismatches'])"
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
rm -rf "$data" "$data.log" "$data.log2"
