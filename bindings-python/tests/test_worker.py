"""``manage.py ojs_worker`` (``ojs_adapter_django.worker`` on the core worker loop,
docs/django-tasks.md "Running tasks"): ``task.enqueue()`` in a transaction, the commit, the
relay, the devserver, the worker, the task's own row, and the job's state on the devserver. Real
Django (6.x and the 5.2 backport), SQLite and PostgreSQL, a real devserver over HTTP; the worker
runs in this process (``--once``, or ``Worker.run`` in a thread) or as a real ``manage.py``
subprocess where signals and a backend that is down matter. Every wait is for a condition."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from django.core.management.base import CommandError
from django.db import connections, transaction
from django.test import override_settings

from ojs_adapter_django import OJS, request_context
from ojs_adapter_django.worker import Worker
from support import (
    WAIT,
    Devserver,
    own_adapter,
    tasks_adapter,
    tasks_setting,
    wait_until,
    worker_once,
)
from testproject.worker_tasks import (
    acks_itself,
    always_fails,
    async_double,
    chains,
    create_runs_table,
    injects_fault,
    overlaps,
    plain_run,
    record_run,
    records_trace,
    returns_a_set,
    runs,
    times,
    waits_for_file,
)

try:
    from django.tasks.signals import task_finished, task_started
    DUMMY = "django.tasks.backends.dummy.DummyBackend"
except ImportError:
    from django_tasks.signals import task_finished, task_started
    DUMMY = "django_tasks.backends.dummy.DummyBackend"

DB = pytest.mark.django_db(transaction=True, databases=["default", "pg", "my"])
TABLE = "py_worker"
MANAGE = str(Path(__file__).with_name("manage.py"))


@pytest.fixture
def adapter(alias, backend):
    with tasks_adapter(backend.url, alias, TABLE) as adapter:
        yield adapter


def state(backend, job_id: str) -> dict:
    return backend.call("GET", f"/ojs/v1/jobs/{job_id}")["job"]


# -- in this process: --once ------------------------------------------------------------------

@DB
def test_a_committed_task_runs_in_the_worker_and_its_result_is_acked(alias, backend, adapter):
    seen = []

    def started(sender, task_result, **kwargs):
        seen.append(("started", sender.__name__, task_result.id, task_result.status))

    def finished(sender, task_result, **kwargs):
        seen.append(("finished", sender.__name__, task_result.id, task_result.status,
                     task_result.return_value))

    task_started.connect(started, dispatch_uid="test_worker", weak=False)
    task_finished.connect(finished, dispatch_uid="test_worker", weak=False)
    try:
        with transaction.atomic(using=alias):
            result = record_run.enqueue(alias, "e2e", value={"n": 1})
            plain = plain_run.enqueue(alias, "plain")
            assert backend.jobs() == []  # staged, not sent before the commit
        backend.wait_for([result.id, plain.id])
        assert runs(alias) == []
        out = worker_once("--count", "5")
    finally:
        task_started.disconnect(dispatch_uid="test_worker")
        task_finished.disconnect(dispatch_uid="test_worker")
    assert "2 completed, 0 failed, 0 refused" in out
    assert runs(alias) == [("e2e", result.id, 1, "ran"), ("plain", None, None, "ran")]
    job = state(backend, result.id)
    assert job["state"] == "completed"
    assert job["result"] == {"label": "e2e", "value": {"n": 1}, "attempt": 1}
    assert state(backend, plain.id)["result"] == ["plain", 1]  # the tuple, normalised
    assert seen[:2] == [("started", "OJSBackend", result.id, "RUNNING"),
                        ("finished", "OJSBackend", result.id, "SUCCESSFUL",
                         {"label": "e2e", "value": {"n": 1}, "attempt": 1})]
    # Nothing left: a second run finds no job.
    assert "0 completed, 0 failed, 0 refused" in worker_once()


@DB
def test_an_async_task_runs_too(alias, backend, adapter):
    result = async_double.enqueue(21)
    backend.wait_for([result.id])
    assert "1 completed" in worker_once()
    assert state(backend, result.id)["result"] == 42


@DB
def test_a_raising_task_is_retried_by_the_backend_then_discarded(alias, backend, adapter):
    result = always_fails.enqueue(alias, "bad")
    backend.wait_for([result.id])
    states = []

    def attempt_then_state() -> bool:
        worker_once()
        job = state(backend, result.id)
        if not states or states[-1] != job["state"]:
            states.append(job["state"])
        return job["state"] == "discarded"

    wait_until(attempt_then_state, what="the failing job to be discarded")
    assert states[0] == "retryable" and states[-1] == "discarded"
    job = state(backend, result.id)
    assert job["attempt"] == 3 and job["max_attempts"] == 3
    assert [error["type"] for error in job["errors"]] == ["builtins.ValueError"] * 3
    assert [error["message"] for error in job["errors"]] == ["boom bad #1", "boom bad #2",
                                                             "boom bad #3"]
    assert all(error["retryable"] is True for error in job["errors"])
    details = job["errors"][0]["details"]
    assert "Traceback (most recent call last)" in details["traceback"]
    assert "ValueError: boom bad #1" in details["traceback"]
    assert details["worker_id"]
    # The task ran three times, and its context counted the attempts as the backend does.
    assert runs(alias) == [("bad", result.id, n, "ran") for n in (1, 2, 3)]


@DB
def test_a_return_value_json_cannot_hold_fails_the_job_without_retry(alias, backend, adapter):
    result = returns_a_set.enqueue(alias, "set")
    backend.wait_for([result.id])
    assert "0 completed, 1 failed" in worker_once()
    job = state(backend, result.id)
    assert (job["state"], job["attempt"]) == ("discarded", 1)
    assert job["error"]["type"] == "builtins.TypeError"
    assert job["error"]["retryable"] is False
    assert job["error"]["message"].startswith(
        "the return value of testproject.worker_tasks.returns_a_set cannot be stored as JSON")
    assert runs(alias) == [("set", None, None, "ran")]  # it ran once


@DB
def test_a_task_that_enqueues_a_task_is_relayed_from_the_worker(alias, backend, adapter):
    parent = chains.enqueue(alias, "parent")
    backend.wait_for([parent.id])
    assert "1 completed" in worker_once()
    child_id = state(backend, parent.id)["result"]
    (child,) = backend.wait_for([child_id])
    assert child["type"] == "testproject.worker_tasks.plain_run"
    assert "1 completed" in worker_once()
    assert state(backend, child_id)["state"] == "completed"
    assert [label for label, *_ in runs(alias)] == ["parent", "parent-child"]


@DB
def test_an_ack_the_backend_refuses_is_logged_and_the_worker_goes_on(alias, backend, adapter,
                                                                      caplog):
    first = acks_itself.enqueue()
    second = plain_run.enqueue(alias, "next")
    backend.wait_for([first.id, second.id])
    with caplog.at_level("WARNING", logger="ojs_adapter_django.worker"):
        assert "2 completed" in worker_once("--count", "2")
    assert state(backend, first.id)["result"] == "acked by the task"
    assert state(backend, second.id)["state"] == "completed"
    # The worker loop's record, on the worker's logger.
    (refused,) = [r for r in caplog.records if "the ack was not delivered" in r.getMessage()]
    assert first.id in refused.getMessage() and "409" in refused.getMessage()
    assert refused.name == "ojs_adapter_django.worker" and refused.job_id == first.id


@DB
def test_an_ack_the_backend_cannot_take_now_is_retried(alias, backend, adapter, caplog):
    """Two 503 answers to the worker's requests after the task ran: the worker loop retries
    the ack with backoff and it lands; the outage is logged once, and its end."""
    result = injects_fault.enqueue(backend.url, {"status": 503, "count": 2, "applies_to": "all"})
    backend.wait_for([result.id])
    with caplog.at_level("INFO", logger="ojs_adapter_django.worker"):
        assert "1 completed" in worker_once()
    job = state(backend, result.id)
    assert (job["state"], job["result"]) == ("completed", "after the fault")
    messages = [r.getMessage() for r in caplog.records]
    assert sum("the OJS backend is unavailable" in m for m in messages) == 1
    assert sum("the OJS backend answers again" in m for m in messages) == 1


@DB
def test_once_with_the_backend_down_is_a_command_error(alias, backend, adapter):
    down = OJS({"ojs_url": f"http://127.0.0.1:{free_port()}"})
    try:
        with override_settings(TASKS=tasks_setting(alias, down)):
            with pytest.raises(CommandError, match=r"^\[BACKEND_UNAVAILABLE\] "):
                worker_once()
    finally:
        down.reset()


@DB
def test_a_job_that_is_no_task_here_is_retried_and_bad_args_are_discarded(alias, backend,
                                                                          adapter, caplog):
    """A task this worker does not know may be known to a newer one (issue 25): the worker
    loop's ``unknown_type``, retryable, the backend's retry policy decides; the WARNING says
    why. Args of the wrong shape never run anywhere: discarded, and the log names their shape,
    never their values."""
    with transaction.atomic(using=alias):
        ids = [
            adapter.enqueue_after_commit("testproject.worker_tasks.missing",
                                         [{"args": [], "kwargs": {}}], using=alias),
            adapter.enqueue_after_commit("testproject.worker_tasks.not_a_task",
                                         [{"args": [], "kwargs": {}}], using=alias),
            adapter.enqueue_after_commit("testproject.worker_tasks.plain_run",
                                         [alias, "secret-argument"], using=alias),
        ]
    backend.wait_for(ids)
    with caplog.at_level("WARNING", logger="ojs_adapter_django.worker"):
        out = worker_once("--count", "3")
    assert "0 completed, 0 failed, 1 refused, 0 given back, 2 unknown" in out
    jobs = [state(backend, job_id) for job_id in ids]
    assert [job["state"] for job in jobs] == ["retryable", "retryable", "discarded"]
    assert [job["attempt"] for job in jobs] == [1, 1, 1]
    assert [job["error"]["type"] for job in jobs] == ["unknown_type", "unknown_type",
                                                      "invalid_task_args"]
    assert [job["error"]["retryable"] for job in jobs] == [True, True, False]
    assert jobs[0]["error"]["details"]["worker_id"]  # get_result's worker_ids
    assert jobs[2]["error"]["message"].endswith("got a list of 2 items")
    unknown = [r.getMessage() for r in caplog.records
               if "unknown task" in r.getMessage() and r.levelname == "WARNING"]
    assert sorted(job_id for job_id in ids if any(job_id in m for m in unknown)) == sorted(ids[:2])
    assert any("unknown task testproject.worker_tasks.missing" in m
               and "is not a task of this project" in m for m in unknown)
    assert any("unknown task testproject.worker_tasks.not_a_task" in m
               and "not a Django task" in m for m in unknown)
    assert all("secret-argument" not in r.getMessage() for r in caplog.records)
    assert runs(alias) == []


@DB
def test_a_module_that_raises_on_import_is_a_retryable_failure(alias, backend, adapter):
    """Not the task's exception but the worker goes on, and the job is not left reserved."""
    job_id = adapter.enqueue_after_commit("testproject.broken_tasks.anything",
                                          [{"args": [], "kwargs": {}}], using=alias)
    plain = plain_run.enqueue(alias, "after")
    backend.wait_for([job_id, plain.id])
    assert "1 completed, 1 failed" in worker_once("--count", "2")
    job = state(backend, job_id)
    assert (job["state"], job["error"]["type"]) == ("retryable", "builtins.RuntimeError")
    assert job["error"]["message"] == "broken_tasks cannot be imported"
    assert state(backend, plain.id)["state"] == "completed"


