#!/usr/bin/env bash
# The example Express app end to end on SQLite + ojs-devserver: migrate with the package's
# `ojs-relay migrate`, one signup that commits and one that rolls back, then show that the
# backend received only the committed job, and that the package's worker (`ojs-worker` with
# the example's jobs.js) ran it: the handler's line, the job completed with its result.
# Exit 0 on success.
# Builds and installs the package with pack.sh (into target/node-pkg/app), unless
# OJS_DEMO_SKIP_BUILD=1 and it is already there.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(cd "$here/.." && pwd)
app="$repo/target/node-pkg/app"

cd "$repo"
if [ "${OJS_DEMO_SKIP_BUILD:-0}" != 1 ] || [ ! -f "$app/node_modules/ojs-adapter-express/ojs_native.node" ]; then
  "$here/pack.sh"
fi
cargo build -q -p ojs-devserver

work=$(mktemp -d)
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; rm -rf "$work"; }
trap cleanup EXIT
# wait_until WHAT COMMAND...: polls COMMAND until it succeeds, for up to 30 s (a busy machine is
# slow, not broken); then fails naming WHAT.
wait_until() {
  local what=$1; shift
  local deadline=$((SECONDS + ${OJS_DEMO_WAIT_S:-30}))
  until "$@"; do
    if [ "$SECONDS" -ge "$deadline" ]; then echo "FAIL: timed out waiting for $what" >&2; return 1; fi
    sleep 0.05
  done
}

# 1. The development backend on a free port.
target/debug/ojs-devserver --port 0 > "$work/devserver.log" 2>&1 &
pids+=($!)
wait_until "the devserver" grep -qs 'listening on' "$work/devserver.log"
ojs_url=$(grep -o 'http://[0-9.:]*' "$work/devserver.log" | head -n1)
echo "devserver: $ojs_url"

# 2. The outbox table, with the package's command.
db="$work/app.db"
"$app/node_modules/.bin/ojs-relay" --database-url "sqlite://$db" migrate

# 3. The example app (in-process relay; on SQLite it runs in a relay host process).
cp -r "$here/example" "$work/example"
ln -s "$app/node_modules" "$work/example/node_modules"
(cd "$work/example" && OJS_URL="$ojs_url" DATABASE_FILE="$db" PORT=0 exec node app.js) > "$work/app.log" 2>&1 &
app_pid=$!
pids+=($app_pid)
wait_until "the example app" grep -qs 'listening on' "$work/app.log" || { cat "$work/app.log"; exit 1; }
app_url=$(grep -o 'http://[0-9.:]*' "$work/app.log" | head -n1)
echo "example app: $app_url"

# 4. The worker: the example's handlers (jobs.js) on the package's `ojs-worker`.
(cd "$work/example" && OJS_URL="$ojs_url" DATABASE_FILE="$db" exec "$app/node_modules/.bin/ojs-worker" \
  --handlers ./jobs.js --queue default) > "$work/worker.log" 2>&1 &
worker_pid=$!
pids+=($worker_pid)
wait_until "the worker" grep -qs 'ojs-worker: running' "$work/worker.log" || { cat "$work/worker.log"; exit 1; }
echo "worker: $(grep -o 'running .*' "$work/worker.log" | head -n1)"

post() { curl -s -w ' -> HTTP %{http_code}\n' -H 'content-type: application/json' -d "$1" "$app_url/signup"; }
echo "signup that commits:     $(post '{"email":"ada@example.com"}')"
echo "signup that rolls back:  $(post '{"email":"bob@example.com","plan":"declined"}')"

# 5. What the backend received, once the relay has settled every row (one sent, nothing
#    pending, failed or in flight: the outbox status, read with the package's command).
settled() {
  "$app/node_modules/.bin/ojs-relay" --database-url "sqlite://$db" status --json | node -e '
let s = ""; process.stdin.on("data", (d) => (s += d)).on("end", () => {
  const st = JSON.parse(s);
  process.exit(st.sent >= 1 && st.pending === 0 && st.failed === 0 && st.in_flight === 0 ? 0 : 1);
});'
}
wait_until "the relay to settle the committed row" settled
curl -s "$ojs_url/_dev/received" | node -e '
let s = ""; process.stdin.on("data", (d) => (s += d)).on("end", () => {
  const jobs = JSON.parse(s).jobs;
  console.log(`backend received ${jobs.length} job(s):`);
  for (const j of jobs) console.log(`  ${j.id} ${j.type} args=${JSON.stringify(j.args)}`);
  const ok = jobs.length === 1 && jobs[0].type === "email.welcome";
  console.log(ok ? "OK: only the committed signup reached the backend" : "FAIL: expected exactly the committed job");
  process.exit(ok ? 0 : 1);
});'
"$app/node_modules/.bin/ojs-relay" --database-url "sqlite://$db" status

# 6. The worker ran the committed job: the handler's line, and the backend's job completed
#    with the handler's result. The rolled-back signup never ran.
wait_until "the handler's line" grep -qs 'welcome email sent to ada@example.com' "$work/worker.log" \
  || { cat "$work/worker.log"; exit 1; }
echo "worker: $(grep 'welcome email sent to' "$work/worker.log")"
job_id=$(curl -s "$ojs_url/_dev/received" | node -e '
let s = ""; process.stdin.on("data", (d) => (s += d)).on("end", () => console.log(JSON.parse(s).jobs[0].id));')
completed() {
  curl -s "$ojs_url/ojs/v1/jobs/$job_id" | node -e '
let s = ""; process.stdin.on("data", (d) => (s += d)).on("end", () => {
  const job = JSON.parse(s).job;
  process.exit(job && job.state === "completed" ? 0 : 1);
});'
}
wait_until "the job to complete at the backend" completed
curl -s "$ojs_url/ojs/v1/jobs/$job_id" | node -e '
let s = ""; process.stdin.on("data", (d) => (s += d)).on("end", () => {
  const job = JSON.parse(s).job;
  console.log(`backend: job ${job.id} ${job.state}, result ${JSON.stringify(job.result)}`);
  process.exit(job.result && job.result.sentTo === "ada@example.com" ? 0 : 1);
});'
if grep -q 'bob@example.com' "$work/worker.log"; then echo "FAIL: the rolled-back signup ran" >&2; exit 1; fi

# 7. Graceful shutdown: SIGTERM flushes the relay and the app exits by itself; the worker
#    stops fetching, lets the jobs in flight finish and exits 0.
kill -TERM "$app_pid"
app_exited() { ! kill -0 "$app_pid" 2>/dev/null; }
wait_until "the app to exit on SIGTERM" app_exited || exit 1
echo "example app stopped on SIGTERM"
kill -TERM "$worker_pid"
worker_exited() { ! kill -0 "$worker_pid" 2>/dev/null; }
wait_until "the worker to exit on SIGTERM" worker_exited || exit 1
worker_status=0
wait "$worker_pid" || worker_status=$?
[ "$worker_status" = 0 ] || { echo "FAIL: the worker exited $worker_status" >&2; cat "$work/worker.log"; exit 1; }
echo "worker stopped on SIGTERM (exit 0)"
