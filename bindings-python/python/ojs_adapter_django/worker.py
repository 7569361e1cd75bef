"""The worker side of Django tasks (``manage.py ojs_worker``): fetches the jobs that
``OJSBackend`` staged (type: the task's import path; args: ``[{"args": [...], "kwargs":
{...}}]``) from the OJS backend and runs them as Django runs a task, then acks or nacks them.

One job at a time, in the main thread:

- the job type is resolved with ``import_string``; it must be a ``Task`` whose import path is
  the type and whose backend is an ``OJSBackend``. Else the task is unknown to this worker
  (in a rolling deploy the web tier may run newer code than the workers): the job is nacked
  ``unknown_task``, retryable, so the OJS backend hands it out again with backoff within the
  job's retry policy, logged at WARNING and counted (``counts["unknown"]``). A payload that is
  not ``[{"args": [...], "kwargs": {...}}]`` is nacked non-retryable (``invalid_task_args``);
- the task runs through ``Task.call`` (``takes_context``: with a ``TaskContext``), between
  ``task_started`` and ``task_finished`` (sender: the backend's class), as Django's own
  ``ImmediateBackend`` sends them, with ``close_old_connections()`` before and after, as
  Django's request cycle does;
- its return value, normalised to JSON as Django does, is the ack's ``result``; an exception is
  a nack (retryable: the OJS backend retries per the job's policy) with the exception's class
  path as ``code``, its text as ``message`` and ``{"traceback", "worker_id"}`` as ``details``;
  a return value JSON cannot hold is a nack that is not retried (the task ran);
- a thread renews the reservation (heartbeat) of every job this worker holds once it has held
  it for a quarter of the visibility timeout;
- SIGTERM / SIGINT: no more fetches; the running job finishes and is acked or nacked, jobs
  fetched but not started are given back (nack ``requeue``); a second signal interrupts the
  running job and gives it back too.

docs/django-tasks.md, "Running tasks", has the rules and the reasons.
"""

from __future__ import annotations

import logging
import os
import signal
import socket
import threading
import time
import uuid
from traceback import format_exception
from typing import Any, Callable, Optional

from django.db import close_old_connections
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.module_loading import import_string

try:  # Django >= 6.0
    from django.tasks import Task, TaskContext, TaskResult, TaskResultStatus, task_backends
    from django.tasks.base import TaskError
    from django.tasks.signals import task_finished, task_started
    from django.utils.json import normalize_json
except ImportError:  # Django 5.2 with the django-tasks backport
    from django_tasks import TaskContext, TaskResult, TaskResultStatus, task_backends
    from django_tasks.base import Task, TaskError
    from django_tasks.signals import task_finished, task_started
    from django_tasks.utils import normalize_json

from .errors import (
    BackendRejectedError,
    BackendUnavailableError,
    OJSError,
)
from .tasks import OJSBackend

#: The worker's logger (a child of ``ojs_adapter_django``).
logger = logging.getLogger("ojs_adapter_django.worker")

#: The nack ``code`` of a job whose type is no task of an ``OJSBackend`` here (retryable: a
#: worker of a newer deploy may know it; the backend's retry policy decides how often).
UNKNOWN_TASK = "unknown_task"
#: The nack ``code`` of a job whose args are not ``[{"args": [...], "kwargs": {...}}]`` (never
#: retried).
INVALID_TASK_ARGS = "invalid_task_args"
#: The nack ``code`` of a job given back unrun (``requeue``) by a stopping worker.
WORKER_STOPPING = "worker_stopping"

#: The longest nack ``message`` and ``details.traceback`` sent (characters; the middle of a
#: longer text is cut): a nack is one HTTP request, and the backend keeps every error.
MAX_MESSAGE = 2_000
MAX_TRACEBACK = 32_000

#: The first wait after the backend did not answer, and the longest (doubling in between).
INITIAL_BACKOFF = 0.5
MAX_BACKOFF = 10.0


class Abort(BaseException):
    """Raised in the main thread by a second SIGTERM/SIGINT: the running job is interrupted and
    given back (a BaseException, so that a task's ``except Exception`` does not swallow it)."""


class _Refused(Exception):
    """A job this worker cannot run: nacked with ``code``; an ``unknown_task`` is retryable
    (another worker may know the task), anything else is never retried."""

    def __init__(self, code: str, message: str) -> None:
        super().__init__(message)
        self.code = code
        self.retryable = code == UNKNOWN_TASK


