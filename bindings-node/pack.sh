#!/usr/bin/env bash
# Builds the addon (release), packs the npm package and installs THAT tarball into
# target/node-pkg/app (third-party dependencies stay installed between runs: better-sqlite3
# compiles from source, about a minute, only the first time). Used by test.sh, demo.sh, bench.sh.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
export npm_config_nodedir=/usr npm_config_build_from_source=true
export npm_config_audit=false npm_config_fund=false npm_config_update_notifier=false

# Node.js, and a compiler, make and python3 for better-sqlite3, which compiles from source.
"$repo/scripts/install.sh"

cd "$repo"
cargo build --release -p ojs-node-native
cargo build -p ojs-devserver
install -m 0755 target/release/libojs_node_native.so "$here/ojs_native.node"

pkg_dir="$repo/target/node-pkg"
app="$pkg_dir/app"
mkdir -p "$app"
rm -f "$pkg_dir"/ojs-adapter-express-*.tgz
(cd "$here" && npm pack --silent --pack-destination "$pkg_dir" >/dev/null)
tarball=$(ls "$pkg_dir"/ojs-adapter-express-*.tgz)

cd "$app"
if [ ! -f package.json ] || ! grep -q better-sqlite3 package.json; then
  printf '{"name":"ojs-node-pkg-tests","private":true}\n' > package.json
  npm install --silent knex@3 pg@8 better-sqlite3@12 express@5 2>&1 | grep -v 'nodedir\|install-scripts' || true
fi
rm -rf node_modules/ojs-adapter-express
npm install --silent --no-save "$tarball" 2>&1 | grep -v 'nodedir\|install-scripts' || true
test -f node_modules/ojs-adapter-express/ojs_native.node
node -e 'require("better-sqlite3"); require("ojs-adapter-express")'
echo "installed $(basename "$tarball") into $app"
