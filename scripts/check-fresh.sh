#!/usr/bin/env bash
# Proves that scripts/install.sh brings back every Debian package the project installs: for each
# one it removes the package (and what apt removes with it), runs scripts/install.sh, and checks
# the package is installed again. Packages apt removed along with it that are not the project's
# are put back afterwards, so the machine ends as it began. One line per package.
# Run by hand, as root, on a machine where nothing else is using these packages; not run by CI.
#   scripts/check-fresh.sh [PACKAGE ...]     (default: every package of scripts/install.sh --list)
set -euo pipefail
cd "$(dirname "$0")/.."
export DEBIAN_FRONTEND=noninteractive
mkdir -p target
log=target/check-fresh.log
: >"$log"

installed() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q '^install ok installed$'; }

scripts/install.sh >>"$log" 2>&1 || { echo "check-fresh: scripts/install.sh fails before any removal (log: $log)" >&2; exit 1; }
if [ $# -gt 0 ]; then packages=("$@"); else mapfile -t packages < <(scripts/install.sh --list); fi

failed=0
for package in "${packages[@]}"; do
  mapfile -t removed < <(apt-get -s remove "$package" 2>/dev/null | awk '/^Remv /{print $2}')
  if ! apt-get remove -y -qq "$package" >>"$log" 2>&1 || installed "$package"; then
    echo "FAIL  $package: could not be removed (log: $log)"; failed=1; continue
  fi
  if ! scripts/install.sh >>"$log" 2>&1; then
    echo "FAIL  $package: scripts/install.sh failed after removing it (log: $log)"; failed=1
  elif installed "$package"; then
    line="ok    $package: removed ${#removed[@]} package(s), scripts/install.sh put it back"
    restore=()
    for other in "${removed[@]}"; do installed "$other" || restore+=("$other"); done
    if [ ${#restore[@]} -gt 0 ]; then
      apt-get install -y -qq --no-install-recommends "${restore[@]}" >>"$log" 2>&1 || true
      line+=" (restored by hand, not needed by the project: ${restore[*]})"
    fi
    echo "$line"
  else
    echo "FAIL  $package: still missing after scripts/install.sh (log: $log)"; failed=1
  fi
done
exit "$failed"
