#!/usr/bin/env python3
"""Projected vs paper: reads this directory's JSON lines (one report per
system and run, each with its "projected" block) and bench/papers/points.csv,
prints the markdown table of bench/README.md ("Projection").
Run from the repository root: python3 bench/results/projection-1m/table.py
[DIR] (DIR: another results directory of the same layout, e.g.
bench/results/projection-10m)."""
import csv
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.abspath(os.path.join(HERE, "..", "..", ".."))
D = os.path.abspath(sys.argv[1]) if len(sys.argv) > 1 else HERE


def load(name):
    """{system: projected throughput in M ops/s} of one run file."""
    out = {}
    path = os.path.join(D, name + ".jsonl")
    if not os.path.exists(path):
        return out
    for line in open(path):
        r = json.loads(line)
        p = r.get("projected")
        if p:
            out[r["system"]] = (p["throughput_ops_per_s"] / 1e6, p["bottleneck"], r)
    return out


def points():
    rows = [l for l in open(os.path.join(ROOT, "bench/papers/points.csv")) if not l.startswith("#")]
    return list(csv.DictReader(rows))


P = points()


def paper(fig, workload, dist, system, metric, vs=""):
    for p in P:
        if (p["figure"], p["workload"], p["dist"], p["paper_system"], p["metric"], p["vs"]) == (
            fig, workload, dist, system, metric, vs):
            return float(p["value"].lstrip(">")), p["how"]
    raise KeyError((fig, workload, dist, system, metric, vs))


lines = ["| run (file) | quantity | paper (figure, how) | projected | projected / paper | bottleneck |",
         "|---|---|---|---|---|---|"]


def row(run, what, pv, proj, bottleneck):
    val, fig, how = pv
    ratio = proj / val
    flag = " **miss**" if abs(ratio - 1) > 0.25 else ""
    lines.append(f"| {run} | {what} | {val:g} ({fig}, {how}) | {proj:.2f} | {ratio:.2f}{flag} | {bottleneck} |")


def thr(run, system, fig, workload, dist, psys, metric="peak throughput"):
    r = load(run)
    if system not in r:
        return
    v, how = paper(fig, workload, dist, psys, metric)
    row(run, f"{system} M ops/s vs {psys}", (v, fig, how), r[system][0], r[system][1])


def ratio(run, a, b, fig, workload, dist, psys, metric, vs):
    """Projected a / b against the paper's ratio. b may be "worst other" or
    "best other": the slowest or fastest of the Fig. 10 designs' stand-ins
    here (server-centric and tree-cache; the whole-index cache is not in
    Fig. 10)."""
    r = load(run)
    if b in ("worst other", "best other"):
        others = [s for s in ("server-centric", "tree-cache") if s in r]
        if not others:
            return
        pick = min if b == "worst other" else max
        b = pick(others, key=lambda s: r[s][0])
    if a not in r or b not in r:
        return
    v, how = paper(fig, workload, dist, psys, metric, vs)
    row(run, f"{a} / {b} vs {psys} / {vs}", (v, fig, how), r[a][0] / r[b][0],
        f"{r[a][1]} / {r[b][1]}")


