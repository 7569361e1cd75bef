"""Hot path under sustained load (issue 16): ``hot_dropped`` <= 1% of committed jobs while a Django
app commits about 1,500 transactions/s on a SQLite file, through the installed (release) wheel.

What runs: Django's ORM connection on a SQLite file in WAL mode (``init_command``, as
docs/django.md advises), the outbox table from the adapter's migration, the real
``ojs-devserver`` binary (release) as the backend, and the adapter's in-process relay with the
default configuration (only ``ojs_url`` set), started before the load as a serving process
starts it (``ojs.start_at_boot``).

The load: one thread offers OJS_SOAK_TPS transactions/s (1500) on a fixed schedule (transaction i
is due at i / rate; a late one starts at once, so the schedule catches up) for OJS_SOAK_SECONDS
(60). Each is ``transaction.atomic()`` around either ``ojs.enqueue_after_commit`` of one job or,
one transaction in OJS_SOAK_BULK_EVERY (50), ``ojs.enqueue_bulk`` of OJS_SOAK_BULK_SIZE (100)
jobs. Every OJS_SOAK_CHECKPOINT_S (5) s it counts the rows still waiting through Django's
connection (``status IN ('pending', 'failed')``) and reads the relay's counters.

After the load it waits (polling ``/_dev/stats``; deadline OJS_SOAK_DRAIN_TIMEOUT_S, 600) until
the devserver holds every committed job, then reads ``hot_dropped`` from the relay's Prometheus
text (``ojs_relay_wakeups_dropped_total``), compares the devserver's ids with the committed ids,
and prints the result (met / not met against <= 1%) and one line of JSON prefixed ``SOAK_JSON ``.
Exit status 0 when every committed job was delivered (met or not), 1 otherwise.

Run through scripts/soak.sh (builds the release wheel and devserver), or by hand with the venv of
bindings-python/bench.sh: ``OJS_DEVSERVER_BIN=target/release/ojs-devserver python soak.py``.
"""

import atexit
import json
import os
import subprocess
import sys
import tempfile
import threading
import time
import urllib.request
from pathlib import Path

import django
from django.conf import settings

RATE = float(os.environ.get("OJS_SOAK_TPS", "1500"))
SECONDS = float(os.environ.get("OJS_SOAK_SECONDS", "60"))
BULK_EVERY = int(os.environ.get("OJS_SOAK_BULK_EVERY", "50"))
BULK_SIZE = int(os.environ.get("OJS_SOAK_BULK_SIZE", "100"))
CHECKPOINT_S = float(os.environ.get("OJS_SOAK_CHECKPOINT_S", "5"))
DRAIN_TIMEOUT_S = float(os.environ.get("OJS_SOAK_DRAIN_TIMEOUT_S", "600"))
VERIFY_IDS = os.environ.get("OJS_SOAK_VERIFY_IDS", "1") != "0"
# For diagnosis only (the soak's result is with neither): adapter settings merged into OJS_CONFIG
# (JSON, e.g. '{"relay": {"hot_queue_capacity": 100000}}'), and a PRAGMA synchronous for
# Django's connection (e.g. NORMAL; SQLite's default is FULL: an fsync in every COMMIT).
EXTRA_CONFIG = json.loads(os.environ.get("OJS_SOAK_CONFIG") or "{}")
APP_SYNCHRONOUS = os.environ.get("OJS_SOAK_APP_SYNCHRONOUS")
TARGET = 0.01
REPO = Path(__file__).resolve().parents[2]
DEVSERVER = os.environ.get("OJS_DEVSERVER_BIN") or str(REPO / "target/release/ojs-devserver")
TABLE = "ojs_outbox"  # the default table (the migration's)


def say(*parts):
    print("soak[django]:", *parts, flush=True)


# -- the devserver ---------------------------------------------------------------------------------

