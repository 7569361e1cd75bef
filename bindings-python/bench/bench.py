"""Staging cost of ojs-adapter-django on Django's connection (issue 16's two staging ratios),
SQLite file and PostgreSQL (OJS_TEST_DATABASE_URL):

1. single: ``enqueue_after_commit`` per job against a raw parameterized INSERT of the same row
   through the same Django cursor (the core's single-row INSERT text, fetched once; per row a
   fresh ``uuid4`` text, the type, ``json.dumps`` of the args, ``'{}'``, ``'{}'``, None).
   Target: <= 1.10x.
2. bulk: ``enqueue_bulk`` of 1,000 jobs, per job, against ONE raw multi-row INSERT of the same
   1,000 rows through the same kind of Django cursor. The raw statement is the core's own bulk
   statement for 1,000 jobs (``Bridge.stage``, fetched once before timing, in the placeholder
   style the adapter asks for: ``?`` on SQLite when queries are not logged, ``%s`` otherwise):
   the columns job_id, job_type, job_args, job_options, job_meta, tenant_id; per row three bound
   parameters (a fresh UUIDv7 text, the job's type, ``json.dumps`` of its args) and the
   literals ``'{}'``, ``'{}'``, NULL for the empty options/meta and the missing tenant (exactly
   what the core's bulk writes; on PostgreSQL inside the same ``CAST(.. AS uuid/jsonb)``). The
   raw side builds its 3,000 parameters from the same list of job dicts the adapter gets, inside
   the timed section, and runs one ``cursor.execute``. Target: per job <= 1.25x. Printed for
   information: the same statement with its parameters built before the timer (the
   database's and Django's share alone).

Each round runs every variant once, each in its own ``transaction.atomic()`` that is rolled
back (the timer covers the calls, not BEGIN/ROLLBACK); the order of the variants rotates from
round to round so that a noisy neighbour or a checkpoint weighs on all of them alike. Two
warm-up rounds, then BENCH_ROUNDS (default 15); each result is the median over the rounds, and
each ratio is the ratio of the two medians (the median of the per-round ratios and their
quartiles are printed too)."""

import json
import os
import sys
import tempfile
import time
import uuid
from urllib.parse import unquote, urlparse

import django
from django.conf import settings

work = tempfile.mkdtemp(prefix="ojs-py-bench-")
databases = {"sqlite": {"ENGINE": "django.db.backends.sqlite3",
                        "NAME": os.path.join(work, "bench.db"),
                        "OPTIONS": {"init_command": "PRAGMA journal_mode=WAL;"}}}
pg_url = os.environ.get("OJS_TEST_DATABASE_URL")
if pg_url:
    pg = urlparse(pg_url)
    databases["postgres"] = {"ENGINE": "django.db.backends.postgresql",
                             "NAME": pg.path.lstrip("/") or "postgres",
                             "USER": unquote(pg.username or "postgres"),
                             "PASSWORD": unquote(pg.password or ""),
                             "HOST": pg.hostname, "PORT": str(pg.port or 5432)}
databases["default"] = databases["sqlite"]
settings.configure(DATABASES=databases, INSTALLED_APPS=["ojs_adapter_django"], USE_TZ=True)
django.setup()

from django.db import connections, transaction  # noqa: E402

from ojs_adapter_django import OJS  # noqa: E402
from ojs_adapter_django.facade import _bulk_placeholder  # noqa: E402

TABLE = "py_bench_outbox"
JOBS = int(os.environ.get("BENCH_JOBS", "1000"))  # single calls per round
BULK = 1000  # jobs per bulk
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "15"))
WARMUP = 2
SINGLE_TARGET = 1.10
BULK_TARGET = 1.25


