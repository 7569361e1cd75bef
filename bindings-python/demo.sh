#!/usr/bin/env bash
# The Django example end to end on SQLite + ojs-devserver: migrate, run the app (runserver),
# sign up one user in a transaction that commits and one whose transaction rolls back after
# enqueueing (the Django task send_welcome), then show that the backend received only the
# committed user's welcome job, that the app's ojs/events/stream announced it, and what
# ojs/metrics and ojs/readyz say; then `manage.py ojs_worker` runs the job (the task prints the
# welcome line) and stops on SIGTERM.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")

cargo build -q -p ojs-devserver
wheel=$("$here/build-wheel.sh")
venv="$repo/target/py-demo-venv"
[ -x "$venv/bin/python" ] || python3 -m venv "$venv"
"$venv/bin/python" -m pip show -q django >/dev/null 2>&1 || "$venv/bin/python" -m pip install -q "django==5.2.*"
# Django 5.2 has no django.tasks: the backport (the version the tests use).
"$venv/bin/python" -m pip show -q django-tasks >/dev/null 2>&1 || "$venv/bin/python" -m pip install -q "django-tasks==0.12.0"
"$venv/bin/python" -m pip install -q --force-reinstall --no-deps "$wheel"
py="$venv/bin/python"

work=$(mktemp -d)
pids=()
cleanup() { for pid in "${pids[@]}"; do kill "$pid" 2>/dev/null || true; done; wait 2>/dev/null || true; rm -rf "$work"; }
trap cleanup EXIT
free_port() { "$py" -c 'import socket; s=socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'; }

"$repo/target/debug/ojs-devserver" --port 0 > "$work/devserver.log" 2>&1 &
pids+=($!)
# Every wait below is for a condition, with a generous deadline (30 s): a busy machine is slow.
deadline=$((SECONDS + 30))
until grep -q "listening on" "$work/devserver.log" 2>/dev/null; do
  [ $SECONDS -lt $deadline ] || { echo "demo: ojs-devserver did not start" >&2; cat "$work/devserver.log" >&2; exit 1; }
  sleep 0.05
done
backend=$(sed -n 's/^ojs-devserver listening on //p' "$work/devserver.log")
echo "demo: ojs-devserver at $backend"

# The token that may read the app's ojs/ surface (example/exampleapp/ojs_access.py).
export EXAMPLE_DATA_DIR="$work" OJS_URL="$backend" EXAMPLE_OJS_TOKEN="demo-token"
cd "$here/example"
"$py" manage.py migrate -v 0
echo "demo: migrated (auth tables + the outbox table from the core's DDL)"

port=$(free_port)
"$py" manage.py runserver --noreload "127.0.0.1:$port" > "$work/app.log" 2>&1 &
app=$!
pids+=($app)
app_url="http://127.0.0.1:$port"
"$py" - "$app_url" <<'PY'
import sys, time, urllib.request
deadline = time.monotonic() + 30
while time.monotonic() < deadline:
    try:
        urllib.request.urlopen(sys.argv[1] + "/", timeout=5)
    except urllib.error.HTTPError:
        sys.exit(0)  # the app answers (404 on /)
    except OSError:
        time.sleep(0.05)
sys.exit("the example app did not start within 30 s")
PY
echo "demo: example app at $app_url"

"$py" - "$app_url" "$backend" "$work/committed_job" <<'PY'
import json, subprocess, sys, time, urllib.parse, urllib.request
app, backend, committed_file = sys.argv[1], sys.argv[2], sys.argv[3]

def signup(email, fail=False):
    data = {"email": email, **({"fail": "1"} if fail else {})}
    request = urllib.request.Request(app + "/signup", data=urllib.parse.urlencode(data).encode(),
                                     headers={"X-Request-ID": f"demo-{email}"})
    try:
        with urllib.request.urlopen(request, timeout=10) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read())

def received():
    with urllib.request.urlopen(backend + "/_dev/received", timeout=5) as response:
        return json.loads(response.read())["jobs"]

import threading

def get(path):
    request = urllib.request.Request(app + path, headers={"Authorization": "Bearer demo-token"})
    return urllib.request.urlopen(request, timeout=10)

# The relay's event stream, as `curl -N` would read it, from before the first signup.
stream_events = []
stream = get("/ojs/events/stream?types=job.*")
assert stream.headers["Content-Type"] == "text/event-stream", stream.headers

def read_stream():
    for line in stream:
        if line.startswith(b"data: "):
            stream_events.append(json.loads(line[len(b"data: "):]))

threading.Thread(target=read_stream, daemon=True).start()
print("demo: reading ojs/events/stream (the in-process relay's events)")

started = time.time()
status, committed = signup("ada@example.com")
print(f"demo: signup ada@example.com -> {status}, committed, job {committed['job_id']}")
status, rolled_back = signup("bob@example.com", fail=True)
print(f"demo: signup bob@example.com -> {status}, rolled back after enqueueing job {rolled_back['job_id']}")

