#!/usr/bin/env bash
# Installs what the `cluster` crate's tests need on Debian.
#
# * etcd-server: the `etcd` binary the cluster tests and `xstore cluster up`
#   start on loopback (Debian bookworm ships 3.4.23).
#
# Building needs nothing from here: the etcd gRPC stubs are committed
# (crates/etcd-rpc). Only the check that they are current runs protoc:
# .ci/protoc-deps.sh, for that step alone.
#
# Fast when everything is present: only packages that are missing are
# installed, and apt's lists are refreshed only then.
set -euo pipefail

packages=(etcd-server)

bash "$(dirname "$0")/apt-missing.sh" etcd-deps "${packages[@]}"
