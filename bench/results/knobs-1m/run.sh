#!/usr/bin/env bash
# The workload knobs at 1 M keys (XStore, local fabric): every read judged.
# Run from the repository root after `cargo build --release --bin xstore`.
set -euo pipefail
out=bench/results/knobs-1m/runs.jsonl
: > "$out"
x=target/release/xstore
common=(--keys 1000000 --ops 1000000 --threads 2 --json "$out" --append)
$x bench "${common[@]}" --workload c --dist zipfian --zipf-theta 0.5
$x bench "${common[@]}" --workload c --dist zipfian --zipf-theta 0.9
$x bench "${common[@]}" --workload c --dist zipfian-ordered --zipf-theta 0.99
$x bench "${common[@]}" --workload c --dist hotspot --hot-fraction 0.01 --hot-ops 1
$x bench "${common[@]}" --workload prod1
$x bench "${common[@]}" --workload prod2
$x bench "${common[@]}" --workload e --scan-len 100
$x bench "${common[@]}" --workload a --mix read=50,update=30,insert=10,scan=5,rmw=5 --scan-len uniform:1..10
