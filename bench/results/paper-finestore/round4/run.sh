#!/bin/sh
# Issue 26, fourth round (helper finefig): Fig. 12c-d after LI+Δ's scan
# fix (scc's range no longer started below its buffer's first key) and
# Fig. 15 with FineStore's bytes split into models, trained arrays and
# level bins. The third round's sizes and command (bench/results/
# paper-round3.sh), only these three figures. From the repository root,
# after `cargo build --release --bin xstore`; `uptime` at the start and
# end in run.log.
set -e
out=bench/results/paper-finestore/round4
mkdir -p $out
{ echo "# $(date -u) $(uptime)"
  target/release/xstore bench --suite paper-finestore --out $out \
    --keys 100000 --ops 50000 --warmup 1000 \
    --figures fig12c-point-after-inserts,fig12d-range-after-inserts,fig15-memory 2>&1
  echo "# $(date -u) $(uptime)"; } > $out/run.log