@DB
def test_a_task_of_another_backend_is_unknown_here(alias, backend, adapter, caplog):
    """The job names a task whose backend is not an OJSBackend here: never run by this
    worker, and left to the backend's retries (a worker of another deploy may run it)."""
    job_id = adapter.enqueue_after_commit("testproject.worker_tasks.plain_run",
                                          [{"args": [alias, "other"], "kwargs": {}}], using=alias)
    backend.wait_for([job_id])
    # The worker serves the alias "ojs"; plain_run's own backend ("default") is Django's dummy.
    setting = {"ojs": tasks_setting(alias, adapter)["default"], "default": {"BACKEND": DUMMY}}
    with override_settings(TASKS=setting), caplog.at_level("WARNING", "ojs_adapter_django.worker"):
        out = worker_once("--backend", "ojs")
    assert "0 refused, 0 given back, 1 unknown" in out
    job = state(backend, job_id)
    assert (job["state"], job["error"]["type"]) == ("retryable", "unknown_type")
    assert any(job_id in r.getMessage() and "not an ojs_adapter_django.tasks.OJSBackend"
               in r.getMessage() for r in caplog.records)
    assert runs(alias) == []


@DB
def test_bad_options_are_command_errors(alias, backend, adapter):
    with pytest.raises(CommandError, match="not an ojs_adapter_django.tasks.OJSBackend"):
        with override_settings(TASKS={"default": {"BACKEND": DUMMY}}):
            worker_once()
    with pytest.raises(CommandError, match="nope"):
        worker_once("--backend", "nope")
    with pytest.raises(CommandError, match=r"\[INVALID_QUEUE\]"):
        worker_once("--queue", "Not A Queue")
    with override_settings(TASKS=tasks_setting(alias, adapter, queues=["default", "mail"])):
        with pytest.raises(CommandError, match="queue 'other' is not in"):
            worker_once("--queue", "other")
    # The worker loop's own checks (no rule of them in Python).
    with pytest.raises(CommandError, match=r"\[INVALID_CONFIG\] .*concurrency"):
        worker_once("--concurrency", "0")
    with pytest.raises(CommandError, match=r"\[INVALID_CONFIG\] .*visibility_timeout_ms"):
        worker_once("--visibility-timeout", "0")
    with pytest.raises(CommandError, match=r"\[INVALID_CONFIG\] .*stop_deadline_ms"):
        worker_once("--stop-deadline", "-1")
    with pytest.raises(CommandError, match="--count must be at least 1"):
        worker_once("--count", "0")


