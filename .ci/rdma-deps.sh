#!/usr/bin/env bash
# Installs what `cargo build -p fabric --features rdma` needs on Debian.
#
# The `sideway` crate binds rdma-core through `rdma-mummy-sys`, which ships
# its own copy of the rdma-core headers and builds small dlopen() stubs of
# libibverbs/librdmacm/libmlx5 with CMake (needs cmake, make and a C
# compiler), then generates its bindings with bindgen (needs libclang and
# clang's own headers, both pulled in by libclang-dev). No rdma-core
# package is needed to build or link: libibverbs.so.1 is only looked up at
# run time.
#
# `--runtime` also installs the run-time libraries (libibverbs1 with the
# user-space drivers, librdmacm1), for machines that run the ignored RDMA
# tests on an RNIC or SoftRoCE.
#
# Fast when everything is present: only packages that are missing are
# installed, and apt's lists are refreshed only then.
set -euo pipefail

packages=(cmake make gcc libc6-dev libclang-dev)
if [[ "${1:-}" == "--runtime" ]]; then
  packages+=(libibverbs1 ibverbs-providers librdmacm1)
elif [[ $# -gt 0 ]]; then
  echo "usage: $0 [--runtime]" >&2
  exit 2
fi

bash "$(dirname "$0")/apt-missing.sh" rdma-deps "${packages[@]}"