# XStore (cx4-100g).
thr("cx4-c", "xstore", "Fig. 10", "C", "uniform", "XStore")
thr("cx4-c", "server-centric", "Fig. 2c", "C", "uniform", "S-RKV (server-centric)")
thr("cx4-c", "server-centric", "Fig. 10", "C", "uniform", "DrTM-Tree")
thr("cx4-c", "tree-cache", "Fig. 2c", "C", "uniform", "C-RKV + index cache (Cell-like)")
thr("cx4-c", "whole-tree-cache", "Fig. 2c", "C", "uniform", "whole-index cache (Optimal)")
ratio("cx4-c", "xstore", "server-centric", "Fig. 10", "C", "uniform", "XStore", "speedup", "DrTM-Tree")
ratio("cx4-c", "xstore", "server-centric", "Fig. 10", "C", "uniform", "XStore", "speedup", "EMT")
ratio("cx4-c", "xstore", "tree-cache", "Fig. 10", "C", "uniform", "XStore", "speedup", "Cell")
thr("cx4-c", "xstore", "Fig. 12a", "C", "uniform", "XStore")
thr("cx4-c-zipfian", "xstore", "Fig. 10", "C", "zipfian", "XStore")
ratio("cx4-c-zipfian", "xstore", "server-centric", "Fig. 10", "C", "zipfian", "XStore", "speedup", "DrTM-Tree")
ratio("cx4-c-zipfian", "xstore", "tree-cache", "Fig. 10", "C", "zipfian", "XStore", "speedup", "Cell")
ratio("cx4-a", "xstore", "worst other", "Fig. 10", "A", "uniform", "XStore", "speedup (largest)", "best other")
ratio("cx4-a", "xstore", "best other", "Fig. 10", "A", "uniform", "XStore", "speedup (smallest)", "best other")
ratio("cx4-b", "xstore", "worst other", "Fig. 10", "B", "uniform", "XStore", "speedup (largest)", "best other")
ratio("cx4-b", "xstore", "best other", "Fig. 10", "B", "uniform", "XStore", "speedup (smallest)", "best other")
thr("cx4-d", "xstore", "Fig. 10", "D", "uniform", "XStore")
ratio("cx4-d", "xstore", "worst other", "Fig. 10", "D", "uniform", "XStore", "speedup (largest)", "best other")
thr("cx4-d", "whole-tree-cache", "Fig. 2e", "D", "uniform", "whole-index cache (Optimal)", "throughput")
# ROLEX (cx5-100g), XStore-D's memory node of 1 core.
ratio("cx5-rolex-a", "rolex", "xstore-d", "Fig. 7", "A", "both", "ROLEX", "speedup (largest)", "XStore-D")
ratio("cx5-rolex-c", "rolex", "xstore-d", "Fig. 7", "C", "both", "ROLEX", "speedup", "XStore-D")
ratio("cx5-rolex-d", "rolex", "xstore-d", "Fig. 7", "D", "both", "ROLEX", "speedup", "other schemes")
ratio("cx5-rolex-e", "rolex", "xstore-d", "Fig. 7", "E", "both", "ROLEX", "speedup", "other schemes")
ratio("cx5-rolex-insert", "rolex", "xstore-d", "Fig. 8a", "insert", "n/a", "ROLEX", "speedup (largest)", "XStore-D")
# FineStore (cx5-100g).
ratio("cx5-finestore-c", "finestore", "xstore", "Fig. 17", "C", "both", "FineStore", "speedup", "XStore")
ratio("cx5-finestore-a", "finestore", "xstore", "Fig. 18", "large write ratio", "n/a", "FineStore", "speedup", "XStore")
ratio("cx5-finestore-insert", "finestore", "xstore", "Fig. 19", "insert", "n/a", "FineStore", "speedup (largest)", "XStore")

print("\n".join(lines))
# Every projected figure, for the record.
print("\n| run | system | measured here (M ops/s) | RTT/op | RPCs/op | traced client us/op | server us/RPC | projected M ops/s | p50 us | bottleneck |")
print("|---|---|---|---|---|---|---|---|---|---|")
for f in sorted(os.listdir(D)):
    if f.endswith(".jsonl"):
        for s, (v, b, r) in load(f[:-6]).items():
            t = r["projected"]["trace"]
            print(f"| {f[:-6]} | {s} | {r['throughput_ops_per_s']/1e6:.3f} | {t['round_trips']:.3f} | {t['rpcs']:.3f} | "
                  f"{t['client_cpu_us']:.3f} | {t['server_cpu_us_per_rpc']:.3f} | {v:.2f} | {r['projected']['latency_us']['p50']:.2f} | {b} |")