# -- real processes: signals, a backend that is down ------------------------------------------

class Process:
    """A ``manage.py ojs_worker`` subprocess whose stderr lines are collected as they come."""

    def __init__(self, url: str, alias: str, *args: str, python_path: str = "") -> None:
        env = {**os.environ, "OJS_TEST_OJS_URL": url, "OJS_TEST_TASKS_DATABASE": alias,
               "OJS_TEST_OUTBOX_TABLE": TABLE, "OJS_TEST_NO_LOGGING": "1",
               "OJS_TEST_PG_NAME": connections["pg"].settings_dict["NAME"],
               "OJS_TEST_MY_NAME": connections["my"].settings_dict["NAME"]}
        if python_path:  # code this process has and the test process does not
            env["PYTHONPATH"] = os.pathsep.join(filter(None, [python_path,
                                                              env.get("PYTHONPATH")]))
        self.process = subprocess.Popen(
            [sys.executable, MANAGE, "ojs_worker", "--poll-interval", "0.05", *args],
            env=env, cwd=os.path.dirname(MANAGE), stdin=subprocess.DEVNULL,
            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        self.lines: list[str] = []
        self._reader = threading.Thread(target=self._read, daemon=True)
        self._reader.start()

    def _read(self) -> None:
        for line in self.process.stderr:
            self.lines.append(line)

    def said(self, text: str) -> bool:
        return any(text in line for line in self.lines)

    def wait_said(self, text: str) -> None:
        try:
            wait_until(lambda: self.said(text) or self.process.poll() is not None,
                       what=f"the worker to log {text!r}")
        finally:
            assert self.said(text), "".join(self.lines)

    def stop(self, signal_it: bool = True) -> tuple[int, str]:
        """SIGTERM (unless ``signal_it`` is false: it was sent), then the exit code and stdout."""
        if signal_it and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(timeout=WAIT)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait()
        self._reader.join(timeout=WAIT)
        out = self.process.stdout.read()
        self.process.stdout.close()
        self.process.stderr.close()
        return code, out


@DB
def test_sigterm_lets_the_running_task_finish_and_stops_fetching(alias, backend, adapter,
                                                                 tmp_path):
    """A slow task, held past its visibility timeout by heartbeats; SIGTERM while it runs: no
    more fetches, the task finishes, is acked, and the worker exits 0. The heartbeats renew a
    reservation at most half a visibility timeout after the last renewal: a timeout of 2 s
    leaves a busy machine a 1 s stall before the reservation would run out."""
    release = tmp_path / "release"
    with transaction.atomic(using=alias):
        slow = waits_for_file.enqueue(alias, "slow", str(release))
        later = plain_run.enqueue(alias, "later")
    backend.wait_for([slow.id, later.id])
    visibility = 2.0
    worker = Process(backend.url, alias, "--visibility-timeout", str(visibility))
    try:
        wait_until(lambda: any(step == "started" for *_, step in runs(alias)),
                   what="the slow task to start")
        begun = time.monotonic()

        def still_reserved() -> bool:
            # A fetch of another worker gives back every job whose reservation ran out (from
            # any queue): the heartbeats must have renewed the slow job's.
            adapter.worker({"op": "fetch", "queues": ["nothing-here"], "worker_id": "probe"},
                           using=alias)
            job = state(backend, slow.id)
            assert job["state"] == "active", job
            return time.monotonic() - begun > 2 * visibility

        wait_until(still_reserved, what="two visibility timeouts with the job reserved")
        worker.process.send_signal(signal.SIGTERM)
        worker.wait_said("SIGTERM received")
        release.touch()
        code, out = worker.stop(signal_it=False)
    finally:
        if worker.process.poll() is None:
            worker.process.kill()
    assert code == 0, "".join(worker.lines)
    assert "1 completed, 0 failed, 0 refused, 0 given back" in out
    assert [(label, step) for label, _, _, step in runs(alias)] == [("slow", "started"),
                                                                    ("slow", "finished")]
    assert state(backend, slow.id)["state"] == "completed"
    assert state(backend, slow.id)["result"] == "slow"
    # Not fetched after the signal: still there for the next worker.
    assert state(backend, later.id)["state"] == "available"


@DB
def test_sigterm_lets_every_task_in_flight_finish(alias, backend, adapter, tmp_path):
    """``--concurrency 2``: two slow tasks run at once, the third job waits (the loop fetches
    only for a free slot). SIGTERM: both tasks finish and are acked, the third job is never
    fetched, exit 0."""
    release = tmp_path / "release"
    with transaction.atomic(using=alias):
        first = waits_for_file.enqueue(alias, "one", str(release))
        second = waits_for_file.enqueue(alias, "two", str(release))
        third = plain_run.enqueue(alias, "three")
    backend.wait_for([first.id, second.id, third.id])
    worker = Process(backend.url, alias, "--concurrency", "2")
    try:
        wait_until(lambda: len(runs(alias)) == 2, what="both slow tasks to start")
        assert [state(backend, job.id)["state"] for job in (first, second, third)] == [
            "active", "active", "available"]
        worker.process.send_signal(signal.SIGTERM)
        worker.wait_said("SIGTERM received")
        release.touch()
        code, out = worker.stop(signal_it=False)
    finally:
        if worker.process.poll() is None:
            worker.process.kill()
    assert code == 0, "".join(worker.lines)
    assert "2 completed, 0 failed, 0 refused, 0 given back" in out
    assert [state(backend, job.id)["state"] for job in (first, second)] == ["completed"] * 2
    job = state(backend, third.id)
    assert (job["state"], job["attempt"]) == ("available", 0)
    assert sorted((label, step) for label, _, _, step in runs(alias)) == [
        ("one", "finished"), ("one", "started"), ("two", "finished"), ("two", "started")]


@DB
def test_a_second_signal_gives_the_running_job_back(alias, backend, adapter, tmp_path):
    """The task never ends by itself: a second signal gives its job back at once (no attempt
    used) and the process exits 0, its task cut off with it."""
    with transaction.atomic(using=alias):
        slow = waits_for_file.enqueue(alias, "stuck", str(tmp_path / "never"))
    backend.wait_for([slow.id])
    worker = Process(backend.url, alias)
    try:
        wait_until(lambda: runs(alias) != [], what="the slow task to start")
        worker.process.send_signal(signal.SIGTERM)
        worker.wait_said("SIGTERM received")
        worker.process.send_signal(signal.SIGINT)
        worker.wait_said("SIGINT received again")
        code, out = worker.stop(signal_it=False)
    finally:
        if worker.process.poll() is None:
            worker.process.kill()
    assert code == 0, "".join(worker.lines)
    assert "0 completed, 0 failed, 0 refused, 1 given back" in out
    job = state(backend, slow.id)
    assert (job["state"], job["attempt"]) == ("available", 0)


#: The module a rolling deploy brings: the web tier has it before the old workers do.
SHIPPED_TASKS = """
from testproject.worker_tasks import _record, task


@task(takes_context=True)
def send_invoice(context, using, label):
    _record(using, label, context.task_result.id, context.attempt)
    return label
"""


@DB
def test_a_task_unknown_to_an_old_worker_runs_once_a_worker_knows_it(alias, backend, adapter,
                                                                     tmp_path, caplog):
    """A rolling deploy, web tier first (issue 25): the web tier stages a task of a module the
    running worker does not have yet. That worker leaves it to the backend's retries (the loop's
    ``unknown_type``, retryable; logged at WARNING with the task path, counted), so the backend
    keeps it and hands it out again after its backoff; a worker of the new deploy runs it."""
    path = "shipped_tasks.send_invoice"
    # What OJSBackend stages for send_invoice.enqueue(alias, "invoice") in the web tier.
    job_id = adapter.enqueue_after_commit(path, [{"args": [alias, "invoice"], "kwargs": {}}],
                                          using=alias)
    backend.wait_for([job_id])
    with caplog.at_level("WARNING", logger="ojs_adapter_django.worker"):
        out = worker_once()  # the old worker: no shipped_tasks here
    assert "0 completed, 0 failed, 0 refused, 0 given back, 1 unknown" in out
    job = state(backend, job_id)
    assert (job["state"], job["attempt"]) == ("retryable", 1), job
    assert (job["error"]["type"], job["error"]["retryable"]) == ("unknown_type", True)
    warned = [r.getMessage() for r in caplog.records
              if r.levelname == "WARNING" and f"unknown task {path}" in r.getMessage()]
    assert len(warned) == 1 and job_id in warned[0]
    # The new deploy's worker has the module: it runs the job when the backend hands it out
    # again, as the job's second attempt.
    (tmp_path / "shipped_tasks.py").write_text(SHIPPED_TASKS)
    worker = Process(backend.url, alias, python_path=str(tmp_path))
    try:
        wait_until(lambda: state(backend, job_id)["state"] == "completed",
                   what="the new worker to run the job")
        code, out = worker.stop()
    finally:
        if worker.process.poll() is None:
            worker.process.kill()
    assert code == 0, "".join(worker.lines)
    assert "1 completed, 0 failed, 0 refused, 0 given back, 0 unknown" in out
    assert runs(alias) == [("invoice", job_id, 2, "ran")]
    job = state(backend, job_id)
    # The backend counts failed attempts: the old worker's one.
    assert (job["result"], job["attempt"]) == ("invoice", 1)
    assert [error["type"] for error in job["errors"]] == ["unknown_type"]


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


@DB
def test_a_backend_down_at_start_is_waited_for(alias):
    """No backend at the start: the worker loop logs it once, keeps trying with backoff, and
    the worker runs the job once the backend is there, once."""
    create_runs_table(alias)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    worker = Process(url, alias)
    server = None
    adapter = None
    try:
        worker.wait_said("the OJS backend is unavailable")
        assert worker.process.poll() is None
        server = Devserver(port)
        adapter = own_adapter(url, alias, TABLE)
        with override_settings(TASKS=tasks_setting(alias, adapter)):
            result = record_run.enqueue(alias, "late")
        server.wait_for([result.id])
        wait_until(lambda: runs(alias) != [], what="the worker to run the task")
        wait_until(lambda: server.call("GET", f"/ojs/v1/jobs/{result.id}")["job"]["state"]
                   == "completed", what="the ack")
        worker.wait_said("the OJS backend answers again")
        code, out = worker.stop()
    finally:
        if worker.process.poll() is None:
            worker.process.kill()
        if adapter is not None:
            adapter.reset()
        if server is not None:
            server.stop()
    assert code == 0, "".join(worker.lines)
    assert sum("the OJS backend is unavailable" in line for line in worker.lines) == 1
    assert runs(alias) == [("late", result.id, 1, "ran")]
    assert "1 completed" in out


@DB
def test_a_task_past_its_timeout_ms_is_nacked_timeout_while_it_runs(alias, backend, adapter,
                                                                      tmp_path):
    """``timeout_ms`` is the worker loop's: it nacks the job ``timeout`` while the task still
    runs (the job's retry policy then discards it), and the task's late outcome is dropped."""
    release = tmp_path / "release"
    job_id = adapter.enqueue_after_commit(
        "testproject.worker_tasks.waits_for_file",
        [{"args": [alias, "late", str(release)], "kwargs": {}}], using=alias, timeout_ms=300,
        retry={"max_attempts": 1})
    backend.wait_for([job_id])
    worker = Process(backend.url, alias)
    try:
        wait_until(lambda: state(backend, job_id)["state"] == "discarded",
                   what="the loop to nack the job timeout")
        job = state(backend, job_id)
        assert (job["error"]["type"], job["error"]["retryable"]) == ("timeout", True), job
        assert [step for *_, step in runs(alias)] == ["started"]  # the task still runs
        release.touch()
        worker.wait_said("ran past its timeout_ms")
        code, out = worker.stop()
    finally:
        if worker.process.poll() is None:
            worker.process.kill()
    assert code == 0, "".join(worker.lines)
    assert "0 completed, 1 failed, 0 refused, 0 given back" in out
    assert [step for *_, step in runs(alias)] == ["started", "finished"]
    job = state(backend, job_id)
    assert (job["state"], job["attempt"]) == ("discarded", 1)  # the late ack was never sent
    assert "result" not in job or job["result"] is None


TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"


@DB
def test_the_trace_context_of_the_enqueuing_request_reaches_the_task(alias, backend, adapter):
    """``current_job()`` gives the running task its job's ``traceparent`` and ``tracestate``:
    those of the request context that enqueued it (the job's meta), None without one; and the
    worker makes that context the task's current OpenTelemetry context."""
    from ojs_adapter_django.worker import current_job

    with request_context(traceparent=TRACEPARENT, tracestate="vendor=1"):
        traced = records_trace.enqueue(alias, "traced")
    untraced = records_trace.enqueue(alias, "untraced")
    backend.wait_for([traced.id, untraced.id])
    assert "2 completed" in worker_once("--count", "2")
    # The task's current OpenTelemetry context is the job's too: its own spans continue it.
    assert state(backend, traced.id)["result"] == {
        "traceparent": TRACEPARENT, "tracestate": "vendor=1",
        "otel": "4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7"}
    assert state(backend, untraced.id)["result"] == {"traceparent": None, "tracestate": None,
                                                     "otel": None}
    assert sorted((label, step) for label, _, _, step in runs(alias)) == [
        ("traced", TRACEPARENT), ("untraced", "none")]
    assert current_job() is None  # outside a task


@DB
def test_concurrency_runs_tasks_side_by_side(alias, backend, adapter):
    """``--concurrency 2``: each task can finish only once the other has started (it waits for
    it), and the times they recorded overlap."""
    with transaction.atomic(using=alias):
        first = overlaps.enqueue(alias, "a", "b")
        second = overlaps.enqueue(alias, "b", "a")
    backend.wait_for([first.id, second.id])
    out = worker_once("--concurrency", "2", "--count", "2")
    assert "2 completed, 0 failed" in out, out
    assert [state(backend, job.id)["result"] for job in (first, second)] == ["a", "b"]
    at = times(alias)
    assert max(at["a", "started"], at["b", "started"]) < min(at["a", "finished"],
                                                             at["b", "finished"]), at


@DB
@pytest.mark.parametrize("given", ["to_stop", "as_the_option"])
def test_a_stop_with_a_deadline_gives_back_a_task_that_outlives_it(alias, backend, adapter,
                                                                   tmp_path, given):
    """``Worker.stop(deadline)`` (what the conformance runner's ``worker_stop`` calls), or
    ``Worker(stop_deadline=...)`` and a ``stop()`` that names none (as the signal handler
    calls it): the task still running at the deadline has its job given back (no attempt
    used), ``run`` returns; the task's late outcome is dropped."""
    release = tmp_path / "release"
    slow = waits_for_file.enqueue(alias, "stuck", str(release))
    backend.wait_for([slow.id])
    worker = Worker(stop_deadline=0.2) if given == "as_the_option" else Worker()
    thread = threading.Thread(target=worker.run, name="test-worker-run")
    thread.start()
    try:
        wait_until(lambda: runs(alias) != [], what="the slow task to start")
        # The worker loop's default when none is given (docs/django-tasks.md, "Shutdown").
        assert worker._native.stop_deadline_ms == (200 if given == "as_the_option" else 25000)
        if given == "as_the_option":
            worker.stop()
        else:
            worker.stop(deadline=0.2)
        thread.join(WAIT)
        assert not thread.is_alive()
        job = state(backend, slow.id)
        assert (job["state"], job["attempt"]) == ("available", 0), job
        assert worker.counts == {"completed": 0, "failed": 0, "refused": 0, "requeued": 1,
                                 "unknown": 0}
    finally:
        release.touch()
        wait_until(lambda: not any(t.name.startswith("ojs-worker-slot")
                                   for t in threading.enumerate()),
                   what="the slot to end with its task")
    assert [step for *_, step in runs(alias)] == ["started", "finished"]
    assert worker.counts["requeued"] == 1 and worker.counts["completed"] == 0
    assert state(backend, slow.id)["state"] == "available"