class Devserver:
    """A real ojs-devserver process on a free port, waited for by its 'listening on' line."""

    def __init__(self, binary):
        if not os.path.exists(binary):
            raise SystemExit(f"{binary} is missing: cargo build --release -p ojs-devserver")
        self.process = subprocess.Popen([binary, "--port", "0"], stdout=subprocess.PIPE,
                                        stderr=subprocess.DEVNULL, text=True)
        line = self.process.stdout.readline().strip()
        prefix = "ojs-devserver listening on "
        if not line.startswith(prefix):
            self.process.kill()
            raise SystemExit(f"ojs-devserver did not start: {line!r}")
        self.url = line[len(prefix):]
        self.pid = self.process.pid

    def get(self, path):
        with urllib.request.urlopen(self.url + path, timeout=60) as response:
            return json.loads(response.read())

    def stop(self):
        if self.process.poll() is None:
            self.process.terminate()
            self.process.wait()
        self.process.stdout.close()


# -- CPU and load of the machine --------------------------------------------------------------------

TICK = os.sysconf("SC_CLK_TCK")


def machine_busy_s():
    """CPU seconds all cores spent on anything but idle and iowait since boot."""
    with open("/proc/stat") as f:
        fields = [int(v) for v in f.readline().split()[1:]]
    user, nice, system, _idle, _iowait, irq, softirq, steal = fields[:8]
    return (user + nice + system + irq + softirq + steal) / TICK


def process_cpu_s(pid):
    """CPU seconds (user + system) of a process, all its threads."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            fields = f.read().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / TICK
    except (FileNotFoundError, ProcessLookupError):
        return 0.0


def threads_cpu_s(pid):
    """{thread name: CPU seconds} of a process's threads (summed per name)."""
    out = {}
    for tid in os.listdir(f"/proc/{pid}/task"):
        try:
            with open(f"/proc/{pid}/task/{tid}/stat") as f:
                text = f.read()
        except FileNotFoundError:
            continue
        name = text[text.index("(") + 1:text.rindex(")")]
        fields = text.rsplit(")", 1)[1].split()
        out[(tid, name)] = (int(fields[11]) + int(fields[12])) / TICK
    return out


def thread_delta(before, after):
    by_name = {}
    for key, value in after.items():
        by_name[key[1]] = by_name.get(key[1], 0.0) + value - before.get(key, 0.0)
    return {name: round(cpu, 2) for name, cpu in sorted(by_name.items(), key=lambda kv: -kv[1])
            if cpu >= 0.05}


# -- Prometheus text ------------------------------------------------------------------------------

def prometheus_samples(text):
    """{metric name with labels: value} of an exposition."""
    samples = {}
    for line in (text or "").splitlines():
        if line and not line.startswith("#"):
            name, _, value = line.rpartition(" ")
            samples[name] = float(value)
    return samples


def sample(samples, name):
    return next((v for k, v in samples.items() if k == name or k.startswith(name + "{")), None)


def histogram_quantile(samples, name, q):
    """Upper bound of the bucket holding quantile q (the Prometheus estimate without interpolation)."""
    buckets = []
    for key, value in samples.items():
        if key.startswith(name + "_bucket{"):
            le = key.split(',le="', 1)[1].split('"', 1)[0]
            buckets.append((float("inf") if le == "+Inf" else float(le), value))
    buckets.sort()
    if not buckets or buckets[-1][1] == 0:
        return None
    total = buckets[-1][1]
    for bound, count in buckets:
        if count >= q * total:
            return bound
    return None


def relay_summary(text):
    s = prometheus_samples(text)
    out = {"hot_dropped": int(sample(s, "ojs_relay_wakeups_dropped_total") or 0),
           "sent": int(sample(s, "ojs_relay_jobs_sent_total") or 0)}
    for phase in ("claim", "send", "settle"):
        count = sample(s, f"ojs_relay_{phase}_duration_seconds_count") or 0
        total = sample(s, f"ojs_relay_{phase}_duration_seconds_sum") or 0
        out[f"{phase}_count"] = int(count)
        out[f"{phase}_mean_ms"] = round(1000 * total / count, 3) if count else None
    for q in (0.5, 0.99):
        bound = histogram_quantile(s, "ojs_relay_delivery_lag_seconds", q)
        out[f"delivery_lag_p{int(q * 100)}_le_s"] = bound
    return out


