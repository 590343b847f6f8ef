#!/usr/bin/env python3
"""Checks the crate graph against the layers of docs/architecture.md and
prints it: every workspace crate may depend (normal, build or dev) only on
crates in lower layers, on crates of its own layer outside the systems
layer, or on crates of its own system family. No system
points at another system; nothing points up.

Usage: python3 scripts/layers.py [--dot]   (exit 1 on an upward or sideways arrow)
"""
import json
import subprocess
import sys

# Lowest first. A crate not listed is an error: a new crate says where it sits.
LAYERS = [
    ("base", ["le", "etcd-rpc"]),
    ("fabric", ["fabric"]),
    ("shared", ["testkit", "learned", "wal", "ycsb", "rdmasim", "kv", "check", "coord"]),
    ("systems", ["xtree", "xstore", "cluster", "rolex", "histore", "finestore", "sherman", "single"]),
    ("registry", ["registry"]),
    ("harness", ["bench"]),
    ("front ends", ["resp"]),
    ("binary", ["xstore-cli"]),
]
# Crates of one system may use each other (XStore's tree, server and shards).
FAMILY = {"xtree": "xstore", "xstore": "xstore", "cluster": "xstore"}


def main():
    meta = json.loads(subprocess.check_output(
        ["cargo", "metadata", "--format-version", "1", "--no-deps"]))
    names = {p["name"] for p in meta["packages"]}
    layer = {}
    for i, (_, crates) in enumerate(LAYERS):
        for c in crates:
            layer[c] = i
    bad = []
    edges = []
    for p in sorted(meta["packages"], key=lambda p: p["name"]):
        a = p["name"]
        if a not in layer:
            bad.append(f"{a}: not placed in a layer (scripts/layers.py)")
            continue
        for d in p["dependencies"]:
            b = d["name"]
            if b not in names:
                continue
            kind = d["kind"] or "normal"
            edges.append((a, b, kind))
            if b not in layer:
                continue
            same_family = FAMILY.get(a, a) == FAMILY.get(b, b)
            # Shared crates may use each other; systems only their own family.
            same_shared = layer[b] == layer[a] and LAYERS[layer[a]][0] != "systems"
            if layer[b] < layer[a] or same_family or same_shared:
                continue
            what = "sideways (one system on another)" if layer[b] == layer[a] else "upward"
            bad.append(f"{a} -> {b} ({kind}): {what}")
    if "--dot" in sys.argv:
        print("digraph crates {")
        for a, b, kind in edges:
            style = ' [style=dashed]' if kind == "dev" else ""
            print(f'  "{a}" -> "{b}"{style};')
        print("}")
    else:
        for i, (lname, crates) in reversed(list(enumerate(LAYERS))):
            for c in crates:
                if c not in names:
                    continue
                deps = sorted({b for a, b, k in edges if a == c and k != "dev"})
                dev = sorted({b for a, b, k in edges if a == c and k == "dev"} - set(deps))
                line = f"{lname:<9} {c:<11} -> {', '.join(deps) or '(none)'}"
                if dev:
                    line += f"   [tests: {', '.join(dev)}]"
                print(line)
    for b in bad:
        print("layering:", b, file=sys.stderr)
    sys.exit(1 if bad else 0)


if __name__ == "__main__":
    main()
