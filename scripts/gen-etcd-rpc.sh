#!/usr/bin/env bash
# Regenerates the committed etcd gRPC stubs in crates/etcd-rpc/src/gen/
# from the .proto files of a pinned etcd-client release:
#
#   scripts/gen-etcd-rpc.sh          rewrite crates/etcd-rpc/src/gen/
#   scripts/gen-etcd-rpc.sh --check  regenerate into a temp dir and fail
#                                    if the committed files differ (CI)
#
# Needs protoc and the protobuf well-known types (Debian:
# protobuf-compiler libprotobuf-dev) -- only here: building the workspace
# needs neither. Without protoc, --check prints one line and skips,
# unless XSTORE_REQUIRE_PROTOC=1 (CI) makes that a failure.
#
# The .proto files come from the etcd-client crate (etcd's own files with
# the gogoproto options removed): taken from cargo's registry cache, or
# fetched into it with `cargo fetch` (a throw-away manifest) if absent.
# The generator is the etcd-rpc crate's `gen-etcd-rpc` binary behind its
# non-default `regen` feature (tonic-prost-build at the Cargo.lock version).
set -euo pipefail
cd "$(dirname "$0")/.."

# The etcd API version the stubs follow (etcd-client 0.21 carries etcd
# 3.6's API protos; the server may be older: the fields the cluster layer
# uses exist since 3.4).
ETCD_CLIENT_VERSION=0.21.1
gen=crates/etcd-rpc/src/gen

check=0
case "${1:-}" in
  --check) check=1 ;;
  "") ;;
  *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac

protoc_bin=${PROTOC:-protoc}
if ! command -v "$protoc_bin" >/dev/null 2>&1 || ! "$protoc_bin" --version >/dev/null 2>&1; then
  if [[ $check -eq 1 && "${XSTORE_REQUIRE_PROTOC:-0}" != 1 ]]; then
    echo "gen-etcd-rpc: skipped: no protoc (install protobuf-compiler libprotobuf-dev to check the committed stubs)"
    exit 0
  fi
  echo "gen-etcd-rpc: needs protoc (Debian: apt-get install protobuf-compiler libprotobuf-dev)" >&2
  exit 1
fi

cargo_home=${CARGO_HOME:-$HOME/.cargo}
find_protos() {
  compgen -G "$cargo_home/registry/src/*/etcd-client-$ETCD_CLIENT_VERSION/proto" | head -n 1 || true
}
protos=$(find_protos)
if [[ -z "$protos" ]]; then
  echo "gen-etcd-rpc: fetching etcd-client $ETCD_CLIENT_VERSION's sources for its .proto files"
  fetch_dir=$(mktemp -d)
  trap 'rm -rf "$fetch_dir"' EXIT
  mkdir -p "$fetch_dir/src"
  : >"$fetch_dir/src/lib.rs"
  cat >"$fetch_dir/Cargo.toml" <<TOML
[package]
name = "fetch-etcd-protos"
version = "0.0.0"
edition = "2021"
publish = false

[dependencies]
etcd-client = { version = "=$ETCD_CLIENT_VERSION", default-features = false }
TOML
  cargo fetch --quiet --manifest-path "$fetch_dir/Cargo.toml"
  protos=$(find_protos)
  if [[ -z "$protos" ]]; then
    echo "gen-etcd-rpc: etcd-client $ETCD_CLIENT_VERSION's proto/ not found under $cargo_home/registry/src" >&2
    exit 1
  fi
fi

out=$(mktemp -d)
trap 'rm -rf "$out" "${fetch_dir:-}"' EXIT
# The generator runs once over a few small .proto files: its dependencies
# unoptimized build in 30 s where the workspace's opt-level 2 for
# dependencies takes 130 s (2 cores), and CI runs this first, cold.
cargo run --quiet -p etcd-rpc --features regen --bin gen-etcd-rpc \
  --config 'profile.dev.package."*".opt-level=0' -- "$protos" "$out"

if [[ $check -eq 1 ]]; then
  if diff -ru "$gen" "$out"; then
    echo "gen-etcd-rpc: $gen is current"
  else
    echo "gen-etcd-rpc: $gen is stale: run scripts/gen-etcd-rpc.sh and commit the result" >&2
    exit 1
  fi
else
  mkdir -p "$gen"
  cp "$out"/*.rs "$gen"/
  echo "gen-etcd-rpc: wrote $gen from $protos"
fi
