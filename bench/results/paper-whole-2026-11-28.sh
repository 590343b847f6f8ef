#!/bin/sh
# Each paper suite whole, one after another on a quiet machine, from a
# fresh clone after `cargo build --release --bin xstore` (issue 26's
# acceptance: each suite from a clean clone in under 30 minutes, 0 wrong
# reads). Output: bench/results/paper-<paper>/whole-2026-11-28/, with
# `uptime` at each run's start and end in run.log and /usr/bin/time's
# figures at its end.
set -e
for p in rolex histore xstore finestore; do
  out=bench/results/paper-$p/whole-2026-11-28
  mkdir -p $out
  echo "# $(date -u) $(uptime)" > $out/run.log
  /usr/bin/time -v target/release/xstore bench --suite paper-$p --out $out \
    --keys 100000 --ops 50000 --warmup 1000 >> $out/run.log 2>&1
  echo "exit $? # $(date -u) $(uptime)" >> $out/run.log
done
