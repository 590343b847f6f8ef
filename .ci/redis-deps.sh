#!/usr/bin/env bash
# Installs what the Redis-protocol front end's tests need on Debian.
#
# * redis-tools: `redis-cli` and `redis-benchmark`, which drive `xstore
#   resp` in crates/cli/tests/resp.rs (the test skips, saying so, without
#   them; CI sets XSTORE_REQUIRE_REDIS=1 so that it fails instead).
# * redis-server, with --with-server only: the real Redis the front end is
#   measured against (bench/scripts/resp_vs_redis.sh; not run by CI).
#
# Fast when everything is present: only packages that are missing are
# installed, and apt's lists are refreshed only then.
set -euo pipefail

packages=(redis-tools)
if [[ ${1:-} == --with-server ]]; then
  packages+=(redis-server)
fi

bash "$(dirname "$0")/apt-missing.sh" redis-deps "${packages[@]}"
