#!/usr/bin/env python3
"""Prints the markdown tables of bench/README.md from bench/results/."""
import json, os, sys

R = os.path.join(os.path.dirname(__file__), "..", "results")

def lines(name):
    p = os.path.join(R, name)
    return [json.loads(l) for l in open(p)] if os.path.exists(p) else []

def mops(r):
    return f"{r['throughput_ops_per_s'] / 1e6:.3f}"

print("### XModel over 10 M keys\n")
print("| dataset | model B/sub-model | tt_bytes | mean_abs_error | max_error | mean_leaves_per_lookup | train s | retrain µs/sub-model | cache fill s |")
print("|---|---|---|---|---|---|---|---|---|")
for r in lines("model-10m.jsonl"):
    print(f"| {r['dataset']} | {r['model_bytes']/r['submodels']:.2f} | {r['tt_bytes']:,} | {r['mean_abs_error']:.3f} | {r['max_error']:.1f} | {r['mean_leaves_per_lookup']:.4f} | {r['train_seconds']:.3f} | {r['retrain_us_per_submodel']:.2f} | {r['cache_fill_seconds']:.4f} |")

print("\n### XStore, embedded (local fabric, 2 client threads, 10 M ycsb keys)\n")
print("| workload | --get-reads | --cache | Mops/s | RTT/GET | leaves/GET | fallback % | invalidation % | client cache bytes | mismatches |")
print("|---|---|---|---|---|---|---|---|---|---|")
# The order bench/scripts (see bench/README.md) appends them in.
setup = [("1", "full"), ("2", "full"), ("2", "full"), ("2", "full"), ("1", "model"), ("1", "top")]
for (reads, cache), r in zip(setup, lines("xstore-embedded-10m.jsonl")):
    g = r["per_get"]
    print(f"| {r['workload']} {r['dist']} | {reads} | {cache} | {mops(r)} | {g['round_trips']:.4f} | {g['leaves_read']:.3f} | {100*r['fallback_rate']:.3f} | {100*r['invalidation_rate']:.3f} | {r['client_cache_bytes']:,} | {r['correctness']['mismatches']} |")

print("\n### XStore in a server process (YCSB C uniform, 10 M keys, 2 client threads)\n")
print("| fabric | Mops/s | p50 µs | RTT/GET | server µs/GET: soft NIC | workers | mismatches |")
print("|---|---|---|---|---|---|---|")
for f in ("shm", "tcp"):
    p = os.path.join(R, f"server-{f}-10m.json")
    if os.path.exists(p):
        r = json.load(open(p))
        s = r.get("server_cpu_split_us_per_op") or {"nic": 0, "worker": 0}
        print(f"| {f} | {mops(r)} | {r['latency_us']['p50']:.2f} | {r['per_get']['round_trips']:.4f} | {s['nic']:.3f} | {s['worker']:.3f} | {r['correctness']['mismatches']} |")

print("\n### Durability (tcp, 10 M keys, peak over client shapes threads:pipeline)\n")
rows = lines("durability-10m.jsonl")
def shape(r):
    return f"{r['threads']}:{r.get('pipeline', 1)}"
def best(mode, w):
    rs = [r for r in rows if r["durability"] == mode and r["workload"] == w]
    return max(rs, key=lambda r: r["throughput_ops_per_s"]) if rs else None
def at(mode, w, sh):
    rs = [r for r in rows if r["durability"] == mode and r["workload"] == w and shape(r) == sh]
    return rs[0] if rs else None
print("| workload | none peak Mops/s (shape) | sync peak Mops/s (shape) | sync / none, peaks | sync / none at 32:1 | mismatches |")
print("|---|---|---|---|---|---|")
for w in "ABCD":
    n, s = best("none", w), best("sync", w)
    if n and s:
        n1, s1 = at("none", w, "32:1"), at("sync", w, "32:1")
        closed = f"{s1['throughput_ops_per_s']/n1['throughput_ops_per_s']:.3f}" if n1 and s1 else "-"
        mism = sum(r["correctness"]["mismatches"] for r in rows if r["workload"] == w)
        print(f"| {w} | {mops(n)} ({shape(n)}) | {mops(s)} ({shape(s)}) | {s['throughput_ops_per_s']/n['throughput_ops_per_s']:.3f} | {closed} | {mism} |")

print("\n### XModel at 200 keys per sub-model, every size (`model-sweep.jsonl`)\n")
sweep = lines("model-sweep.jsonl")
synth = [r for r in sweep if r["keys"] and r["dataset"] in ("linear", "ycsb", "lognormal", "normal", "osm-like")]
sizes = sorted({r["keys"] for r in synth})
print("| dataset | " + " | ".join(f"{n:,} keys" for n in sizes) + " | B/sub-model (max) | retrain µs/sub-model (median) |")
print("|---|" + "---|" * (len(sizes) + 2))
for d in ("linear", "ycsb", "lognormal", "normal", "osm-like"):
    rs = {r["keys"]: r for r in synth if r["dataset"] == d}
    cells = [f"{rs[n]['mean_leaves_per_lookup']:.3f}" if n in rs else "-" for n in sizes]
    bpm = max(r["model_bytes"] / r["submodels"] for r in rs.values())
    rt = sorted(r["retrain_us_per_submodel"] for r in rs.values())
    print(f"| {d} | " + " | ".join(cells) + f" | {bpm:.2f} | {rt[len(rt) // 2]:.2f} |")

print("\n### XModel on the real sets (`model-sweep.jsonl`), leaves per lookup\n")
print("| set | keys | 200 keys/sub-model | 100 | 50 |")
print("|---|---|---|---|---|")
real = [r for r in sweep if r not in synth]
for d in dict.fromkeys(r["dataset"] for r in real):
    rs = sorted((r for r in real if r["dataset"] == d), key=lambda r: r["submodels"])
    print(f"| {d} | {rs[0]['keys']:,} | " + " | ".join(f"{r['mean_leaves_per_lookup']:.3f}" for r in rs) + " |")
