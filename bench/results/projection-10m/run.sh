#!/bin/sh
# The headline commands at 10 M keys (YCSB C, A, B, D uniform on
# cx4-100g). From the repository root after `cargo build --release --bin
# xstore`; `sh run.sh c a b d` (C ran first, then A, B, D).
set -e
D=${D:-bench/results/projection-10m}
for w in ${@:-c a b d}; do
  echo "$(date -u +%FT%TZ) cx4-$w: $(uptime)" >> $D/uptime.txt
  ./target/release/xstore bench --system xstore,server-centric,tree-cache,whole-tree-cache \
    --workload $w --dist uniform --keys 10000000 --ops 300000 --project cx4-100g \
    --json $D/cx4-$w.jsonl --append 2>&1 | tee -a $D/cx4-$w.txt | tail -7
done
