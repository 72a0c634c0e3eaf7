#!/usr/bin/env bash
# System packages ringflow needs: bubblewrap (the sandbox), setpriv and prlimit (util-linux,
# dropping to an unprivileged user). Installs them when run as root; otherwise prints
# the exact command and stops.
set -euo pipefail
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
{ command -v setpriv && command -v prlimit; } >/dev/null 2>&1 || missing+=(util-linux)
[ ${#missing[@]} -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}"
else
  echo "ringflow needs: ${missing[*]}. Install them with:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]}" >&2
  exit 1
fi
