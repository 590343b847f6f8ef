#!/bin/sh
# The validation runs of issue 24 (bench/README.md, "Projection"): every
# run traces its first 100 k measured operations and projects them.
# 1 M keys (not 10 M: the machine was shared by eight sessions). Run from
# the repository root after `cargo build --release --bin xstore`; each
# run's `uptime` goes to uptime.txt beside its JSON lines.
set -e
X=./target/release/xstore
D=bench/results/projection-1m
K="--keys 1000000 --ops 300000"
run() {
  out=$1; shift
  echo "$(date -u +%FT%TZ) $out: $(uptime)" >> $D/uptime.txt
  $X bench "$@" --json $D/$out.jsonl --append 2>&1 | tee -a $D/$out.txt | grep -v '^ *$' | tail -8
}
# XStore's paper (cx4-100g testbed: 15 client machines x 24 threads, 24 server cores).
for w in c a b d; do
  run cx4-$w --system xstore,server-centric,tree-cache,whole-tree-cache --workload $w --dist uniform $K --project cx4-100g
done
run cx4-c-zipfian --system xstore,server-centric,tree-cache,whole-tree-cache --workload c --dist zipfian $K --project cx4-100g
# ROLEX's paper (cx5-100g; 3 compute nodes x 24 threads; XStore-D's memory node has 1 core).
for w in a b c d e f; do
  run cx5-rolex-$w --system rolex,xstore-d --workload $w --dist uniform $K --project cx5-100g --clients 3x24
done
run cx5-rolex-insert --system rolex,xstore-d --workload insert $K --project cx5-100g --clients 3x24
# FineStore's paper (cx5-100g; 1 server, 3 clients).
for w in c a; do
  run cx5-finestore-$w --system finestore,xstore --workload $w --dist uniform $K --project cx5-100g --clients 3x24
done
run cx5-finestore-insert --system finestore,xstore --workload insert $K --project cx5-100g --clients 3x24
