#!/usr/bin/env bash
# Mixes with deletes (issue 26): every system that deletes, 1 M keys, local
# fabric, 2 threads, every read judged and the final state audited (a
# value read after its delete was answered is a stale read; a key found
# absent is right only while a delete of it may be the latest write).
# Run from the repository root after `cargo build --release --bin xstore`.
set -euo pipefail
out=bench/results/deletes-1m/runs.jsonl
: > "$out"
x=target/release/xstore
common=(--keys 1000000 --ops 1000000 --threads 2 --json "$out" --append)
# With scans: the systems that scan.
for system in xstore rolex histore all-skiplist finestore sherman fg single-skiplist; do
  $x bench "${common[@]}" --system "$system" --workload a --dist uniform \
    --mix read=50,update=20,insert=10,scan=10,delete=10 --scan-len uniform:1..10
done
# Half the operations delete, zipfian: every system that deletes.
for system in xstore rolex histore all-hashtable all-skiplist single-hashtable finestore sherman fg single-skiplist; do
  $x bench "${common[@]}" --system "$system" --workload a --dist zipfian \
    --mix read=40,update=10,delete=50
done
