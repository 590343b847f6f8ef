#!/bin/sh
# FineStore's Fig. 20/21 variants beside the pipelined scheme, with the
# retraining instrumentation (the `retrains` row/block). Run from the
# repository root after `cargo build --release --bin xstore`.
set -e
out=bench/results/finestore-variants
for w in c a insert; do
  uptime > $out/$w.txt
  target/release/xstore bench --system finestore,finestore-server,finestore-locks \
    --keys 1000000 --workload $w --ops 300000 --json $out/$w.jsonl --append >> $out/$w.txt 2>&1
  uptime >> $out/$w.txt
done
# Retraining frequency and freeze time: few keys loaded, 200 inserts per
# gap between them, so level bins (8 x 16) fill and model retrainings run.
uptime > $out/insert-retrain.txt
target/release/xstore bench --system finestore,finestore-server,finestore-locks \
  --keys 5000 --workload insert --ops 1000000 --json $out/insert-retrain.jsonl >> $out/insert-retrain.txt 2>&1
uptime >> $out/insert-retrain.txt
# The same C and A runs projected onto a CX-5 100 Gb/s cluster (the
# cluster model of docs/projection.md: round trips on the wire, server
# CPU per RPC from the trace), where the server's cores are shared by
# every client and the local fabric's free round trips are not.
for w in c a; do
  uptime > $out/$w-projected.txt
  target/release/xstore bench --system finestore,finestore-server,finestore-locks \
    --keys 1000000 --workload $w --ops 300000 --project cx5-100g \
    --json $out/$w-projected.jsonl >> $out/$w-projected.txt 2>&1
  uptime >> $out/$w-projected.txt
done
