#!/bin/sh
# HiStore key/value sizes and the breakdown's cost (issue 26). Run from the
# repository root after `cargo build --release --bin xstore`.
# Output: overhead.txt (breakdown-every 0 / 16 / 1), sizes.jsonl + sizes.txt.
set -e
out=bench/results/histore-sizes
x=./target/release/xstore
: > $out/overhead.txt
for rep in 1 2; do
  for e in 0 16 1; do
    echo "== breakdown-every $e (rep $rep) $(uptime | sed 's/.*load/load/')" >> $out/overhead.txt
    $x bench --system histore --keys 100000 --workload a --ops 400000 --breakdown-every $e \
      | grep -E "throughput|latency us" >> $out/overhead.txt
  done
done
: > $out/sizes.jsonl
: > $out/sizes.txt
for w in a c; do
  for kv in "8 32" "20 32" "64 32" "20 8" "20 256" "20 1024"; do
    set -- $kv
    echo "== workload $w key-size $1 value-size $2 $(uptime | sed 's/.*load/load/')" >> $out/sizes.txt
    $x bench --system histore --keys 1000000 --workload $w --ops 400000 \
      --key-size $1 --value-size $2 --json $out/sizes.jsonl --append \
      >> $out/sizes.txt 2>&1 || echo "failed" >> $out/sizes.txt
  done
done