def default_worker_id() -> str:
    return f"{socket.gethostname()}-{os.getpid()}-{uuid.uuid4().hex[:8]}"


def class_path(kind: type) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"


class Worker:
    """Fetches and runs the jobs of ``queues`` through the adapter and database of the
    ``TASKS`` backend ``backend_alias`` (an ``OJSBackend``)."""

    def __init__(self, backend_alias: str = "default", queues: Optional[list[str]] = None,
                 count: int = 1, visibility_timeout: float = 30.0, poll_interval: float = 1.0,
                 worker_id: Optional[str] = None) -> None:
        from django.conf import settings

        backend = task_backends[backend_alias]
        if not isinstance(backend, OJSBackend):
            raise OJSWorkerError(
                f'TASKS["{backend_alias}"] is a {class_path(type(backend))}, not an '
                "ojs_adapter_django.tasks.OJSBackend: ojs_worker runs the tasks that backend "
                "enqueues")
        self.backend = backend
        configured = list(settings.TASKS.get(backend_alias, {}).get("QUEUES", None) or [])
        if queues:
            if configured:
                outside = [queue for queue in queues if queue not in configured]
                if outside:
                    raise OJSWorkerError(
                        f"queue {outside[0]!r} is not in TASKS[\"{backend_alias}\"][\"QUEUES\"] "
                        f"({', '.join(configured)}): no task of that backend can be enqueued there")
            self.queues = list(dict.fromkeys(queues))
        else:
            self.queues = configured or ["default"]
        if count < 1:
            raise OJSWorkerError("--count must be at least 1")
        if visibility_timeout <= 0:
            raise OJSWorkerError("--visibility-timeout must be positive")
        self.count = count
        self.visibility_timeout_ms = max(1, int(visibility_timeout * 1000))
        self.poll_interval = poll_interval
        self.worker_id = worker_id or default_worker_id()
        #: Set by the first SIGTERM/SIGINT (or ``stop()``): no more fetches.
        self.stopping = threading.Event()
        #: Fetched and neither acked nor nacked yet: ``{job_id: when its reservation was last
        #: renewed (monotonic)}``; the heartbeat thread reads it.
        self._held: dict[str, float] = {}
        self._held_lock = threading.Lock()
        self._unavailable_since: Optional[float] = None
        self._failures = 0
        #: What this worker did with the jobs it fetched: ran them (``completed``, ``failed``),
        #: refused them for good (``refused``), gave them back unrun (``requeued``), or nacked
        #: them for a retry because it does not know their task (``unknown``).
        self.counts = {"completed": 0, "failed": 0, "refused": 0, "requeued": 0, "unknown": 0}

    # -- the backend -------------------------------------------------------------------------

    def _call(self, command: dict) -> Any:
        return self.backend.adapter.worker(command, using=self.backend.database)

    def _answered(self) -> None:
        if self._unavailable_since is not None:
            logger.warning("the OJS backend answers again (after %d failed "
                           "requests in %.1fs)", self._failures,
                           time.monotonic() - self._unavailable_since)
            self._unavailable_since = None
            self._failures = 0

    def _unavailable(self, error: OJSError) -> float:
        """Logs the first failure of a run of them (the others at DEBUG); the next wait."""
        self._failures += 1
        if self._unavailable_since is None:
            self._unavailable_since = time.monotonic()
            logger.warning("the OJS backend is unavailable, retrying with backoff "
                           "(up to %ss) until it answers: %s", MAX_BACKOFF, error)
        else:
            logger.debug("the OJS backend is still unavailable: %s", error)
        return min(MAX_BACKOFF, INITIAL_BACKOFF * 2 ** (self._failures - 1))

    def fetch(self) -> list[dict]:
        """One fetch; raises BackendUnavailableError when the backend does not answer."""
        answer = self._call({"op": "fetch", "queues": self.queues, "count": self.count,
                             "worker_id": self.worker_id,
                             "visibility_timeout_ms": self.visibility_timeout_ms})
        self._answered()
        jobs = (answer or {}).get("jobs") or []
        now = time.monotonic()
        with self._held_lock:
            for job in jobs:
                self._held[job["id"]] = now
        return jobs

    def _settle(self, job_id: str, command: dict) -> Optional[dict]:
        """Sends an ack or nack; BACKEND_UNAVAILABLE is retried with backoff for as long as the
        reservation would last (after that the backend gives the job to another worker, and
        would refuse this answer), BACKEND_REJECTED is logged. The server's answer, or None."""
        deadline = time.monotonic() + self.visibility_timeout_ms / 1000
        try:
            while True:
                try:
                    answer = self._call(command)
                    self._answered()
                    return answer
                except BackendUnavailableError as exc:
                    wait = self._unavailable(exc)
                    if time.monotonic() + wait > deadline:
                        logger.error("job %s: the %s was not delivered within the "
                                     "visibility timeout; the backend will give the job to "
                                     "a worker again: %s", job_id, command["op"], exc)
                        return None
                    time.sleep(wait)
                except BackendRejectedError as exc:
                    logger.warning("job %s: the backend refused the %s: %s",
                                   job_id, command["op"], exc)
                    return None
        finally:
            with self._held_lock:
                self._held.pop(job_id, None)

    def ack(self, job_id: str, result: Any) -> Optional[dict]:
        command = {"op": "ack", "job_id": job_id}
        if result is not None:
            command["result"] = result
        return self._settle(job_id, command)

    def nack(self, job_id: str, code: str, message: str, *, retryable: Optional[bool] = None,
             details: Optional[dict] = None, requeue: bool = False) -> Optional[dict]:
        error: dict[str, Any] = {"code": code, "message": message or code}
        if retryable is not None:
            error["retryable"] = retryable
        if details is not None:
            error["details"] = details
        return self._settle(job_id, {"op": "nack", "job_id": job_id, "error": error,
                                     "requeue": requeue})

    def requeue_held(self) -> None:
        """Gives back every job fetched and not settled (a stopping worker)."""
        with self._held_lock:
            held = list(self._held)
        for job_id in held:
            logger.info("job %s given back unrun (the worker stops)", job_id)
            if self.nack(job_id, WORKER_STOPPING, "the worker stopped before running the job",
                         requeue=True) is not None:
                self.counts["requeued"] += 1

    # -- heartbeat ---------------------------------------------------------------------------

    def _heartbeats(self, done: threading.Event) -> None:
        """Renews the reservation of every job held for at least a quarter of the visibility
        timeout, every quarter of it: a job's reservation is renewed at most half the timeout
        after it began."""
        quarter = self.visibility_timeout_ms / 4000
        while not done.wait(quarter):
            now = time.monotonic()
            with self._held_lock:
                due = [job_id for job_id, renewed in self._held.items()
                       if now - renewed >= quarter]
            if not due:
                continue
            try:
                answer = self._call({"op": "heartbeat", "worker_id": self.worker_id,
                                     "active_jobs": due,
                                     "visibility_timeout_ms": self.visibility_timeout_ms})
            except OJSError as exc:
                logger.warning("heartbeat for %s failed (retried in %.1fs): %s",
                               ", ".join(due), quarter, exc)
                continue
            extended = set((answer or {}).get("jobs_extended") or [])
            with self._held_lock:
                for job_id in extended:
                    if job_id in self._held:
                        self._held[job_id] = now
            lost = [job_id for job_id in due if job_id not in extended]
            if lost:
                logger.warning("the backend did not extend the reservation of %s "
                               "(no longer active for this worker)", ", ".join(lost))
            directive = (answer or {}).get("directive")
            if directive not in (None, "continue"):
                logger.warning("heartbeat directive %r: stopping after the "
                               "running job", directive)
                self.stopping.set()

    # -- running -----------------------------------------------------------------------------

    def _resolve(self, job: dict) -> tuple[Any, OJSBackend, list, dict]:
        job_type = job.get("type")
        if not isinstance(job_type, str):
            raise _Refused(UNKNOWN_TASK, f"job type {job_type!r} is not an import path")
        try:
            task = import_string(job_type)
        except ImportError as exc:
            raise _Refused(UNKNOWN_TASK, f"{job_type} is not a task of this project: {exc}")
        if not isinstance(task, Task):
            raise _Refused(UNKNOWN_TASK, f"{job_type} is a {class_path(type(task))}, not a "
                                         "Django task (a function decorated with @task)")
        if task.module_path != job_type:
            raise _Refused(UNKNOWN_TASK, f"{job_type} is the task {task.module_path} under "
                                         "another name: a job names a task by its own import path")
        try:
            backend = task.get_backend()
        except Exception as exc:
            raise _Refused(UNKNOWN_TASK, f"the backend {task.backend!r} of the task {job_type} "
                                         f"cannot be loaded: {exc}")
        if not isinstance(backend, OJSBackend):
            raise _Refused(UNKNOWN_TASK, f"the task {job_type} runs on the task backend "
                                         f"{task.backend!r} ({class_path(type(backend))}), not "
                                         "an ojs_adapter_django.tasks.OJSBackend")
        payload = job.get("args")
        if (not isinstance(payload, list) or len(payload) != 1 or not isinstance(payload[0], dict)
                or not isinstance(payload[0].get("args", []), list)
                or not isinstance(payload[0].get("kwargs", {}), dict)):
            # The shape only: a job's arguments are the application's data, never logged.
            raise _Refused(INVALID_TASK_ARGS, f"the args of a {job_type} job must be "
                                              '[{"args": [...], "kwargs": {...}}], got '
                                              f"{_shape(payload)}")
        return task, backend, payload[0].get("args", []), payload[0].get("kwargs", {})

    def _result(self, task: Any, job: dict, args: list, kwargs: dict) -> Any:
        """The ``TaskResult`` of this attempt: the job id, RUNNING, the job's earlier failures
        as ``errors`` (class path and traceback, as this worker nacks them) and one worker id
        per attempt (the earlier ones from those nacks), so ``TaskContext.attempt`` counts the
        attempts as the OJS backend does."""
        earlier = [error for error in job.get("errors") or [] if isinstance(error, dict)]
        errors = []
        worker_ids = []
        for error in earlier:
            details = error.get("details") if isinstance(error.get("details"), dict) else {}
            errors.append(TaskError(exception_class_path=str(error.get("type") or ""),
                                    traceback=str(details.get("traceback") or
                                                  error.get("message") or "")))
            worker_ids.append(str(details.get("worker_id") or ""))
        worker_ids.append(self.worker_id)
        now = timezone.now()
        enqueued_at = job.get("enqueued_at")
        return TaskResult(
            task=task,
            id=job["id"],
            status=TaskResultStatus.RUNNING,
            enqueued_at=parse_datetime(enqueued_at) if isinstance(enqueued_at, str) else None,
            started_at=now,
            finished_at=None,
            last_attempted_at=now,
            args=args,
            kwargs=kwargs,
            backend=task.backend,
            errors=errors,
            worker_ids=worker_ids,
        )

    def run_job(self, job: dict) -> None:
        """Runs one fetched job and acks or nacks it."""
        job_id = job["id"]
        close_old_connections()
        try:
            try:
                task, backend, args, kwargs = self._resolve(job)
            except _Refused as refused:
                if refused.retryable:
                    logger.warning("job %s: unknown task %s, nacked for a retry (the backend "
                                   "hands it out again with backoff while its retry policy "
                                   "allows; a worker that knows the task runs it): %s",
                                   job_id, job.get("type"), refused)
                    self.counts["unknown"] += 1
                else:
                    logger.error("job %s refused (%s, not retried): %s", job_id,
                                 refused.code, refused)
                    self.counts["refused"] += 1
                self.nack(job_id, refused.code, str(refused), retryable=refused.retryable,
                          details={"worker_id": self.worker_id})
                return
            result = self._result(task, job, args, kwargs)
            sender = type(backend)
            _send(task_started, sender, result)
            started = time.monotonic()
            context = (TaskContext(task_result=result),) if task.takes_context else ()
            retryable = True
            try:
                raw = task.call(*context, *args, **kwargs)
                # The task ran: a return value JSON cannot hold fails the same way on every
                # attempt, so that failure is not retried (its side effects are done).
                retryable = False
                value = normalize_json(raw)
            except (KeyboardInterrupt, Abort):
                raise
            except BaseException as exc:
                path = class_path(type(exc))
                trace = "".join(format_exception(exc))
                message = str(exc) or path
                if not retryable:
                    message = (f"the return value of {job['type']} cannot be stored as JSON "
                               f"(Django's normalize_json): {message}")
                object.__setattr__(result, "finished_at", timezone.now())
                result.errors.append(TaskError(exception_class_path=path, traceback=trace))
                object.__setattr__(result, "status", TaskResultStatus.FAILED)
                _send(task_finished, sender, result)
                answer = self.nack(job_id, path, _clip(message, MAX_MESSAGE),
                                   retryable=retryable,
                                   details={"traceback": _clip(trace, MAX_TRACEBACK),
                                            "worker_id": self.worker_id})
                self.counts["failed"] += 1
                logger.warning("job %s (%s) failed after %.3fs: %s: %s; the backend "
                               "made it %s", job_id, job["type"], time.monotonic() - started,
                               path, message, (answer or {}).get("state", "unknown"))
                return
            object.__setattr__(result, "finished_at", timezone.now())
            object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
            object.__setattr__(result, "_return_value", value)
            _send(task_finished, sender, result)
            self.ack(job_id, value)
            self.counts["completed"] += 1
            logger.info("job %s (%s) completed in %.3fs", job_id, job["type"],
                        time.monotonic() - started)
        finally:
            close_old_connections()

    def run(self, once: bool = False) -> None:
        """Fetches and runs jobs until ``stopping`` is set (``once``: one answered fetch).
        BACKEND_UNAVAILABLE is waited out with backoff; other errors of a fetch (a bad queue,
        a bad configuration, a refusal) raise."""
        done = threading.Event()
        beat = threading.Thread(target=self._heartbeats, args=(done,), name="ojs-worker-heartbeat",
                                daemon=True)
        beat.start()
        logger.info("worker %s fetching from %s (backend %r, database %r)",
                    self.worker_id, ", ".join(self.queues), self.backend.alias,
                    self.backend.database)
        try:
            while not self.stopping.is_set():
                try:
                    jobs = self.fetch()
                except BackendUnavailableError as exc:
                    if once:  # the command's error says it; nothing is retried
                        raise
                    self.stopping.wait(self._unavailable(exc))
                    continue
                for job in jobs:
                    if self.stopping.is_set():
                        break
                    try:
                        self.run_job(job)
                    except Exception as exc:
                        # Not the task's exception (run_job nacks those): the task's module
                        # raised while imported, a broken job. The job must not stay held
                        # (its heartbeats would keep it forever): a retryable nack.
                        logger.exception("job %s (%s) could not be run", job.get("id"),
                                         job.get("type"))
                        if job.get("id") in self._held:
                            self.counts["failed"] += 1
                            self.nack(job["id"], class_path(type(exc)),
                                      _clip(str(exc) or class_path(type(exc)), MAX_MESSAGE),
                                      retryable=True,
                                      details={"traceback": _clip("".join(format_exception(exc)),
                                                                  MAX_TRACEBACK),
                                               "worker_id": self.worker_id})
                if once:
                    break
                if not jobs:
                    self.stopping.wait(self.poll_interval)
        except Abort:
            logger.warning("interrupted by a second signal; giving the running job "
                           "back")
        finally:
            try:
                self.requeue_held()
            finally:
                done.set()
                beat.join()

    def stop(self) -> None:
        self.stopping.set()

    # -- signals -----------------------------------------------------------------------------

    def install_signal_handlers(self) -> Callable[[], None]:
        """SIGTERM/SIGINT: the first stops fetching (the running job finishes), the second
        raises ``Abort`` in the running job. Returns what restores the previous handlers."""
        previous = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT)}

        def handler(number: int, frame: Any) -> None:
            name = signal.Signals(number).name
            if self.stopping.is_set():
                raise Abort(name)
            logger.warning("%s received: no more fetches; the running job finishes "
                           "(a second signal interrupts it and gives it back)", name)
            self.stopping.set()

        for number in previous:
            signal.signal(number, handler)

        def restore() -> None:
            for number, old in previous.items():
                signal.signal(number, old)

        return restore


