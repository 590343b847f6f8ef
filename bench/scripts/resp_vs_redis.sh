#!/usr/bin/env bash
# redis-benchmark against `xstore resp` and against a real redis-server
# on this machine, side by side, same commands, same client settings.
# Usage:
#   bench/scripts/resp_vs_redis.sh [OUT_DIR] [REQUESTS]
# Environment:
#   BACKEND  embedded:NAME (default embedded:xstore: the design loaded in
#            the front end's process, as Redis holds its data in its own;
#            the fair comparison) or `server` (an `xstore server` reached
#            over tcp: one more network hop per request)
#   LOOPS    the front end's event loops (default 1, as Redis's one thread)
#   TAG      appended to the results file's name (results-TAG.txt)
# Needs a release build (cargo build --release --bin xstore) and Redis's
# tools and server (.ci/redis-deps.sh --with-server). Keys: the -r form
# (`SET __rand_int__ __rand_int__`: 12-digit numbers) for every store;
# a store of byte strings (INFO's key_bytes other than 8..8) also runs
# redis-benchmark's own `-t set,get,mset` (keys `key:NNN`).
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-bench/results/resp-vs-redis}
n=${2:-200000}
backend=${BACKEND:-embedded:xstore}
loops=${LOOPS:-1}
bin=target/release/xstore
mkdir -p "$out"
tmp=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

keys=()
if [ "$backend" = server ]; then
  $bin server --listen 127.0.0.1:0 --keys 1000000 > "$tmp/server.log" 2>&1 &
  pids+=($!)
  until grep -q '^serving' "$tmp/server.log"; do sleep 0.2; done
  backend=$(grep -m1 '^listening on tcp://' "$tmp/server.log" | cut -d' ' -f3)
else
  keys=(--keys 1000000)
fi
$bin resp --listen 127.0.0.1:0 --backend "$backend" "${keys[@]}" --loops "$loops" > "$tmp/resp.log" 2>&1 &
xpid=$!
pids+=($xpid)
until grep -q '^resp listening on' "$tmp/resp.log"; do sleep 0.2; done
xport=$(grep -m1 '^resp listening on' "$tmp/resp.log" | awk '{print $4}' | cut -d: -f2)
rport=$((xport + 1))
redis-server --port "$rport" --save '' --appendonly no --daemonize no > "$tmp/redis.log" 2>&1 &
rpid=$!
pids+=($rpid)
until redis-cli -p "$rport" PING >/dev/null 2>&1; do sleep 0.2; done
bytes=$(redis-cli -p "$xport" INFO | tr -d '\r' | grep -m1 '^key_bytes:' | cut -d: -f2)

# CPU time (ns) the process has had, all its threads: a figure the
# machine's load does not move much (throughput on a shared machine does).
cpu_ns() { # pid
  local t=0 v
  for f in /proc/"$1"/task/*/schedstat; do
    read -r v _ < "$f" || v=0
    t=$((t + v))
  done
  echo "$t"
}
bench() { # label port pid P args...
  local label=$1 port=$2 pid=$3 p=$4 before after line
  shift 4
  before=$(cpu_ns "$pid")
  line=$(redis-benchmark -p "$port" -q -n "$n" -c 50 -P "$p" "$@" | tr '\r' '\n' | grep 'requests per second' | tail -1)
  after=$(cpu_ns "$pid")
  echo "$label P=$p $line, server_cpu_ns_per_req=$(( (after - before) / n ))"
}
run() { # label port pid
  local label=$1 port=$2 pid=$3
  for p in 1 16; do
    for t in ping_inline ping_mbulk; do bench "$label" "$port" "$pid" "$p" -t "$t"; done
    bench "$label" "$port" "$pid" "$p" -r 1000000 SET __rand_int__ __rand_int__
    bench "$label" "$port" "$pid" "$p" -r 1000000 GET __rand_int__
    bench "$label" "$port" "$pid" "$p" -r 1000000 MSET __rand_int__ 1 __rand_int__ 2
    if [ "$bytes" != "8..8" ]; then
      for t in set get mset; do bench "$label" "$port" "$pid" "$p" -r 1000000 -t "$t"; done
    fi
  done
}
file="$out/results${TAG:+-$TAG}.txt"
{
  echo "# $(date -u +%FT%TZ) $(uptime)"
  echo "# BACKEND=${BACKEND:-embedded:xstore} LOOPS=$loops bench/scripts/resp_vs_redis.sh $out $n; redis-benchmark -c 50 -n $n; store key_bytes $bytes"
  run xstore-resp "$xport" "$xpid"
  run redis-server "$rport" "$rpid"
} | tee "$file"
