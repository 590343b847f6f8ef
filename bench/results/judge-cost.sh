#!/bin/sh
# The judge's cost: interleaved runs, judged and --no-judge (issue 22 item 9).
set -e
cd "$(dirname "$0")/../.."
X=./target/release/xstore
OUT=bench/results/judge-cost.jsonl
LOG=bench/results/judge-cost.md
: > $OUT
echo "# What the judge costs: runs of $(git rev-parse --short HEAD)" > $LOG
echo >> $LOG
echo "Machine: $(nproc) cores; load before: $(uptime)" >> $LOG
echo >> $LOG
echo '```sh' >> $LOG
for i in 1 2 3; do
  for flag in "" "--no-judge"; do
    cmd="$X bench --keys 2000000 --ops 4000000 --workload c --dist uniform --threads 2 $flag --json $OUT --append"
    echo "$cmd   # load: $(cut -d' ' -f1-3 /proc/loadavg)" >> $LOG
    $cmd > /dev/null
  done
done
for flag in "" "--no-judge"; do
  cmd="$X bench --keys 2000000 --ops 4000000 --workload c --dist uniform --threads 1 $flag --json $OUT --append"
  echo "$cmd   # load: $(cut -d' ' -f1-3 /proc/loadavg)" >> $LOG
  $cmd > /dev/null
done
echo '```' >> $LOG
echo >> $LOG
echo "Load after: $(uptime)" >> $LOG