def uuid7_text(urandom=os.urandom, time_ns=time.time_ns):
    """A UUIDv7 text (RFC 9562: 48-bit Unix milliseconds, version 7, 74 random bits) as the
    raw side writes it: time-ordered like the core's ids, from the OS random source like
    ``uuid.uuid4`` (Python 3.11 has no ``uuid.uuid7``)."""
    rand = int.from_bytes(urandom(10), "big")
    value = ((time_ns() // 1_000_000) << 80 | (0x7000 | rand >> 68) << 64
             | 0x8000000000000000 | rand & 0x3FFFFFFFFFFFFFFF)
    h = f"{value:032x}"
    return f"{h[:8]}-{h[8:12]}-{h[12:16]}-{h[16:20]}-{h[20:]}"


class Rollback(Exception):
    pass


def timed(alias, body, prepare=None):
    """Wall time of `body(cursor)` (`body(cursor, prepare())` with `prepare`, untimed) inside a
    transaction that is then rolled back."""
    elapsed = None
    try:
        with transaction.atomic(using=alias):
            with connections[alias].cursor() as cursor:
                args = (cursor,) if prepare is None else (cursor, prepare())
                started = time.perf_counter()
                body(*args)
                elapsed = time.perf_counter() - started
            raise Rollback
    except Rollback:
        pass
    return elapsed


def median(values):
    ordered = sorted(values)
    return ordered[len(ordered) // 2]


def quartiles(values):
    ordered = sorted(values)
    return ordered[len(ordered) // 4], ordered[(3 * len(ordered)) // 4]


def met(ratio, target):
    return "met" if ratio <= target else "NOT met"


def bench(name):
    adapter = OJS({"ojs_url": "http://127.0.0.1:9", "outbox": {"table_name": TABLE},
                   "relay": {"mode": "external"}})
    connection = connections[name]
    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {TABLE}")
    adapter.create_outbox_table(name)
    bridge = adapter.bridge(name)

    # The core's single-row INSERT (as enqueue_after_commit runs it: %s placeholders).
    one = json.loads(bridge.stage(connection.vendor, "percent",
                                  json.dumps([{"type": "email.welcome", "args": [1]}])))
    insert_one = one["statements"][0]["sql"]

    bulk_jobs = [{"type": "email.welcome", "args": [i]} for i in range(BULK)]
    # The core's bulk statement for these 1,000 jobs, in the placeholder style the adapter
    # asks for on this connection: one statement, 3 parameters per row.
    staged = json.loads(bridge.stage(connection.vendor, _bulk_placeholder(connection),
                                     json.dumps(bulk_jobs)))
    assert len(staged["statements"]) == 1, "the core split the bulk: compare per statement"
    insert_many = staged["statements"][0]["sql"]
    assert len(staged["statements"][0]["params"]) == 3 * BULK, "row shape changed"

    dumps = json.dumps
    uuid4 = uuid.uuid4

    def raw_single(cursor):
        for i in range(JOBS):
            cursor.execute(insert_one, [uuid7_text(), "email.welcome", dumps([i]), "{}", "{}", None])

    def raw_single_v4(cursor):
        for i in range(JOBS):
            cursor.execute(insert_one, [str(uuid4()), "email.welcome", dumps([i]), "{}", "{}", None])

    def single(cursor):
        for i in range(JOBS):
            adapter.enqueue_after_commit("email.welcome", [i], using=name)

    def multi_params():
        params = []
        append = params.append
        for job in bulk_jobs:
            append(uuid7_text())
            append(job["type"])
            append(dumps(job["args"]))
        return params

    def raw_multi(cursor):
        cursor.execute(insert_many, multi_params())

    def raw_multi_prebuilt(cursor, params):
        cursor.execute(insert_many, params)

    def bulk(cursor):
        adapter.enqueue_bulk(bulk_jobs, using=name)

    # raw_multi_prebuilt, for information: the raw statement alone, its parameters (fresh
    # ids) built before the timer starts.
    # raw_single_v4, for information: the single-row baseline before issue 16 (uuid4 ids).
    variants = [("raw_single", raw_single, None), ("single", single, None),
                ("raw_single_v4", raw_single_v4, None),
                ("raw_multi", raw_multi, None), ("bulk", bulk, None),
                ("raw_multi_prebuilt", raw_multi_prebuilt, multi_params)]
    times = {key: [] for key, _, _ in variants}
    for index in range(WARMUP + ROUNDS):
        shift = index % len(variants)
        for key, body, prepare in variants[shift:] + variants[:shift]:
            elapsed = timed(name, body, prepare)
            if index >= WARMUP:
                times[key].append(elapsed)

    # Check once that both bulk paths write the same values (and not just as many rows).
    try:
        with transaction.atomic(using=name):
            with connection.cursor() as cursor:
                raw_multi(cursor)
                bulk(cursor)
                cursor.execute(f"SELECT job_type, job_args, job_options, job_meta, tenant_id,"
                               f" COUNT(*) FROM {TABLE} GROUP BY 1, 2, 3, 4, 5")
                groups = cursor.fetchall()
            raise Rollback
    except Rollback:
        pass
    assert len(groups) == BULK and all(row[-1] == 2 for row in groups), groups[:3]

    with connection.cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {TABLE}")
    adapter.reset()

    m = {key: median(values) for key, values in times.items()}
    single_ratios = [s / r for s, r in zip(times["single"], times["raw_single"])]
    bulk_ratios = [b / r for b, r in zip(times["bulk"], times["raw_multi"])]
    return {
        "raw_single_us_per_job": m["raw_single"] / JOBS * 1e6,
        "single_us_per_job": m["single"] / JOBS * 1e6,
        "single_ratio": m["single"] / m["raw_single"],
        "single_ratio_per_round_median": median(single_ratios),
        "single_ratio_per_round_quartiles": quartiles(single_ratios),
        "raw_single_v4_us_per_job": m["raw_single_v4"] / JOBS * 1e6,
        "single_ratio_vs_v4": m["single"] / m["raw_single_v4"],
        "raw_multi_us_per_job": m["raw_multi"] / BULK * 1e6,
        "bulk_us_per_job": m["bulk"] / BULK * 1e6,
        "bulk_ratio": m["bulk"] / m["raw_multi"],
        "bulk_ratio_per_round_median": median(bulk_ratios),
        "bulk_ratio_per_round_quartiles": quartiles(bulk_ratios),
        "raw_multi_prebuilt_us_per_job": m["raw_multi_prebuilt"] / BULK * 1e6,
        "bulk_ratio_vs_prebuilt": m["bulk"] / m["raw_multi_prebuilt"],
        "bulk_placeholder": _bulk_placeholder(connection),
        "rounds_s": times,
    }


def main():
    results = {name: bench(name) for name in ("sqlite", "postgres") if name in databases}
    print(f"ojs-adapter-django staging, {ROUNDS} rounds (medians), {JOBS} single calls and one "
          f"bulk of {BULK} per variant per round")
    for name, r in results.items():
        lo, hi = r["single_ratio_per_round_quartiles"]
        print(f"{name:8}  single: raw INSERT {r['raw_single_us_per_job']:7.1f} us/job   "
              f"enqueue_after_commit {r['single_us_per_job']:7.1f} us/job   "
              f"ratio {r['single_ratio']:.2f}x (target <= {SINGLE_TARGET:.2f}x: "
              f"{met(r['single_ratio'], SINGLE_TARGET)})   per round {lo:.2f}-{hi:.2f}x")
        print(f"{name:8}    (raw INSERT with uuid4 ids, the baseline before issue 16: "
              f"{r['raw_single_v4_us_per_job']:.1f} us/job, ratio {r['single_ratio_vs_v4']:.2f}x)")
        lo, hi = r["bulk_ratio_per_round_quartiles"]
        print(f"{name:8}  bulk:   raw multi-row INSERT of {BULK} {r['raw_multi_us_per_job']:6.2f} us/job   "
              f"enqueue_bulk of {BULK} {r['bulk_us_per_job']:6.2f} us/job   "
              f"ratio {r['bulk_ratio']:.2f}x (target <= {BULK_TARGET:.2f}x: "
              f"{met(r['bulk_ratio'], BULK_TARGET)})   per round {lo:.2f}-{hi:.2f}x")
        print(f"{name:8}    (raw multi-row INSERT with its parameters built before the timer: "
              f"{r['raw_multi_prebuilt_us_per_job']:.2f} us/job, enqueue_bulk "
              f"{r['bulk_ratio_vs_prebuilt']:.2f}x that)")
    print(json.dumps(results))


if __name__ == "__main__":
    sys.exit(main())
