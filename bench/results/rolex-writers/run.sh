#!/bin/sh
# ROLEX grown by inserts with the retrainer running: leaves per GET of the
# read-back, retraining time per model, and insert latency while a
# retraining runs against outside one. Run from the repository root.
set -e
CARGO_INCREMENTAL=0 cargo build --release -p rolex --example growth
out=bench/results/rolex-writers/growth.jsonl
for eps in 16 8; do
  ./target/release/examples/growth --keys 100000 --to 1000000 --nodes 1 --threads 2 \
      --epsilon $eps --json $out
done
./target/release/examples/growth --keys 100000 --to 10000000 --nodes 1 --threads 2 \
    --epsilon 16 --json $out
