#!/usr/bin/env python3
"""XModel against the best of PLR, LPA and PGM at each budget, from a models
suite's results.jsonl (default bench/results/models-1m)."""
import json, os, sys
from collections import defaultdict

d = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(__file__), "..", "results", "models-1m")
rows = [json.loads(l) for l in open(os.path.join(d, "results.jsonl"))]
cells, sets, budgets = defaultdict(dict), [], []
for r in rows:
    k = (r["dataset"], r["budget_bytes"] / r["keys"])
    cells[k][r["model"]] = r["mean_leaves_per_lookup"]
    if r["dataset"] not in sets:
        sets.append(r["dataset"])
    b = round(r["budget_bytes"] / r["keys"], 3)
    if b not in budgets:
        budgets.append(b)
print("| key set | " + " | ".join(f"{b:g} B/key" for b in budgets) + " |")
print("|---|" + "---|" * len(budgets))
for s in sets:
    out = []
    for b in budgets:
        c = next(v for (ds, bb), v in cells.items() if ds == s and round(bb, 3) == b)
        peer = min((c[m], m) for m in ("plr", "lpa", "pgm") if m in c)
        x = c["xmodel"]
        out.append(f"{x:.3g} vs {peer[0]:.3g} {peer[1]} (×{x / peer[0]:.2f})")
    print(f"| {s} | " + " | ".join(out) + " |")
