#!/usr/bin/env bash
# The example Rails app end to end on SQLite + the devserver: generator (initializer and
# outbox migration), migrations, a signup that commits, one that rolls back after staging its
# job, one refused by validation; the backend must hold only the committed signup's job.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root=$(cd "$here/.." && pwd)

gem_home=$("$here/build.sh" debug | tail -1)
export GEM_HOME="$gem_home"
GEM_PATH="$gem_home:$(ruby -e 'print Gem.path.join(":")')"
export GEM_PATH

work="$root/target/ruby-example"
rm -rf "$work"
cp -r "$here/example" "$work"
cd "$work"

log="$work/devserver.log"
"$root/target/debug/ojs-devserver" --port 0 >"$log" 2>&1 &
devserver=$!
trap 'kill "$devserver" 2>/dev/null || true' EXIT
# Wait for the devserver's "listening on" line (up to 30 s: the machine may be busy).
for _ in $(seq 1 600); do
  grep -q "listening on" "$log" && break
  sleep 0.05
done
grep -q "listening on" "$log" || { cat "$log" >&2; echo "demo: the devserver did not start within 30 s" >&2; exit 1; }
OJS_URL=$(sed -n 's/.*listening on \(http[^ ]*\).*/\1/p' "$log")
export OJS_URL
echo "demo: devserver at $OJS_URL"

echo "demo: bin/rails generate ojs:install"
ruby bin/rails generate ojs:install
echo "demo: bin/rails db:migrate"
ruby bin/rails db:migrate
echo "demo: signups"
ruby bin/rails runner script/signup_demo.rb
echo "demo: bin/rails ojs:status"
ruby bin/rails ojs:status