class OJSWorkerError(Exception):
    """A worker that cannot run with these settings or options."""


def _shape(payload: Any) -> str:
    """What is wrong with a task job's args, by types and sizes only (never a value)."""
    if not isinstance(payload, list):
        return f"a {type(payload).__name__}"
    if len(payload) != 1:
        return f"a list of {len(payload)} items"
    if not isinstance(payload[0], dict):
        return f"a list holding a {type(payload[0]).__name__}"
    for key, kind in (("args", list), ("kwargs", dict)):
        value = payload[0].get(key, kind())
        if not isinstance(value, kind):
            return f'"{key}" as a {type(value).__name__}'
    return "another shape"


def _clip(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    half = (limit - 40) // 2
    return f"{text[:half]}\n[... {len(text) - 2 * half} characters cut ...]\n{text[-half:]}"


def _send(sig: Any, sender: type, result: Any) -> None:
    """Sends ``task_started`` / ``task_finished``; a receiver's exception is logged, not raised
    (it must not stop the worker or leave the job unanswered)."""
    for receiver, response in sig.send_robust(sender, task_result=result):
        if isinstance(response, Exception):
            logger.error("a receiver of the task signal, %r, raised", receiver,
                         exc_info=response)


__all__ = ["Worker", "Abort", "OJSWorkerError", "UNKNOWN_TASK", "INVALID_TASK_ARGS",
           "WORKER_STOPPING"]
