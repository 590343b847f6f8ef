#!/bin/sh
# XModel training and retraining over 10 M keys on ycsb, lognormal and
# osm-like, one set after another (bench/README.md, "XModel over 10 M
# keys"). Appends one JSON line per set to OUT, with LABEL as "build" and
# uptime's 1-minute load average when the set started as "load_avg_1m".
#
# usage: bench/scripts/model_parallel.sh BINARY OUT LABEL [THREADS]
#   THREADS: passed as --train-threads (leave out for a binary without it)
set -eu
bin=$1 out=$2 label=$3 threads=${4:-}
for d in ycsb lognormal osm-like; do
  load=$(cut -d' ' -f1 /proc/loadavg)
  if [ -n "$threads" ]; then
    line=$("$bin" model --keys 10000000 --submodels 50000 --dataset "$d" --train-threads "$threads" --json - 2>/dev/null | tail -1)
  else
    line=$("$bin" model --keys 10000000 --submodels 50000 --dataset "$d" --json - 2>/dev/null | tail -1)
  fi
  echo "$line" | jq -c --arg build "$label" --argjson load "$load" '. + {build: $build, load_avg_1m: $load}' | tee -a "$out"
done
