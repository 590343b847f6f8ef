#!/usr/bin/env bash
# The XModel at 200 keys per sub-model over every size and synthetic set,
# and over the real sets at 200, 100 and 50 keys per sub-model; one JSON
# object per run, with the command that made it, in OUT.
#   bench/scripts/model_sweep.sh [OUT]     (default bench/results/model-sweep.jsonl)
# The real sets must be installed first: scripts/datasets.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
out=${1:-bench/results/model-sweep.jsonl}
cargo build --release --quiet -p xstore-cli
B=target/release/xstore
: > "$out"
run() {
  local cmd="xstore model $*"
  "$B" model "$@" --json - 2>/dev/null |
    python3 -c 'import json,sys; r=json.load(sys.stdin); r["command"]=sys.argv[1]; print(json.dumps(r))' "$cmd" >> "$out"
}
for n in 100000 200000 300000 500000 1000000 2000000 5000000 10000000; do
  for d in linear ycsb lognormal normal osm-like; do
    run --dataset "$d" --keys "$n" --submodels $((n / 200))
  done
done
for d in geoip-ipv4 geoip-zorder geolite2-cells wordfreq-en words-en; do
  n=$(python3 -c 'import struct,sys; print(struct.unpack("<Q", open(sys.argv[1],"rb").read(8))[0])' "${XSTORE_DATASETS:-data}/$d.sosd")
  for per in 200 100 50; do
    run --dataset "$d" --submodels $((n / per))
  done
done
