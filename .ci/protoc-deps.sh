#!/usr/bin/env bash
# Installs what scripts/gen-etcd-rpc.sh needs to regenerate (and so to
# check) the committed etcd gRPC stubs, on Debian: `protoc`
# (protobuf-compiler) and the well-known types etcd's version.proto
# imports (libprotobuf-dev: google/protobuf/descriptor.proto). Debian's
# packages are used rather than a crate that downloads or bundles a protoc
# binary. Nothing else in CI needs them: the build runs with
# PROTOC=/bin/false.
set -euo pipefail

packages=(protobuf-compiler libprotobuf-dev)

bash "$(dirname "$0")/apt-missing.sh" protoc-deps "${packages[@]}"
