#!/bin/sh
# Leaves per GET of ROLEX at 1 M and 10 M keys (YCSB C, zipfian), for
# several ε; before-*.json are the same command on main before the
# OptimalPLR pieces (no --rolex-epsilon then). Run from the repository root.
set -e
out=bench/results/rolex-epsilon
for keys in 1000000 10000000; do
  for eps in 4 8 16 32 64; do
    target/release/xstore bench --system rolex --keys $keys --ops 1000000 \
      --workload c --rolex-epsilon $eps --json $out/eps$eps-$keys.json
  done
done
