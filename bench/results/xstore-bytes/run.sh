#!/usr/bin/env bash
# Byte-string XStore (issue 28): YCSB A-F with every read judged, at key
# sizes 8/16/32/64 bytes and value sizes 8/64/1024 bytes (over 16 bytes a
# value lives out of line behind a fat pointer: one more READ per GET),
# and the u64 XStore in the same script for the side-by-side. Local
# fabric, 100 k keys, 2 threads. `uptime` before and after is in
# uptime.txt (the machine was shared with other builds: re-run quietly
# for throughput; round trips and bytes per GET do not depend on load).
# Run from the repository root after `cargo build --release --bin xstore`.
set -euo pipefail
dir=bench/results/xstore-bytes
out=$dir/runs.jsonl
: > "$out"
uptime > "$dir/uptime.txt"
x=target/release/xstore
common=(--keys 100000 --ops ${OPS:-100000} --threads 2 --json "$out" --append)
for w in a b c d e f; do
  $x bench "${common[@]}" --system xstore --workload "$w"
done
for k in 8 16 32 64; do
  for v in 8 64 1024; do
    for w in a b c d e f; do
      $x bench "${common[@]}" --system xstore-bytes --key-size "$k" --value-size "$v" --workload "$w"
    done
  done
done
uptime >> "$dir/uptime.txt"
