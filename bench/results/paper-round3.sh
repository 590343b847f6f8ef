#!/bin/sh
# The third round's figures (issue 26's remaining "not reproduced: needs"
# lines that the code now allows), at the committed runs' sizes (100,000
# keys, 50,000 operations: the first round's, for the reasons
# bench/README.md's "Paper suites" gives). From the repository root,
# after `cargo build --release --bin xstore`. Each paper's output goes to
# bench/results/paper-<paper>/round3/, with `uptime` at its start and end
# in run.log. One script for every paper.
set -e
run() {
  paper=$1; figures=$2
  out=bench/results/paper-$paper/round3
  mkdir -p $out
  { echo "# $(date -u) $(uptime)"
    target/release/xstore bench --suite paper-$paper --out $out \
      --keys 100000 --ops 50000 --warmup 1000 --figures $figures 2>&1
    echo "# $(date -u) $(uptime)"; } > $out/run.log
}
case "${1:-all}" in
  xstore|all) run xstore fig16a-values ;;
esac
case "${1:-all}" in
  histore|all) run histore fig13-recovery-primary,fig13-recovery-backup,fig14-degraded ;;
esac
case "${1:-all}" in
  finestore|all) run finestore fig12a-models,fig12c-point-after-inserts,fig12d-range-after-inserts,fig15-memory ;;
esac
