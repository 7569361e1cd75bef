"""Test helpers: the dev backend (ojs-devserver) driven over HTTP, polling, outbox reads
through Django's connection, the crash_before_hook seam, and what the tests of the Django Tasks
backend share (the framework's names, an adapter of their own as the "default" task backend,
``ojs_worker --once``)."""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import time
import urllib.request
from pathlib import Path
from typing import Any, Callable, Iterator, Optional

from django.core.management import call_command
from django.db import connections
from django.test import override_settings

try:  # one code path, as the backend has: Django 6's framework, else the backport
    from django.tasks import TaskResultStatus, task, task_backends
    from django.tasks.exceptions import TaskResultDoesNotExist, TaskResultMismatch
    from django.tasks.signals import task_enqueued
except ImportError:
    from django_tasks import TaskResultStatus, task, task_backends
    from django_tasks.exceptions import TaskResultDoesNotExist, TaskResultMismatch
    from django_tasks.signals import task_enqueued

REPO = Path(__file__).resolve().parents[2]

#: How long a test waits for something that must happen. Generous: on a machine whose cores
#: are busy with other work a delivery can take seconds; a passing test never waits this long.
WAIT = 30.0


class Devserver:
    """A real ojs-devserver process on a free port; the oracle of what the backend received."""

    def __init__(self, port: int = 0) -> None:
        binary = os.environ.get("OJS_DEVSERVER_BIN") or str(REPO / "target/debug/ojs-devserver")
        if not os.path.exists(binary):
            raise RuntimeError(f"{binary} is missing: run `cargo build -p ojs-devserver`")
        self.process = subprocess.Popen(
            [binary, "--port", str(port)], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True
        )
        line = self.process.stdout.readline().strip()
        prefix = "ojs-devserver listening on "
        if not line.startswith(prefix):
            self.process.kill()
            raise RuntimeError(f"ojs-devserver did not start: {line!r}")
        self.url = line[len(prefix):]

    def call(self, method: str, path: str, body: Any = None) -> Any:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method)
        if data is not None:
            request.add_header("content-type", "application/json")
        with urllib.request.urlopen(request, timeout=10) as response:
            text = response.read().decode()
        return json.loads(text) if text else None

    def reset(self) -> None:
        self.call("POST", "/_dev/reset")

    def received(self) -> dict:
        return self.call("GET", "/_dev/received")

    def jobs(self) -> list[dict]:
        return self.received()["jobs"]

    def job(self, job_id: str) -> Optional[dict]:
        return next((job for job in self.jobs() if job["id"] == job_id), None)

    def wait_for(self, job_ids: list[str], timeout: float = WAIT) -> list[dict]:
        deadline = time.monotonic() + timeout
        while True:
            jobs = {job["id"]: job for job in self.jobs()}
            if all(job_id in jobs for job_id in job_ids):
                return [jobs[job_id] for job_id in job_ids]
            if time.monotonic() > deadline:
                missing = [job_id for job_id in job_ids if job_id not in jobs]
                raise AssertionError(f"not delivered within {timeout}s: {missing}")
            time.sleep(0.01)

    def stop(self) -> None:
        self.process.kill()
        self.process.wait()
        self.process.stdout.close()


def wait_until(condition: Callable[[], bool], timeout: float = WAIT, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def job_id_text(alias: str) -> str:
    """Test-only SQL: the ``job_id`` column as text on the database of ``alias`` (a UUID on
    PostgreSQL; MySQL casts to CHAR, not TEXT)."""
    return f"CAST(job_id AS {'CHAR' if connections[alias].vendor == 'mysql' else 'TEXT'})"


def outbox_rows(alias: str, table: str) -> dict[str, str]:
    """``{job_id: status}`` of every row, read through Django's connection of ``alias``: inside
    an open atomic block this is the application's view, uncommitted rows included.
    (Test-only SQL: the core offers no read statement for host connections yet.)"""
    with connections[alias].cursor() as cursor:
        cursor.execute(f"SELECT {job_id_text(alias)}, status FROM {table} ORDER BY id")
        return {job_id: status for job_id, status in cursor.fetchall()}


def outbox_count(alias: str, table: str) -> int:
    with connections[alias].cursor() as cursor:
        cursor.execute(f"SELECT COUNT(*) FROM {table}")
        return cursor.fetchone()[0]


def drop_table(alias: str, table: str) -> None:
    with connections[alias].cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {table}")


@contextlib.contextmanager
def suppressed_wakeups(ojs: Any) -> Iterator[None]:
    """Test-only seam for ``crash_before_hook``: commits made inside this block reach the
    database, but the adapter's after-commit wake-up does nothing, as if the process had died
    right after COMMIT. The rows must then be found by the relay's poller."""
    ojs._wake = lambda adapter, job_ids: None
    try:
        yield
    finally:
        del ojs._wake


# -- the Django Tasks backend ------------------------------------------------------------------

def own_adapter(url: str, alias: str, table: str) -> Any:
    """An adapter with a fresh outbox table of its own on ``alias``. Its poller leaves every row
    younger than an hour alone (``skip_recent``), so a row is sent only by the after-commit
    wake-up (which ``suppressed_wakeups`` holds back: the row then stays pending)."""
    from ojs_adapter_django import OJS

    adapter = OJS({"ojs_url": url, "outbox": {"table_name": table, "poll_interval": "PT30S"},
                   "relay": {"skip_recent": "PT1H"}})
    drop_table(alias, table)
    adapter.create_outbox_table(alias)
    return adapter


def tasks_setting(alias: str, adapter: Any, queues: Any = ()) -> dict:
    """``TASKS`` with one "default" ``OJSBackend`` staging on ``alias`` through ``adapter``."""
    return {"default": {"BACKEND": "ojs_adapter_django.tasks.OJSBackend", "QUEUES": list(queues),
                        "OPTIONS": {"DATABASE": alias, "ADAPTER": adapter}}}


@contextlib.contextmanager
def tasks_adapter(url: str, alias: str, table: str) -> Iterator[Any]:
    """``own_adapter`` as the project's "default" task backend, with a fresh table of runs for
    the tasks of ``testproject.worker_tasks``; reset (its relay stopped) afterwards."""
    from testproject.worker_tasks import create_runs_table

    adapter = own_adapter(url, alias, table)
    create_runs_table(alias)
    try:
        with override_settings(TASKS=tasks_setting(alias, adapter)):
            yield adapter
    finally:
        adapter.reset()


def worker_once(*args: str) -> str:
    """``manage.py ojs_worker --once`` in this process: what it printed."""
    out = io.StringIO()
    call_command("ojs_worker", "--once", *args, stdout=out, stderr=io.StringIO())
    return out.getvalue()
