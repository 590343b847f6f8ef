#!/usr/bin/env bash
# redis-benchmark against `xstore resp` (in front of an `xstore server`)
# and against a real redis-server on this machine, side by side, same
# commands, same client settings. Usage:
#   bench/scripts/resp_vs_redis.sh [OUT_DIR] [REQUESTS]
# Needs a release build (cargo build --release --bin xstore) and Redis's
# tools and server (.ci/redis-deps.sh --with-server). Keys are decimal
# numbers (-r: __rand_int__ is 12 digits): the XStore server stores u64
# keys; redis-benchmark's own `-t set` keys (`key:NNN`) are refused there.
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-bench/results/resp-vs-redis}
n=${2:-200000}
bin=target/release/xstore
mkdir -p "$out"
tmp=$(mktemp -d)
pids=()
cleanup() { kill "${pids[@]}" 2>/dev/null || true; rm -rf "$tmp"; }
trap cleanup EXIT

$bin server --listen 127.0.0.1:0 --keys 1000000 > "$tmp/server.log" 2>&1 &
pids+=($!)
until grep -q '^serving' "$tmp/server.log"; do sleep 0.2; done
backend=$(grep -m1 '^listening on tcp://' "$tmp/server.log" | cut -d' ' -f3)
$bin resp --listen 127.0.0.1:0 --backend "$backend" > "$tmp/resp.log" 2>&1 &
pids+=($!)
until grep -q '^resp listening on' "$tmp/resp.log"; do sleep 0.2; done
xport=$(grep -m1 '^resp listening on' "$tmp/resp.log" | awk '{print $4}' | cut -d: -f2)
rport=$((xport + 1))
redis-server --port "$rport" --save '' --appendonly no --daemonize no > "$tmp/redis.log" 2>&1 &
pids+=($!)
until redis-cli -p "$rport" PING >/dev/null 2>&1; do sleep 0.2; done

run() { # label port
  local label=$1 port=$2
  for p in 1 16; do
    redis-benchmark -p "$port" -q -n "$n" -c 50 -P "$p" -t ping | sed "s/^/$label P=$p /"
    for cmd in "SET __rand_int__ __rand_int__" "GET __rand_int__" "MSET __rand_int__ 1 __rand_int__ 2"; do
      # shellcheck disable=SC2086
      redis-benchmark -p "$port" -q -n "$n" -c 50 -P "$p" -r 1000000 $cmd | sed "s/^/$label P=$p /"
    done
  done
}
{
  echo "# $(date -u +%FT%TZ) $(uptime)"
  echo "# bench/scripts/resp_vs_redis.sh $out $n; redis-benchmark -c 50 -n $n"
  run xstore-resp "$xport"
  run redis-server "$rport"
} | tr '\r' '\n' | grep -v '^$' | grep -E '^#|requests per second' | tee "$out/results.txt"
