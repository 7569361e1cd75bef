#!/usr/bin/env bash
# Builds the addon (release), packs the npm package and installs THAT tarball into
# target/node-pkg/app (third-party dependencies stay installed between runs: better-sqlite3
# compiles from source, about a minute, only the first time). Used by test.sh, demo.sh, bench.sh.
# Prints one line per step; the full output goes to target/logs/node-pack.log, whose tail is
# printed when a step fails.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
export npm_config_nodedir=/usr npm_config_build_from_source=true
export npm_config_audit=false npm_config_fund=false npm_config_update_notifier=false

log="$repo/target/logs/node-pack.log"
mkdir -p "$(dirname "$log")"
: > "$log"
# step "what" command...: one progress line, the command's output to the log.
step() {
  local what=$1; shift
  local started=$SECONDS
  printf 'pack.sh: %s ... ' "$what"
  printf '\n==== %s: %s\n' "$what" "$*" >> "$log"
  if "$@" >> "$log" 2>&1; then
    echo "done ($((SECONDS - started)) s)"
  else
    local rc=$?
    echo "FAILED (exit $rc); the end of $log:"
    tail -n 40 "$log" | sed 's/^/  | /'
    exit "$rc"
  fi
}

# Node.js, and a compiler, make and python3 for better-sqlite3, which compiles from source.
step "Debian packages (scripts/install.sh)" "$repo/scripts/install.sh"

cd "$repo"
step "cargo build --release -p ojs-node-native (the addon)" cargo build --release -p ojs-node-native
step "cargo build -p ojs-devserver -p ojs-relay" cargo build -p ojs-devserver -p ojs-relay
install -m 0755 target/release/libojs_node_native.so "$here/ojs_native.node"

pkg_dir="$repo/target/node-pkg"
app="$pkg_dir/app"
mkdir -p "$app"
rm -f "$pkg_dir"/ojs-adapter-express-*.tgz
step "npm pack" bash -c 'cd "$1" && npm pack --pack-destination "$2"' _ "$here" "$pkg_dir"
tarball=$(ls "$pkg_dir"/ojs-adapter-express-*.tgz)

cd "$app"
if [ ! -f package.json ] || ! grep -q better-sqlite3 package.json; then
  printf '{"name":"ojs-node-pkg-tests","private":true}\n' > package.json
  step "npm install knex pg better-sqlite3 express (third-party, once)" \
    npm install knex@3 pg@8 better-sqlite3@12 express@5
fi
# The tests' own dependencies (devDependencies: the Prometheus text parser of the metrics test,
# the transaction libraries of the provider tests): exactly the versions of package-lock.json,
# transitive ones included (those hoisted to the top; a nested one comes with its parent).
dev_pins=$(node -e '
const lock = require(process.argv[1]);
const pins = Object.entries(lock.packages)
  .filter(([key, entry]) => key.startsWith("node_modules/") && !key.slice(13).includes("/node_modules/") && entry.dev)
  .map(([key, entry]) => `${key.slice("node_modules/".length)}@${entry.version}`);
console.log(pins.join(" "));' "$here/package-lock.json")
missing=$(node -e '
for (const pin of process.argv.slice(1)) {
  const at = pin.lastIndexOf("@");
  let version = null;
  try { version = require(`./node_modules/${pin.slice(0, at)}/package.json`).version; } catch {}
  if (version !== pin.slice(at + 1)) console.log(pin);
}' $dev_pins)
if [ -n "$missing" ]; then
  # shellcheck disable=SC2086
  step "npm install the tests' pinned dependencies ($dev_pins)" npm install --save-exact $dev_pins
fi
rm -rf node_modules/ojs-adapter-express
step "npm install $(basename "$tarball")" npm install --no-save "$tarball"
step "check: the package and better-sqlite3 load" \
  bash -c 'test -f node_modules/ojs-adapter-express/ojs_native.node && node -e "require(\"better-sqlite3\"); require(\"ojs-adapter-express\")"'
echo "pack.sh: installed $(basename "$tarball") into $app (log: $log)"
