#!/usr/bin/env bash
# System packages ringflow needs: bubblewrap (the sandbox), setpriv and prlimit (util-linux,
# dropping to an unprivileged user); and, for the report's browser test only, chromium.
# Installs them when run as root; otherwise prints the exact command and stops (a missing
# chromium alone is a warning: only that test needs it).
set -euo pipefail
missing=()
command -v bwrap >/dev/null 2>&1 || missing+=(bubblewrap)
{ command -v setpriv && command -v prlimit; } >/dev/null 2>&1 || missing+=(util-linux)
optional=()
command -v chromium >/dev/null 2>&1 || optional+=(chromium)
[ $((${#missing[@]} + ${#optional[@]})) -eq 0 ] && exit 0
if [ "$(id -u)" -eq 0 ] && command -v apt-get >/dev/null 2>&1; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" "${optional[@]}"
elif [ ${#missing[@]} -gt 0 ]; then
  echo "ringflow needs: ${missing[*]}. Install them with:" >&2
  echo "  sudo apt-get update && sudo apt-get install -y ${missing[*]} ${optional[*]}" >&2
  exit 1
else
  echo "note: the report's browser test needs chromium: sudo apt-get install -y chromium" >&2
fi
