#!/usr/bin/env bash
# XStore's Fig. 13b: how YCSB C's requests spread over 6 range-partitioned
# servers (--shards 6: six XStore servers in one process on the local
# fabric, the clients routing by key range like over a --cluster), under a
# key-order Zipfian (hot keys = smallest keys, all on the first server), the
# scrambled Zipfian and uniform. Every read judged. 1 M YCSB keys.
# Run from the repository root after `cargo build --release --bin xstore`.
set -euo pipefail
dir=bench/results/shares
out=$dir/runs.jsonl
: > "$out"
x=target/release/xstore
uptime > "$dir/load.txt"
for dist in zipfian-ordered zipfian uniform; do
  echo "== $dist" >&2
  $x bench --system xstore --shards 6 --keys 1000000 --workload c --dist "$dist" \
    --ops 1000000 --threads 2 --json "$out" --append > /dev/null
  uptime >> "$dir/load.txt"
done
python3 - "$out" <<'PY' > "$dir/table.md"
import json, sys
print("| dist | max share | requests per server (s0..s5) | read Mops/s | RTT/GET | checked reads | wrong |")
print("|---|---|---|---|---|---|---|")
for line in open(sys.argv[1]):
    r = json.loads(line)
    s = r["server_shares"]
    each = " / ".join(f"{v['share'] * 100:.1f}" for v in s["servers"])
    c = r["correctness"]
    print(f"| {r['dist']} | {s['max_share'] * 100:.1f} % | {each} % | "
          f"{r['throughput_ops_per_s'] / 1e6:.3f} | {r['per_get']['round_trips']:.3f} | "
          f"{c['checked_reads']} | {c['mismatches'] + c['stale_reads'] + c['lost_writes']} |")
PY
cat "$dir/table.md"
