#!/bin/sh
# HiStore and FineStore beside XStore on cx5-100g, YCSB A-F and the insert
# run, 1 M keys, uniform (issue 24). From the repository root after
# `cargo build --release --bin xstore`.
set -e
D=bench/results/projection-cx5-1m-quiet
for w in a b c d e f insert; do
  echo "$(date -u +%FT%TZ) $w: $(uptime)" >> $D/uptime.txt
  ./target/release/xstore bench --system histore,finestore,xstore --workload $w --dist uniform \
    --keys 1000000 --ops 300000 --project cx5-100g --json $D/cx5-$w.jsonl --append 2>&1 | tail -5
done
