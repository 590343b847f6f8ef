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

packages=(etcd-server protobuf-compiler libprotobuf-dev)

bash "$(dirname "$0")/apt-missing.sh" etcd-deps "${packages[@]}"
