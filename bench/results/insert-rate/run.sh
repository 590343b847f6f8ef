#!/usr/bin/env bash
# XStore's Fig. 14b: read throughput of YCSB C clients while a dedicated
# inserter adds fresh keys at a fixed rate (--insert-rate), with one or two
# background training threads. Every read and insert is judged; the
# inserted keys are read back after the run. Local fabric, 1 M keys.
# Run from the repository root after `cargo build --release --bin xstore`:
#   bench/results/insert-rate/run.sh                 # the brief's sweep
#   RATES="1k 2k 5k 10k" TAG=low bench/results/insert-rate/run.sh
# writes runs-TAG-ttN.jsonl (N = training threads) and load-TAG.txt; then
# `python3 bench/results/insert-rate/summary.py` writes table.md.
set -euo pipefail
dir=bench/results/insert-rate
x=target/release/xstore
secs=${SECONDS_PER_RUN:-5}
rates=${RATES:-0 50k 100k 200k max}
tag=${TAG:-main}
uptime > "$dir/load-$tag.txt"
for tt in 1 2; do
  out=$dir/runs-$tag-tt$tt.jsonl
  : > "$out"
  for rate in $rates; do
    echo "== train-threads $tt insert-rate $rate" >&2
    $x bench --system xstore --keys 1000000 --workload c --threads 2 \
      --seconds "$secs" --insert-rate "$rate" --train-threads "$tt" \
      --json "$out" --append > /dev/null
    uptime >> "$dir/load-$tag.txt"
  done
done
