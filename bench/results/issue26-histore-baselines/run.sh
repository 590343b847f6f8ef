#!/bin/sh
# HiStore and its four baselines (HiStore §5.1, 5.4) on YCSB A-F, zipfian
# theta 0.9 as the paper's, 2 client threads, every read judged.
# all-hashtable and single-hashtable have no scans, so E runs the three
# systems that do. Usage: run.sh [KEYS] [OPS] (default 100000 200000).
set -e
B=${B:-./target/release/xstore}
KEYS=${1:-100000}
OPS=${2:-200000}
OUT=${OUT:-bench/results/issue26-histore-baselines}
mkdir -p "$OUT"
echo "start $(date -u +%FT%TZ) $(uptime)" >> "$OUT/uptime.txt"
for w in a b c d e f; do
  case $w in
    e) systems=histore,all-skiplist,single-skiplist ;;
    *) systems=histore,all-hashtable,all-skiplist,single-hashtable,single-skiplist ;;
  esac
  $B bench --system $systems --workload $w --keys "$KEYS" --ops "$OPS" \
    --zipf-theta 0.9 --threads 2 \
    --json "$OUT/results-$KEYS.jsonl" --append > "$OUT/$w-$KEYS.txt" 2>&1
  echo "$w $(date -u +%FT%TZ) $(uptime)" >> "$OUT/uptime.txt"
done
