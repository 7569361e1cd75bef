#!/usr/bin/env bash
# The example Rails app end to end on SQLite + the devserver: generator (initializer and
# outbox migration), migrations, the worker (`bin/rails ojs:work`) in the background, a signup
# that commits, one that rolls back after staging its job, one refused by validation; the
# backend must hold only the committed signup's job, and the worker must run it (it prints
# "welcome email sent to ada@example.com") and nothing else.
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
worker=
trap 'kill "$devserver" 2>/dev/null || true; [ -z "$worker" ] || kill -9 "$worker" 2>/dev/null || true' EXIT
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
# Waits (up to 30 s: the machine may be busy) until the worker's output has a line matching $1.
wait_worker() {
  for _ in $(seq 1 600); do
    grep -q "$1" "$work/worker.log" && return 0
    kill -0 "$worker" 2>/dev/null || break
    sleep 0.05
  done
  cat "$work/worker.log" >&2
  echo "demo: the worker did not print '$1' within 30 s" >&2
  exit 1
}
echo "demo: QUEUES=email bin/rails ojs:work, in the background"
QUEUES=email ruby bin/rails ojs:work >"$work/worker.log" 2>&1 &
worker=$!
wait_worker "ojs:work: running"
echo "demo: signups"
ruby bin/rails runner script/signup_demo.rb
echo "demo: the worker runs the committed signup's job"
wait_worker "welcome email sent to"
kill -TERM "$worker"
wait "$worker" || { cat "$work/worker.log" >&2; echo "demo: the worker did not stop cleanly" >&2; exit 1; }
worker=
sed 's/^/  worker: /' "$work/worker.log"
if [ "$(grep -c "welcome email sent to" "$work/worker.log")" != 1 ] || ! grep -q "welcome email sent to ada@example.com" "$work/worker.log"; then
  echo "demo: FAILED - the worker should have sent exactly the committed signup's email" >&2
  exit 1
fi
echo "demo: bin/rails ojs:status"
ruby bin/rails ojs:status
