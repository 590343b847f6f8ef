#!/bin/sh
# Writers during a retraining, with redirection (the default: retraining
# planned without the model's locks, the synonym leaves written meanwhile
# redirected into the new SLT at the swap) and without (`--plan-locked 1`:
# planned under the locks, writers to the model wait for all of it), in
# turns at the same load. Run from the repository root.
set -e
CARGO_INCREMENTAL=0 cargo build --release -p rolex --example growth
out=bench/results/rolex-writers/redirect.jsonl
for to in 1000000 10000000; do
  for locked in 0 1; do
    echo "to $to plan-locked $locked: $(uptime)" >> bench/results/rolex-writers/redirect-load.txt
    ./target/release/examples/growth --keys 100000 --to $to --nodes 1 --threads 2 \
        --epsilon 16 --plan-locked $locked --json $out
  done
done
echo "end: $(uptime)" >> bench/results/rolex-writers/redirect-load.txt
