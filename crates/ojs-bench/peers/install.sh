#!/usr/bin/env bash
# Installs the peer job queues the drain benchmark compares against (graphile-worker, pg-boss),
# at the exact versions pinned in package.json / package-lock.json beside this script, into
# target/bench-peers/ (or $OJS_BENCH_PEERS_DIR). Idempotent: when every pinned version is
# already installed there, it does nothing; otherwise it runs `npm ci` from the lock file.
#   crates/ojs-bench/peers/install.sh      -> prints the install directory on stdout
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/../../.." && pwd)
dest=${OJS_BENCH_PEERS_DIR:-$root/target/bench-peers}
command -v node >/dev/null || { echo "install.sh: node not found (the peers are Node packages)" >&2; exit 1; }
command -v npm >/dev/null || { echo "install.sh: npm not found" >&2; exit 1; }

# Exit 0 iff each dependency pinned in $1/package.json is installed under $2 at that version.
pinned_installed() {
  node -e '
    const path = require("path"), fs = require("fs");
    const [pkgDir, dest] = process.argv.slice(1);
    const deps = JSON.parse(fs.readFileSync(path.join(pkgDir, "package.json"), "utf8")).dependencies;
    for (const [name, want] of Object.entries(deps)) {
      let got = null;
      try { got = JSON.parse(fs.readFileSync(path.join(dest, "node_modules", name, "package.json"), "utf8")).version; } catch {}
      if (got !== want) { console.error(`install.sh: ${name} ${got ?? "missing"}, want ${want}`); process.exit(1); }
    }' "$1" "$2"
}

mkdir -p "$dest"
if pinned_installed "$here" "$dest" 2>/dev/null \
  && cmp -s "$here/package-lock.json" "$dest/package-lock.json"; then
  echo "install.sh: pinned peers already installed in $dest" >&2
else
  echo "install.sh: installing the pinned peers into $dest (npm ci)" >&2
  cp "$here/package.json" "$here/package-lock.json" "$here/.npmrc" "$dest/"
  (cd "$dest" && npm ci --no-audit --no-fund --loglevel=error >&2)
  pinned_installed "$here" "$dest"
fi
echo "$dest"
