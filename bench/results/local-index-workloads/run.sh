#!/bin/sh
# The measurements of summary.md: YCSB A, C and E on every local index
# (lognormal, 1 M keys, 2 threads), and Fig. 9c's timeline (lognormal
# 1 M keys, every 1000th trained: each index grows 1000x, 20 slices).
# Run from the repository root after `cargo build --release --bin xstore`.
set -e
X=target/release/xstore
D=bench/results/local-index-workloads
uptime > $D/load.txt
for w in a c; do
  $X bench --local-index all --workload $w --dataset lognormal --keys 1000000 \
    --threads 2 --ops 1000000 --json $D/ycsb-$w.jsonl > $D/ycsb-$w.txt 2>&1
  uptime >> $D/load.txt
done
$X bench --local-index all --workload e --dataset lognormal --keys 1000000 \
  --threads 2 --ops 200000 --json $D/ycsb-e.jsonl > $D/ycsb-e.txt 2>&1
uptime >> $D/load.txt
$X bench --local-index all --timeline 20 --growth 1000 --dataset lognormal \
  --keys 1000000 --threads 2 --json $D/timeline.jsonl > $D/timeline.txt 2>&1
uptime >> $D/load.txt
