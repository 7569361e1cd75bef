"""Staging cost of ojs-adapter-django on Django's connection, inside one transaction:
enqueue_after_commit per job versus a raw parameterized INSERT of the same row through the same
cursor, and enqueue_bulk of 1,000 versus 1,000 single calls. SQLite file and PostgreSQL
(OJS_TEST_DATABASE_URL). Each measurement is the best of several rounds; every round rolls back."""

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

TABLE = "py_bench_outbox"
JOBS = int(os.environ.get("BENCH_JOBS", "2000"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))


class Rollback(Exception):
    pass


def best_of(rounds, alias, body):
    """Best wall time of `body(cursor)` run inside a transaction that is then rolled back."""
    best = float("inf")
    for _ in range(rounds):
        try:
            with transaction.atomic(using=alias):
                with connections[alias].cursor() as cursor:
                    started = time.perf_counter()
                    body(cursor)
                    best = min(best, time.perf_counter() - started)
                raise Rollback
        except Rollback:
            pass
    return best


def main():
    results = {}
    for name in [n for n in ("sqlite", "postgres") if n in databases]:
        adapter = OJS({"ojs_url": "http://127.0.0.1:9", "outbox": {"table_name": TABLE},
                       "relay": {"mode": "external"}})
        with connections[name].cursor() as cursor:
            cursor.execute(f"DROP TABLE IF EXISTS {TABLE}")
        adapter.create_outbox_table(name)
        staged = adapter.bridge(name).stage(
            connections[name].vendor, "percent", json.dumps([{"type": "email.welcome", "args": [1]}]))
        insert_sql = json.loads(staged)["statements"][0]["sql"]

        def raw(cursor):
            for i in range(JOBS):
                cursor.execute(insert_sql, [str(uuid.uuid4()), "email.welcome", json.dumps([i]),
                                            "{}", "{}", None])

        def adapter_single(cursor):
            for i in range(JOBS):
                adapter.enqueue_after_commit("email.welcome", [i], using=name)

        bulk_jobs = [{"type": "email.welcome", "args": [i]} for i in range(1000)]

        def bulk(cursor):
            adapter.enqueue_bulk(bulk_jobs, using=name)

        def singles(cursor):
            for i in range(1000):
                adapter.enqueue_after_commit("email.welcome", [i], using=name)

        raw_s = best_of(ROUNDS, name, raw)
        single_s = best_of(ROUNDS, name, adapter_single)
        bulk_s = best_of(ROUNDS, name, bulk)
        singles_s = best_of(ROUNDS, name, singles)
        results[name] = {
            "raw_insert_us_per_job": raw_s / JOBS * 1e6,
            "enqueue_after_commit_us_per_job": single_s / JOBS * 1e6,
            "ratio_vs_raw": single_s / raw_s,
            "bulk_1000_ms": bulk_s * 1e3,
            "singles_1000_ms": singles_s * 1e3,
            "bulk_speedup": singles_s / bulk_s,
        }
        with connections[name].cursor() as cursor:
            cursor.execute(f"DROP TABLE IF EXISTS {TABLE}")
        adapter.reset()
    for name, r in results.items():
        print(f"{name:8}  raw INSERT {r['raw_insert_us_per_job']:7.1f} us/job   "
              f"enqueue_after_commit {r['enqueue_after_commit_us_per_job']:7.1f} us/job   "
              f"ratio {r['ratio_vs_raw']:.2f}x (target <= 1.15)   "
              f"bulk 1000 {r['bulk_1000_ms']:7.1f} ms vs 1000 singles {r['singles_1000_ms']:7.1f} ms"
              f" = {r['bulk_speedup']:.1f}x (target >= 5)")
    print(json.dumps(results))


if __name__ == "__main__":
    sys.exit(main())
