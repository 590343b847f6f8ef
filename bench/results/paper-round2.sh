#!/bin/sh
# The figures that became runnable after the first suite runs (issue 26's
# stubs), at the committed runs' sizes. From the repository root, after
# `cargo build --release --bin xstore`. Each paper's output goes to
# bench/results/paper-<paper>/round2/ (the suite writes one directory per
# run; the first round's files stay beside it). One script for every paper.
set -e
run() {
  paper=$1; figures=$2
  out=bench/results/paper-$paper/round2
  mkdir -p $out
  { echo "# $(date -u) $(uptime)"
    target/release/xstore bench --suite paper-$paper --out $out \
      --keys 100000 --ops 50000 --warmup 1000 --figures $figures 2>&1
    echo "# $(date -u) $(uptime)"; } > $out/run.log
}
case "${1:-all}" in
  rolex|all) run rolex fig10a-cores-read,fig10b-cores-write,fig11a-epsilon,fig11b-delta,fig11d-retrain ;;
esac
case "${1:-all}" in
  histore|all) run histore fig11-index-rpc ;;
esac
case "${1:-all}" in
  xstore|all) run xstore fig12a-latency,fig13b-servers-uniform,fig13b-servers-zipfian,fig14b-insert-rate-tt1,fig14b-insert-rate-tt2 ;;
esac
case "${1:-all}" in
  finestore|all) run finestore fig10-local,fig11-skewed,fig13-read-write,fig12b-insert,fig12e-retraining,fig14-training,fig20-rcu,fig21-modes ;;
esac