def percentile(values, q):
    if not values:
        return None
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


# -- the run -----------------------------------------------------------------------------------

def main():
    devserver = Devserver(DEVSERVER)
    atexit.register(devserver.stop)  # also when the run fails
    work = tempfile.mkdtemp(prefix="ojs-py-soak-")
    db_file = os.path.join(work, "soak.db")
    settings.configure(
        DATABASES={"default": {"ENGINE": "django.db.backends.sqlite3", "NAME": db_file,
                               "OPTIONS": {"init_command": "PRAGMA journal_mode=WAL;" + (
                                   f"PRAGMA synchronous={APP_SYNCHRONOUS};" if APP_SYNCHRONOUS else "")}}},
        INSTALLED_APPS=["ojs_adapter_django"],
        USE_TZ=True,
        # Every setting but the URL: the core's default (unless OJS_SOAK_CONFIG, for diagnosis).
        OJS_CONFIG={"ojs_url": devserver.url, **EXTRA_CONFIG},
    )
    django.setup()
    from django.core.management import call_command
    from django.db import connection, transaction

    from ojs_adapter_django import ojs

    call_command("migrate", "ojs_adapter_django", verbosity=0)
    ojs.start_at_boot()  # what AppConfig.ready does in a serving process
    assert ojs.metrics() is not None, "no in-process relay runs"

    def pending_rows():
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT COUNT(*) FROM {TABLE} WHERE status IN ('pending', 'failed')")
            return cursor.fetchone()[0]

    with connection.cursor() as cursor:
        cursor.execute("PRAGMA synchronous")
        app_synchronous = {0: "OFF", 1: "NORMAL", 2: "FULL", 3: "EXTRA"}[cursor.fetchone()[0]]
    n_tx = int(RATE * SECONDS)
    singles = n_tx - n_tx // BULK_EVERY
    bulks = n_tx // BULK_EVERY
    say(f"Django {django.get_version()}, Python {sys.version.split()[0]}, SQLite file {db_file} (WAL), "
        f"devserver {devserver.url} ({DEVSERVER})")
    say(f"offering {RATE:g} tx/s for {SECONDS:g} s: {n_tx} transactions = {singles} x 1 job + "
        f"{bulks} x {BULK_SIZE} jobs (one in {BULK_EVERY}) = {singles + bulks * BULK_SIZE} jobs, "
        f"{(singles + bulks * BULK_SIZE) / SECONDS:.0f} jobs/s; relay config: "
        f"{json.dumps(EXTRA_CONFIG) if EXTRA_CONFIG else 'the default'}; "
        f"Django's connection: synchronous={app_synchronous}")

    committed_ids = []      # every job id, in commit order
    commit_at = []          # wall-clock commit time (s) per transaction
    tx_of_job = []          # index into commit_at per job id
    schedule_lag = []       # start - due, seconds
    tx_seconds = []         # begin..commit
    checkpoints = []
    period = 1.0 / RATE

    load_before = os.getloadavg()
    busy0, self0, dev0 = machine_busy_s(), process_cpu_s(os.getpid()), process_cpu_s(devserver.pid)
    threads0 = threads_cpu_s(os.getpid())
    started = time.perf_counter()
    next_checkpoint = started + CHECKPOINT_S
    end = started + SECONDS
    i = 0
    perf, sleep, wall = time.perf_counter, time.sleep, time.time
    while i < n_tx:
        due = started + i * period
        now = perf()
        if now < due:
            sleep(due - now)
            now = perf()
        if now >= end:
            break  # the duration is over: what the app could not start in it is not offered later
        schedule_lag.append(now - due)
        if (i + 1) % BULK_EVERY == 0:
            jobs = [{"type": "soak.bulk", "args": [i, k]} for k in range(BULK_SIZE)]
            with transaction.atomic():
                ids = ojs.enqueue_bulk(jobs)
        else:
            with transaction.atomic():
                ids = [ojs.enqueue_after_commit("soak.single", [i])]
        done = perf()
        tx_seconds.append(done - now)
        commit_at.append(wall())
        committed_ids.extend(ids)
        tx_of_job.extend([i] * len(ids))
        i += 1
        if done >= next_checkpoint:
            metrics = ojs.metrics() or {}
            point = {"t_s": round(done - started, 1), "tx": i, "jobs": len(committed_ids),
                     "pending_rows": pending_rows(), "hot_dropped": metrics.get("hot_dropped"),
                     "sent": metrics.get("sent")}
            checkpoints.append(point)
            say("checkpoint", json.dumps(point))
            next_checkpoint += CHECKPOINT_S
    load_seconds = perf() - started
    busy1, self1, dev1 = machine_busy_s(), process_cpu_s(os.getpid()), process_cpu_s(devserver.pid)
    threads1 = threads_cpu_s(os.getpid())
    load_after = os.getloadavg()
    final_point = {"t_s": round(load_seconds, 1), "tx": i, "jobs": len(committed_ids),
                   "pending_rows": pending_rows(), "hot_dropped": (ojs.metrics() or {}).get("hot_dropped"),
                   "sent": (ojs.metrics() or {}).get("sent")}
    checkpoints.append(final_point)
    say("end of load", json.dumps(final_point))

    # Wait for the devserver to hold every committed job (a condition, polled).
    jobs_committed = len(committed_ids)
    drain_started = perf()
    deadline = drain_started + DRAIN_TIMEOUT_S
    while True:
        stats = devserver.get("/_dev/stats")
        if stats["jobs"] >= jobs_committed or perf() > deadline:
            break
        sleep(0.1)
    drain_seconds = perf() - drain_started
    say(f"devserver holds {stats['jobs']} of {jobs_committed} jobs, {drain_seconds:.1f} s after the load")

    text = ojs.metrics_text()
    relay = relay_summary(text)
    hot_dropped_counter = (ojs.metrics() or {}).get("hot_dropped")
    with connection.cursor() as cursor:
        cursor.execute(f"SELECT status, COUNT(*) FROM {TABLE} GROUP BY status")
        rows_by_status = dict(cursor.fetchall())

    missing = None
    latency = {}
    if VERIFY_IDS:
        received = devserver.get("/_dev/received")
        at = {job["id"]: job["received_at_us"] for job in received["jobs"]}
        missing = sum(1 for job_id in committed_ids if job_id not in at)
        lags = [at[job_id] / 1e6 - commit_at[tx] for job_id, tx in zip(committed_ids, tx_of_job)
                if job_id in at]
        latency = {f"p{p}_ms": round(1000 * percentile(lags, p / 100), 1) for p in (50, 90, 99)}
        latency["max_ms"] = round(1000 * max(lags), 1) if lags else None
        latency["over_1s_share"] = round(sum(1 for v in lags if v > 1.0) / max(1, len(lags)), 4)
        del received
    ojs.stop_relay()
    devserver_cpu = process_cpu_s(devserver.pid) - dev0
    devserver.stop()

    delivered = stats["jobs"]
    hot_dropped = relay["hot_dropped"]
    share = hot_dropped / jobs_committed if jobs_committed else 0.0
    no_loss = delivered == jobs_committed and (missing in (None, 0))
    met = share <= TARGET
    self_cpu = self1 - self0
    result = {
        "binding": "django", "framework": f"Django {django.get_version()}",
        "offered_tps": RATE, "seconds": SECONDS, "bulk_every": BULK_EVERY, "bulk_size": BULK_SIZE,
        "tx_committed": i, "single_tx": i - i // BULK_EVERY, "bulk_tx": i // BULK_EVERY,
        "jobs_committed": jobs_committed, "load_seconds": round(load_seconds, 2),
        "achieved_tps": round(i / load_seconds, 1),
        "achieved_jobs_per_s": round(jobs_committed / load_seconds, 1),
        "hot_dropped": hot_dropped, "hot_dropped_share": round(share, 5),
        "hot_dropped_metrics_call": hot_dropped_counter,
        "max_pending_rows": max(p["pending_rows"] for p in checkpoints),
        "checkpoints": checkpoints,
        "delivered": delivered, "missing_ids": missing, "delivered_equals_committed": no_loss,
        "deliveries": stats["deliveries"], "drain_seconds_after_load": round(drain_seconds, 2),
        "rows_by_status": rows_by_status,
        "commit_to_received": latency,
        "schedule_lag_ms": {"p50": round(1000 * percentile(schedule_lag, 0.5), 2),
                            "p99": round(1000 * percentile(schedule_lag, 0.99), 2),
                            "max": round(1000 * max(schedule_lag), 1)},
        "tx_ms": {"p50": round(1000 * percentile(tx_seconds, 0.5), 3),
                  "p99": round(1000 * percentile(tx_seconds, 0.99), 3),
                  "max": round(1000 * max(tx_seconds), 1)},
        "relay": relay,
        "cpu_s": {"app_process": round(self_cpu, 2), "devserver": round(devserver_cpu, 2),
                  "other": round((busy1 - busy0) - self_cpu - (dev1 - dev0), 2),
                  "machine_capacity": round(load_seconds * os.cpu_count(), 1),
                  "app_threads": thread_delta(threads0, threads1)},
        "loadavg_before": [round(v, 2) for v in load_before],
        "loadavg_after": [round(v, 2) for v in load_after],
        "target": TARGET, "met": met,
        "extra_config": EXTRA_CONFIG, "app_synchronous": app_synchronous,
    }
    print()
    print(f"Django soak: {i} transactions, {jobs_committed} jobs committed in {load_seconds:.1f} s "
          f"({result['achieved_tps']} tx/s of {RATE:g} offered, {result['achieved_jobs_per_s']} jobs/s)")
    print(f"  hot_dropped            {hot_dropped} = {100 * share:.2f}% of committed jobs "
          f"(target <= {100 * TARGET:g}%): {'met' if met else 'NOT met'}")
    print(f"  max pending rows       {result['max_pending_rows']} (checkpoints every {CHECKPOINT_S:g} s: "
          f"{', '.join(str(p['pending_rows']) for p in checkpoints)})")
    print(f"  delivered              {delivered} of {jobs_committed}"
          f"{'' if missing is None else f', {missing} committed ids missing at the devserver'}: "
          f"{'no job lost' if no_loss else 'JOBS MISSING'} ({stats['deliveries']} deliveries, "
          f"drained {drain_seconds:.1f} s after the load)")
    if latency:
        print(f"  commit -> received     p50 {latency['p50_ms']} ms, p90 {latency['p90_ms']}, "
              f"p99 {latency['p99_ms']}, max {latency['max_ms']}; {100 * latency['over_1s_share']:.1f}% over 1 s")
    print(f"  relay rounds           claims {relay['claim_count']} (mean {relay['claim_mean_ms']} ms), "
          f"sends {relay['send_count']} (mean {relay['send_mean_ms']} ms), settles {relay['settle_count']} "
          f"(mean {relay['settle_mean_ms']} ms); {relay['sent']} sent")
    print(f"  transaction            p50 {result['tx_ms']['p50']} ms, p99 {result['tx_ms']['p99']}, "
          f"max {result['tx_ms']['max']}; schedule lag p99 {result['schedule_lag_ms']['p99']} ms, "
          f"max {result['schedule_lag_ms']['max']}")
    print(f"  CPU s during the load  app+relay {result['cpu_s']['app_process']}, devserver "
          f"{result['cpu_s']['devserver']}, other {result['cpu_s']['other']} (of "
          f"{result['cpu_s']['machine_capacity']}); threads {result['cpu_s']['app_threads']}")
    print(f"  load average           {result['loadavg_before']} before, {result['loadavg_after']} after")
    print("SOAK_JSON " + json.dumps(result))
    return 0 if no_loss else 1


if __name__ == "__main__":
    sys.exit(main())
