#!/bin/sh
# The longest gap between answered GETs and between answered SCANs while a
# HiStore primary fails over (issue 27): one group as processes, a mix
# with SCANs, the primary SIGKILLed mid-run, `xstore check` on the history.
# Usage: run.sh XSTORE_BINARY OUT_DIR
set -eu
X=$1
OUT=$2
mkdir -p "$OUT"
D=$(mktemp -d)
"$X" cluster up --system histore --lease-ttl-s 2 --dir "$D/c" > "$OUT/up.txt" 2> "$OUT/up.err" &
UP=$!
for _ in $(seq 1 120); do
  grep -q '^cluster up:' "$OUT/up.txt" 2>/dev/null && break
  sleep 0.5
done
URL=$(head -1 "$OUT/up.txt")
PRIMARY=$(awk '/^server i2 pid/ {print $4}' "$OUT/up.txt")
export XSTORE_ETCD_AUTH_FILE="$D/c/etcd-auth"
"$X" bench --cluster "$URL" --system histore --histore-group g0 \
  --token-file "$D/c/token" --keys 3000 --ops 60000 --warmup 0 \
  --mix read=45,update=45,scan=10 --scan-len 10 \
  --history "$OUT/h.jsonl" > "$OUT/bench.txt" 2>&1 &
BENCH=$!
sleep 8
echo "SIGKILL primary i2 pid $PRIMARY at $(date +%T.%N)" > "$OUT/kill.txt"
kill -KILL "$PRIMARY"
wait "$BENCH" || echo "bench exit $?" >> "$OUT/kill.txt"
"$X" check "$OUT/h.jsonl" > "$OUT/check.txt" 2>&1 || true
uptime > "$OUT/uptime.txt"
kill -TERM "$UP"; wait "$UP" || true
rm -rf "$D"
cat "$OUT/check.txt"
