#!/usr/bin/env bash
# `xstore shell --pipe` against the server's own write rate (issue 28: bulk
# loading "at the server's write rate"). One release server on loopback
# (XStore, 100 k keys loaded); then, against it:
#   1. --pipe of N tab-separated pairs (writes in flight, 128 at once);
#   2. the same pairs as `put K V` lines through the scripted shell (one
#      write at a time, each answered before the next: the old way);
#   3. `xstore bench --workload insert` with one thread, --pipeline 128 and
#      --pipeline 1: the server's insert rate for one client, the same way
#      in flight and not.
# Run from the repository root after `cargo build --release --bin xstore`:
#   bench/results/shell-pipe/run.sh        # writes results.txt here
# (XSTORE=target/debug/xstore PAIRS=50000 OUT=results-debug.txt for a debug binary)
set -euo pipefail
dir=bench/results/shell-pipe
x=${XSTORE:-target/release/xstore}
n=${PAIRS:-200000}
out=$dir/${OUT:-results.txt}
log=$(mktemp)
$x server --listen 127.0.0.1:0 --keys 100000 --seed 42 > "$log" 2>&1 &
server=$!
trap 'kill $server 2>/dev/null; rm -f "$log"' EXIT
for _ in $(seq 1 600); do grep -q serving "$log" && break; sleep 0.1; done
url=$(grep -o 'tcp://[0-9.:]*' "$log" | head -1)
{
  echo "# $(date -u +%FT%TZ) $(uptime)"
  echo "## 1. xstore shell $url --pipe ($n pairs)"
  seq 1 "$n" | awk '{print $1 "\t" $1 * 2}' | $x shell "$url" --pipe
  echo "## 2. the same pairs as put lines through the scripted shell, one at a time"
  start=$(date +%s.%N)
  seq 1 "$n" | awk '{print "put " $1 " " $1 * 3}' | $x shell "$url" | grep -vc '^OK$' || true
  end=$(date +%s.%N)
  awk -v n="$n" -v s="$start" -v e="$end" 'BEGIN { printf "put lines: %d in %.2f s (%.0f pairs/s)\n", n, e - s, n / (e - s) }'
  for p in 128 1; do
    echo "## 3. xstore bench --server --workload insert --threads 1 --pipeline $p --ops $n"
    $x bench --fabric tcp --server "$url" --keys 100000 --seed 42 --op-seed $((7 + p)) --workload insert \
      --threads 1 --pipeline "$p" --ops "$n" --json - 2>/dev/null |
      python3 -c 'import json,sys; v=json.load(sys.stdin); print("bench insert throughput: %.0f ops/s" % v["throughput_ops_per_s"])'
  done
  echo "# after: $(uptime)"
} | tee "$out"
