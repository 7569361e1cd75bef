"""Issue 11, item 8: a serving process starts the in-process relay when Django is ready, so the
first request does not pay for it; other processes (management commands, tests) start none at
start-up; a process forked after the start (pre-fork servers) starts its own at once. Real
``manage.py`` processes, the real devserver, the SQLite file the tests share with them."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
from pathlib import Path

import pytest

from ojs_adapter_django import OJS
from ojs_adapter_django.apps import serving
from support import WAIT, drop_table, wait_until

HERE = Path(__file__).parent
MANAGE = str(HERE / "manage.py")
DB = pytest.mark.django_db(transaction=True)


def staged_without_relay(backend, table, count=2):
    """Committed rows in ``table`` that no relay of this process will send (external mode)."""
    adapter = OJS({"ojs_url": backend.url, "outbox": {"table_name": table},
                   "relay": {"mode": "external"}})
    drop_table("default", table)
    adapter.create_outbox_table("default")
    ids = [adapter.enqueue_after_commit("boot.waiting", [i]) for i in range(count)]
    assert all(backend.job(job_id) is None for job_id in ids)
    return adapter, ids


def env_for(backend, table):
    return {**os.environ, "OJS_TEST_OJS_URL": backend.url, "OJS_TEST_OUTBOX_TABLE": table}


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_which_processes_serve():
    assert serving(["/venv/bin/gunicorn", "project.wsgi"], {})
    assert serving(["/venv/bin/uvicorn", "project.asgi:application"], {})
    assert serving(["/venv/lib/python3.13/site-packages/gunicorn/__main__.py"], {})
    assert serving(["manage.py", "runserver", "--noreload"], {})
    assert serving(["manage.py", "runserver"], {"RUN_MAIN": "true"})
    assert not serving(["manage.py", "runserver"], {}), "the autoreloader's parent serves nothing"
    for command in ("migrate", "makemigrations", "check", "shell", "ojs_relay", "ojs_outbox", "test"):
        assert not serving(["manage.py", command], {}), command
        assert not serving(["/venv/bin/django-admin", command], {}), command
        assert not serving(["/usr/lib/python3/site-packages/django/__main__.py", command], {})
    assert not serving(["/venv/bin/pytest"], {})
    assert not serving([], {})


@DB
def test_runserver_starts_the_relay_before_any_request(backend):
    adapter, ids = staged_without_relay(backend, "py_boot_serve")

    def sent():
        return {row["status"] for row in adapter.outbox_rows(ids).values()} == {"sent"}

    server = subprocess.Popen(
        [sys.executable, MANAGE, "runserver", "--noreload", f"127.0.0.1:{free_port()}"],
        env=env_for(backend, "py_boot_serve"), stdin=subprocess.DEVNULL,
        stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        # No request is ever made: only a relay started at boot sends these rows. The rows are
        # settled just after the backend answers: wait for that too, before the signal (a
        # SIGTERM ends runserver at once, which may leave a sent row pending, to go again).
        backend.wait_for(ids)
        wait_until(sent, what="the rows settled as sent")
    finally:
        server.send_signal(signal.SIGTERM)
        output, _ = server.communicate(timeout=WAIT)
    assert sent(), output


@DB
@pytest.mark.parametrize("command", [
    ["shell", "-c", "from ojs_adapter_django import ojs; print('METRICS', ojs.metrics())"],
])
def test_a_management_command_starts_no_relay(backend, command):
    adapter, ids = staged_without_relay(backend, "py_boot_command")
    done = subprocess.run([sys.executable, MANAGE, *command],
                          env=env_for(backend, "py_boot_command"), capture_output=True,
                          text=True, timeout=WAIT)
    assert done.returncode == 0, done.stderr
    assert "METRICS None" in done.stdout, done.stdout + done.stderr
    assert {row["status"] for row in adapter.outbox_rows(ids).values()} == {"pending"}


CHILD = """
import json, os, django
django.setup()
from ojs_adapter_django import ojs
ojs.start_at_boot()
report = {"parent": ojs.metrics() is not None}
read, write = os.pipe()
pid = os.fork()
if pid == 0:
    os.close(read)
    # Before any enqueue: the relay runs only if the fork hook started it.
    os.write(write, json.dumps(ojs.metrics() is not None).encode())
    ojs.stop_relay()
    os._exit(0)
os.close(write)
os.waitpid(pid, 0)
report["child"] = json.loads(os.fdopen(read).read())
ojs.stop_relay()
print("REPORT", json.dumps(report))
"""


@DB
def test_a_child_forked_after_the_start_runs_its_own_relay_at_once(backend):
    staged_without_relay(backend, "py_boot_fork", count=0)
    env = {**env_for(backend, "py_boot_fork"), "DJANGO_SETTINGS_MODULE": "testproject.settings"}
    done = subprocess.run([sys.executable, "-W", "ignore::DeprecationWarning", "-c", CHILD],
                          cwd=HERE, env=env, capture_output=True, text=True, timeout=WAIT)
    assert done.returncode == 0, done.stderr
    line = next(line for line in done.stdout.splitlines() if line.startswith("REPORT "))
    assert json.loads(line[len("REPORT "):]) == {"parent": True, "child": True}, done.stderr
