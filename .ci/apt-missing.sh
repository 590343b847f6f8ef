#!/usr/bin/env bash
# Installs those of the Debian packages named as arguments that are not
# installed yet (refreshing apt's lists only then); prints one line when
# all are present. Shared by the *-deps.sh scripts; TAG names the caller
# in what it prints.
#
# usage: apt-missing.sh TAG PACKAGE...
set -euo pipefail
export DEBIAN_FRONTEND=noninteractive

tag=$1
shift
packages=("$@")

missing=()
for p in "${packages[@]}"; do
  if ! dpkg-query -W -f='${Status}\n' "$p" 2>/dev/null | grep -q '^install ok installed$'; then
    missing+=("$p")
  fi
done

if [[ ${#missing[@]} -eq 0 ]]; then
  echo "$tag: all present (${packages[*]})"
  exit 0
fi

sudo=()
if [[ $(id -u) -ne 0 ]]; then
  sudo=(sudo -n)
fi

echo "$tag: installing ${missing[*]}"
"${sudo[@]}" apt-get update -qq </dev/null
"${sudo[@]}" apt-get install -y -qq --no-install-recommends "${missing[@]}" </dev/null
echo "$tag: done"
