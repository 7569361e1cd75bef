"""``OJSBackend.get_result`` / ``aget_result`` / ``TaskResult.refresh()`` (docs/django-tasks.md,
"Results"): a task's result read back where its job is: on the OJS backend, else its outbox row
through Django's connection (so also in the caller's open transaction), from this process or
another. Real Django (6.x and the 5.2 backport), SQLite and PostgreSQL,
a real devserver over HTTP, the real ``ojs_worker`` (in this process with ``--once``, or as a
``manage.py`` subprocess while a task runs). Every wait is for a condition."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import uuid
from datetime import timedelta
from pathlib import Path

import pytest
from asgiref.sync import async_to_sync
from django.db import connections, transaction
from django.test import override_settings
from django.utils import timezone
from django.utils.dateparse import parse_datetime

from ojs_adapter_django import OJS, BackendUnavailableError, OutboxTableMissingError
from ojs_adapter_django.tasks import (
    STATUS_OF_STATE,
    JobCancelled,
    JobNotDelivered,
    OJSBackend,
)
from support import (
    WAIT,
    TaskResultDoesNotExist,
    TaskResultMismatch,
    TaskResultStatus,
    drop_table,
    suppressed_wakeups,
    task_backends,
    tasks_adapter,
    tasks_setting,
    wait_until,
    worker_once,
)
from testproject.worker_tasks import (
    always_fails,
    not_a_task,
    plain_run,
    record_run,
    runs,
    waits_for_file,
)

DB = pytest.mark.django_db(transaction=True, databases=["default", "pg", "my"])
TABLE = "py_results"
MANAGE = str(Path(__file__).with_name("manage.py"))
READY, RUNNING = TaskResultStatus.READY, TaskResultStatus.RUNNING
SUCCESSFUL, FAILED = TaskResultStatus.SUCCESSFUL, TaskResultStatus.FAILED


@pytest.fixture
def adapter(alias, backend):
    with tasks_adapter(backend.url, alias, TABLE) as adapter:
        yield adapter


def get(job_id):
    return task_backends["default"].get_result(job_id)


def job_state(backend, job_id: str) -> str:
    return backend.call("GET", f"/ojs/v1/jobs/{job_id}")["job"]["state"]


def test_the_backend_claims_results_and_maps_every_ojs_state():
    assert OJSBackend.supports_get_result is True
    assert set(STATUS_OF_STATE) == {"scheduled", "available", "pending", "retryable", "active",
                                    "completed", "discarded", "cancelled"}


# -- before the backend has it -----------------------------------------------------------------

@DB
def test_ready_in_the_open_transaction_then_in_the_outbox_then_on_the_backend(alias, backend,
                                                                            adapter):
    with suppressed_wakeups(adapter):
        with transaction.atomic(using=alias):
            before = timezone.now()
            result = record_run.enqueue(alias, "r", value={"n": 1})
            # Staged, not committed: its row is read through the caller's own connection.
            seen = get(result.id)
            assert seen.status == READY and seen.task == record_run
            assert (seen.args, seen.kwargs) == ([alias, "r"], {"value": {"n": 1}})
            # When the row was written (PostgreSQL: its transaction's start), to the millisecond.
            created = adapter.outbox_job(result.id, using=alias)["created_at"]
            assert seen.enqueued_at == created and seen.backend == "default"
            assert before - timedelta(seconds=WAIT) <= created
            assert created <= result.enqueued_at + timedelta(milliseconds=1)
            # Not committed: another process does not see it (as with Django's own backend).
            out = in_another_process(backend.url, alias, result.id)
            assert out.startswith("TaskResultDoesNotExist no job "), out
            assert record_run.get_result(result.id).id == result.id
            result.refresh()
            assert result.status == READY
            # A job whose savepoint rolled back is gone, also from the results.
            try:
                with transaction.atomic(using=alias):
                    undone = plain_run.enqueue(alias, "undone")
                    assert get(undone.id).status == READY
                    raise RuntimeError("roll the savepoint back")
            except RuntimeError:
                pass
            with pytest.raises(TaskResultDoesNotExist):
                get(undone.id)
        # Committed, the wake-up suppressed, the poller waiting an hour: a pending row.
        assert adapter.outbox_rows([result.id], using=alias)[result.id]["status"] == "pending"
        assert backend.jobs() == []
        seen = get(result.id)
        assert (seen.status, seen.args, seen.errors, seen.worker_ids) == (
            READY, [alias, "r"], [], [])
        assert seen.started_at is seen.finished_at is seen.last_attempted_at is None
        # Another process reads the unsent job too: the row holds its type and arguments.
        out = in_another_process(backend.url, alias, result.id)
        assert out == f"READY null testproject.worker_tasks.record_run ['{alias}', 'r'] []", out
    # The relay sends it: now the backend answers, still READY (available).
    adapter.bridge(alias).notify_committed(result.id)
    backend.wait_for([result.id])
    seen = get(result.id)
    assert (seen.status, seen.task, seen.args, seen.kwargs) == (
        READY, record_run, [alias, "r"], {"value": {"n": 1}})
    held = backend.call("GET", f"/ojs/v1/jobs/{result.id}")["job"]
    assert held["state"] == "available"
    assert seen.enqueued_at == parse_datetime(held["enqueued_at"])  # when the backend took it
    assert seen.attempts == 0 and not seen.is_finished
    with pytest.raises(ValueError, match="not finished"):
        seen.return_value


@DB
def test_outbox_job_reads_the_row_through_the_callers_connection(alias, backend, adapter):
    """``OJS.outbox_job``: the core's SELECT (``select_job_sql``) on Django's cursor, so it sees
    what the open transaction staged; the values converted (args decoded, an aware UTC time)."""
    with suppressed_wakeups(adapter):
        with transaction.atomic(using=alias):
            job_id = adapter.enqueue_after_commit(
                "reports.build", [{"args": [1, "two"], "kwargs": {"x": None}}], using=alias)
            row = adapter.outbox_job(job_id, using=alias)
            created = row.pop("created_at")
            assert row == {"type": "reports.build", "status": "pending", "attempts": 0,
                           "error": None, "args": [{"args": [1, "two"], "kwargs": {"x": None}}]}
            assert created.utcoffset() == timedelta(0)
            assert abs(timezone.now() - created) < timedelta(seconds=WAIT)
            assert adapter.outbox_job(job_id.upper(), using=alias)["created_at"] == created
            try:
                with transaction.atomic(using=alias):
                    undone = adapter.enqueue_after_commit("reports.build", [], using=alias)
                    assert adapter.outbox_job(undone, using=alias)["status"] == "pending"
                    raise RuntimeError("roll the savepoint back")
            except RuntimeError:
                pass
            assert adapter.outbox_job(undone, using=alias) is None
        # Committed: the same row, now also as the core's own connection reads it.
        assert adapter.outbox_job(job_id, using=alias)["created_at"] == created
        assert adapter.outbox_rows([job_id], using=alias)[job_id]["status"] == "pending"
    for unknown in (str(uuid.uuid4()), "not-a-job-id"):
        assert adapter.outbox_job(unknown, using=alias) is None
    drop_table(alias, TABLE)
    with pytest.raises(OutboxTableMissingError) as missing:
        adapter.outbox_job(job_id, using=alias)
    assert missing.value.code == "OUTBOX_TABLE_MISSING"


@DB
def test_a_rolled_back_or_unknown_job_does_not_exist(alias, backend, adapter):
    try:
        with transaction.atomic(using=alias):
            gone = plain_run.enqueue(alias, "gone")
            raise RuntimeError("roll back")
    except RuntimeError:
        pass
    for job_id in (gone.id, str(uuid.uuid4()), "019a0000-0000-7000-8000-000000000000"):
        with pytest.raises(TaskResultDoesNotExist, match="neither the OJS backend nor"):
            get(job_id)
    with pytest.raises(TaskResultDoesNotExist, match="no job id"):
        get("not-a-job-id")
    with pytest.raises(TaskResultDoesNotExist):
        async_to_sync(task_backends["default"].aget_result)(str(uuid.uuid4()))
    # A job that is no task (enqueued by hand) is no task result.
    job_id = adapter.enqueue_after_commit("testproject.worker_tasks.not_a_task",
                                          [{"args": [], "kwargs": {}}], using=alias)
    backend.wait_for([job_id])
    assert not_a_task  # the plain function the type names
    with pytest.raises(TaskResultDoesNotExist, match="not a task"):
        get(job_id)


@DB
def test_a_dead_outbox_row_is_failed(alias, backend, adapter, tmp_path):
    """The backend refuses the job (a 400): the relay marks the row dead; the task never runs."""
    backend.call("POST", "/_dev/faults", {"status": 400, "code": "invalid_request",
                                           "match_type": "testproject.worker_tasks.plain_run"})
    try:
        result = plain_run.enqueue(alias, "refused")
        wait_until(lambda: adapter.outbox_rows([result.id], using=alias)[result.id]["status"]
                   == "dead", what="a dead row")
    finally:
        backend.call("DELETE", "/_dev/faults")
    row = adapter.outbox_job(result.id, using=alias)
    assert (row["status"], row["type"]) == ("dead", "testproject.worker_tasks.plain_run")
    assert row["attempts"] >= 1 and "400" in row["error"]
    seen = get(result.id)
    assert (seen.status, seen.args, seen.attempts, seen.is_finished) == (
        FAILED, [alias, "refused"], 0, True)
    (error,) = seen.errors
    assert error.exception_class_path == "ojs_adapter_django.tasks.JobNotDelivered"
    assert error.exception_class is JobNotDelivered
    assert "the relay gave up sending job" in error.traceback
    assert "400" in error.traceback  # the row's error: the backend's refusal
    with pytest.raises(ValueError, match="failed"):
        seen.return_value
    # Another process reads the dead row as FAILED too.
    out = in_another_process(backend.url, alias, result.id)
    assert out == (f"FAILED null testproject.worker_tasks.plain_run ['{alias}', 'refused'] "
                   "['ojs_adapter_django.tasks.JobNotDelivered']"), out
    assert runs(alias) == []


# -- after the relay sent it --------------------------------------------------------------------

@DB
def test_successful_after_the_worker_ran_it(alias, backend, adapter):
    with transaction.atomic(using=alias):
        result = record_run.enqueue(alias, "ok", value=[1, 2])
    backend.wait_for([result.id])
    assert "1 completed" in worker_once()
    seen = get(result.id)
    assert seen.status == SUCCESSFUL and seen.is_finished
    assert seen.return_value == {"label": "ok", "value": [1, 2], "attempt": 1}
    assert seen.task == record_run and seen.task.func is record_run.func
    assert (seen.args, seen.kwargs, seen.errors) == ([alias, "ok"], {"value": [1, 2]}, [])
    assert seen.attempts == 1
    assert seen.enqueued_at <= seen.started_at <= seen.finished_at
    assert seen.last_attempted_at == seen.started_at
    # The result enqueue returned, refreshed in place; and the async read.
    assert result.status == READY
    result.refresh()
    assert (result.status, result.return_value, result.attempts) == (
        SUCCESSFUL, seen.return_value, 1)
    assert result.finished_at == seen.finished_at
    again = async_to_sync(record_run.aget_result)(result.id)
    assert (again.status, again.return_value) == (SUCCESSFUL, seen.return_value)
    fresh = record_run.using()  # a copy of the task: the same function
    assert fresh.get_result(result.id).return_value == seen.return_value
    with pytest.raises(TaskResultMismatch):
        plain_run.get_result(result.id)
    # Any process reads it once the backend holds it.
    out = in_another_process(backend.url, alias, result.id)
    assert out == ('SUCCESSFUL {"attempt": 1, "label": "ok", "value": [1, 2]} '
                   f"testproject.worker_tasks.record_run ['{alias}', 'ok'] []"), out


@DB
def test_a_failing_task_is_ready_between_attempts_then_failed_with_its_errors(alias, backend,
                                                                             adapter):
    result = always_fails.enqueue(alias, "bad")
    backend.wait_for([result.id])
    assert "1 failed" in worker_once()
    assert job_state(backend, result.id) == "retryable"
    between = get(result.id)
    assert (between.status, between.attempts, len(between.errors)) == (READY, 1, 1)
    assert between.errors[0].exception_class is ValueError
    assert between.started_at is not None and between.finished_at is None

    def attempt_then_discarded() -> bool:
        worker_once()
        return job_state(backend, result.id) == "discarded"

    wait_until(attempt_then_discarded, what="the failing job to be discarded")
    async_to_sync(result.arefresh)()
    assert result.status == FAILED and result.is_finished
    assert result.attempts == 3
    assert [e.exception_class_path for e in result.errors] == ["builtins.ValueError"] * 3
    for n, error in enumerate(result.errors, 1):
        assert error.traceback.startswith("Traceback (most recent call last)")
        assert f"ValueError: boom bad #{n}" in error.traceback
    assert len(result.worker_ids) == 3 and all(result.worker_ids)  # each attempt's worker
    assert result.finished_at is not None
    with pytest.raises(ValueError, match="failed"):
        result.return_value
    assert [attempt for *_, attempt, _ in runs(alias)] == [1, 2, 3]


@DB
def test_running_while_a_worker_subprocess_runs_it(alias, backend, adapter, tmp_path):
    release = tmp_path / "release"
    with transaction.atomic(using=alias):
        result = waits_for_file.enqueue(alias, "slow", str(release))
    backend.wait_for([result.id])
    worker = start_worker(backend.url, alias, "--worker-id", "results-worker-1")
    try:
        wait_until(lambda: runs(alias) != [], what="the slow task to start")
        result.refresh()
        assert (result.status, result.worker_ids, result.attempts) == (
            RUNNING, ["results-worker-1"], 1)
        assert result.started_at is not None and result.finished_at is None
        with pytest.raises(ValueError, match="not finished"):
            result.return_value
        release.touch()

        def finished() -> bool:
            result.refresh()
            return result.is_finished

        wait_until(finished, what="the task to finish")
    finally:
        stop(worker)
    assert (result.status, result.return_value) == (SUCCESSFUL, "slow")
    # The devserver keeps no worker id after the ack: the attempt is counted, its worker is "".
    assert (result.attempts, result.worker_ids) == (1, [""])


@DB
def test_a_job_the_backend_cancelled_is_failed(alias, backend, adapter):
    """A unique ``replace`` (a job enqueued by hand under the task's type) cancels the task's
    job on the backend: it never runs."""
    unique = {"keys": ["type"], "on_conflict": "replace"}
    payload = [{"args": [alias, "first"], "kwargs": {}}]
    first = adapter.enqueue_after_commit(plain_run.module_path, payload, using=alias,
                                         unique=unique)
    # The backend stores the first job before the relay settles its row; until then the row is
    # in flight and a replace is refused (DuplicateJobError, "try again"). Wait for the settle.
    wait_until(lambda: adapter.outbox_rows([first], using=alias)[first]["status"] == "sent",
               what="the first job's row to be settled as sent")
    second = adapter.enqueue_after_commit(plain_run.module_path, payload, using=alias,
                                          unique=unique)
    backend.wait_for([second])
    assert job_state(backend, first) == "cancelled"
    seen = plain_run.get_result(first)
    assert (seen.status, seen.args, seen.attempts) == (FAILED, [alias, "first"], 0)
    (error,) = seen.errors
    assert error.exception_class_path == "ojs_adapter_django.tasks.JobCancelled"
    assert error.exception_class is JobCancelled
    assert error.traceback == f"the OJS backend cancelled job {first} before it ran to its end"
    assert seen.finished_at is not None
    assert get(second).status == READY


@DB
def test_an_unreachable_backend_is_backend_unavailable(alias, backend, adapter):
    with transaction.atomic(using=alias):
        result = plain_run.enqueue(alias, "x")
    backend.wait_for([result.id])
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    down = OJS({"ojs_url": f"http://127.0.0.1:{port}",
                "outbox": {"table_name": TABLE, "poll_interval": "PT30S"},
                "relay": {"skip_recent": "PT1H"}})
    try:
        with override_settings(TASKS=tasks_setting(alias, down)):
            with pytest.raises(BackendUnavailableError) as raised:
                get(result.id)
            assert raised.value.code == "BACKEND_UNAVAILABLE"
            with pytest.raises(BackendUnavailableError):
                result.refresh()
    finally:
        down.reset()


# -- helpers: real processes --------------------------------------------------------------------

def subprocess_env(url: str, alias: str) -> dict:
    return {**os.environ, "OJS_TEST_OJS_URL": url, "OJS_TEST_TASKS_DATABASE": alias,
            "OJS_TEST_OUTBOX_TABLE": TABLE, "OJS_TEST_NO_LOGGING": "1",
            "OJS_TEST_PG_NAME": connections["pg"].settings_dict["NAME"],
            "OJS_TEST_MY_NAME": connections["my"].settings_dict["NAME"]}


def in_another_process(url: str, alias: str, job_id: str) -> str:
    """``get_result`` in a fresh ``manage.py shell`` on the same settings: what it prints (the
    status, the return value, the task, the args, the errors' class paths)."""
    code = (
        "try:\n"
        "    from django.tasks import task_backends\n"
        "    from django.tasks.exceptions import TaskResultDoesNotExist\n"
        "except ImportError:\n"
        "    from django_tasks import task_backends\n"
        "    from django_tasks.exceptions import TaskResultDoesNotExist\n"
        "import json\n"
        "try:\n"
        f"    r = task_backends['default'].get_result({job_id!r})\n"
        "    print(r.status, json.dumps(r.return_value if r.status == 'SUCCESSFUL' else None,\n"
        "                               sort_keys=True), r.task.module_path, r.args,\n"
        "          [e.exception_class_path for e in r.errors])\n"
        "except TaskResultDoesNotExist as e:\n"
        "    print('TaskResultDoesNotExist', e)\n"
    )
    done = subprocess.run([sys.executable, MANAGE, "shell", "-c", code],
                          env=subprocess_env(url, alias), cwd=os.path.dirname(MANAGE),
                          capture_output=True, text=True, timeout=WAIT)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]  # Django 6's shell first says what it imported


def start_worker(url: str, alias: str, *args: str) -> subprocess.Popen:
    process = subprocess.Popen(
        [sys.executable, MANAGE, "ojs_worker", "--poll-interval", "0.05", *args],
        env=subprocess_env(url, alias), cwd=os.path.dirname(MANAGE), stdin=subprocess.DEVNULL,
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    # Drain stderr so the worker never blocks on a full pipe.
    threading.Thread(target=process.stderr.read, daemon=True).start()
    return process


def stop(process: subprocess.Popen) -> None:
    if process.poll() is None:
        process.send_signal(signal.SIGTERM)
    try:
        process.wait(timeout=WAIT)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
