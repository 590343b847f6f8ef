#!/usr/bin/env python3
"""table.md of bench/results/insert-rate/runs-*-tt*.jsonl (run.sh's runs)."""
import json
import pathlib
import re

d = pathlib.Path(__file__).parent
head = (
    "| runs | train threads | --insert-rate | read Mops/s | inserts k/s achieved "
    "| insert p50 us | fallback % | invalidation % | checked reads | wrong |\n"
    "|---|---|---|---|---|---|---|---|---|---|"
)
rows = []
for f in sorted(d.glob("runs-*-tt*.jsonl")):
    tag, tt = re.match(r"runs-(.+)-tt(\d+)\.jsonl", f.name).groups()
    for line in f.read_text().splitlines():
        r = json.loads(line)
        ins = r.get("inserter")
        if ins is None:
            rate = "0"
        elif ins["target_per_s"] is None:
            rate = "max"
        else:
            rate = f"{ins['target_per_s'] / 1e3:g}k"
        c = r["correctness"]
        rows.append(
            "| {} | {} | {} | {:.3f} | {} | {} | {:.3f} | {:.3f} | {} | {} |".format(
                tag,
                tt,
                rate,
                r["throughput_ops_per_s"] / 1e6,
                "-" if ins is None else f"{ins['achieved_per_s'] / 1e3:.1f}",
                "-" if ins is None else f"{ins['latency_us']['p50']:.1f}",
                100 * (r["fallback_rate"] or 0),
                100 * (r["invalidation_rate"] or 0),
                c["checked_reads"],
                c["mismatches"] + c["stale_reads"] + c["lost_writes"],
            )
        )
text = head + "\n" + "\n".join(rows) + "\n"
(d / "table.md").write_text(text)
print(text, end="")