def outbox_status():
    out = subprocess.run([sys.executable, "manage.py", "ojs_outbox", "status", "--json"], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out)

def wait(condition, what):
    deadline = time.monotonic() + 30
    while not condition():
        if time.monotonic() > deadline:
            sys.exit(f"demo: FAILED, {what} within 30 s")
        time.sleep(0.01)

wait(lambda: any(job["id"] == committed["job_id"] for job in received()),
     "the committed job did not reach the backend")
job = next(job for job in received() if job["id"] == committed["job_id"])
latency_ms = job["received_at_us"] / 1000 - started * 1000
# The outbox settles to exactly one row, sent: the rolled-back signup left no row behind, so no
# relay can ever send its job.
settled = {"pending": 0, "failed": 0, "sent": 1, "dead": 0, "in_flight": 0}
wait(lambda: {key: outbox_status()[key] for key in settled} == settled,
     f"the outbox did not settle to one sent row (status {outbox_status()})")
print("demo: the outbox holds one row, sent; the rolled-back signup left none")
jobs = received()
print(f"demo: the backend received {len(jobs)} job(s):")
for job in jobs:
    print(f"  {job['type']} args={job['args']} id={job['id']} request_id={job['meta'].get('ojs.context.request_id')}")
assert [j["id"] for j in jobs] == [committed["job_id"]], "only the committed job may arrive"
assert job["type"] == "exampleapp.tasks.send_welcome", job["type"]
assert job["args"] == [{"args": [committed["user_id"]], "kwargs": {}}], job["args"]
assert not any(j["id"] == rolled_back["job_id"] for j in jobs)
wait(lambda: any(e["subject"] == committed["job_id"] for e in stream_events),
     "the committed job's job.enqueued event did not come on the stream")
print("demo: events/stream:", [(e["type"], e["subject"]) for e in stream_events])
assert all(e["subject"] != rolled_back["job_id"] for e in stream_events)
metrics = get("/ojs/metrics").read().decode()
sent_total = next(line for line in metrics.splitlines()
                  if line.startswith("ojs_relay_jobs_sent_total{"))
print(f"demo: ojs/metrics: {sent_total}")
print(f"demo: ojs/readyz: {get('/ojs/readyz').read().decode()}")
try:
    urllib.request.urlopen(app + "/ojs/metrics", timeout=10)
    sys.exit("demo: FAILED, ojs/metrics answered without the token")
except urllib.error.HTTPError as error:
    assert error.code == 403, error.code
print("demo: without the token: 403")
print(f"demo: OK: the committed signup's job arrived (about {latency_ms:.0f} ms after the request "
      "started); the rolled-back signup's job never did")
open(committed_file, "w").write(committed["job_id"])
PY

# SIGTERM: a background job of a script ignores SIGINT. Nothing is lost by it: rows not yet
# sent stay pending in the outbox for the next relay.
kill -TERM "$app"
wait "$app" 2>/dev/null || true
echo "demo: app stopped"

# The worker: fetches the welcome job from the backend and runs the task, which prints its line.
"$py" manage.py ojs_worker > "$work/worker.log" 2>&1 &
worker=$!
pids+=($worker)
echo "demo: manage.py ojs_worker started"
deadline=$((SECONDS + 30))
until grep -q "welcome email sent to" "$work/worker.log"; do
  [ $SECONDS -lt $deadline ] || { echo "demo: FAILED, the worker did not run the task within 30 s" >&2; cat "$work/worker.log" >&2; exit 1; }
  kill -0 "$worker" 2>/dev/null || { echo "demo: FAILED, the worker exited" >&2; cat "$work/worker.log" >&2; exit 1; }
  sleep 0.05
done
echo "demo: worker: $(grep "welcome email sent to" "$work/worker.log")"
"$py" - "$backend" "$(cat "$work/committed_job")" <<'PY'
import json, sys, time, urllib.request
backend, job_id = sys.argv[1], sys.argv[2]
deadline = time.monotonic() + 30
while True:
    with urllib.request.urlopen(f"{backend}/ojs/v1/jobs/{job_id}", timeout=5) as response:
        job = json.loads(response.read())["job"]
    if job["state"] == "completed":
        break
    if time.monotonic() > deadline:
        sys.exit(f"demo: FAILED, the job is {job['state']}, not completed, after 30 s")
    time.sleep(0.05)
print(f"demo: the backend has the job completed, result {job['result']!r}")
PY
kill -TERM "$worker"
wait "$worker" || { echo "demo: FAILED, the worker exited with $?" >&2; cat "$work/worker.log" >&2; exit 1; }
summary=$(grep "^ojs_worker: stopped:" "$work/worker.log")
echo "demo: worker stopped (SIGTERM): $summary"
case "$summary" in *"1 completed, 0 failed"*) ;; *) echo "demo: FAILED, expected one completed job" >&2; exit 1 ;; esac
if grep -q "welcome email sent to bob@example.com" "$work/worker.log"; then
  echo "demo: FAILED, the rolled-back signup's task ran" >&2; exit 1
fi
