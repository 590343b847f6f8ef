#!/usr/bin/env bash
# Installs what the `cluster` crate and its tests need on Debian.
#
# * etcd-server: the `etcd` binary the cluster tests and `xstore cluster up`
#   start on loopback (Debian bookworm ships 3.4.23).
# * protobuf-compiler: `protoc`, which the `etcd-client` crate's build
#   script runs to generate its gRPC stubs (tonic-build), and
#   libprotobuf-dev for the well-known types it imports
#   (google/protobuf/descriptor.proto, struct.proto). Debian's package
#   is used rather than a crate that downloads or bundles a protoc binary:
#   the build then uses only registry packages the machine already trusts.
#
# Fast when everything is present: only packages that are missing are
# installed, and apt's lists are refreshed only then.
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

packages=(etcd-server protobuf-compiler libprotobuf-dev)

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "etcd-deps: all present (${packages[*]})"
  exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
  sudo=(sudo -n)
fi

echo "etcd-deps: installing ${missing[*]}"
"${sudo[@]}" apt-get update -qq </dev/null
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
# Debian's package starts an etcd service on the default ports; the tests
# start their own on free ports and need none.
if command -v systemctl >/dev/null 2>&1 && systemctl is-active --quiet etcd 2>/dev/null; then
  "${sudo[@]}" systemctl stop etcd || true
fi
echo "etcd-deps: done"
