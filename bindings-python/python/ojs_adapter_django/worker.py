"""The worker side of Django tasks (``manage.py ojs_worker``): runs the jobs that ``OJSBackend``
staged (type: the task's import path; args: ``[{"args": [...], "kwargs": {...}}]``) on the
core's worker loop (``Bridge.start_worker``, issue 28).

The loop does the OJS side: fetching (one job per free slot), heartbeats at a quarter of the
visibility timeout, acks and nacks, backoff while the backend is down, ``timeout_ms``,
decryption, unknown job types, graceful stop, the trace context. This module is the Django
glue of each slot (``concurrency`` threads, each ``next`` -> run -> ``finish``):

- the job type is resolved with ``import_string``; it must be a ``Task`` whose import path is
  the type and whose backend is an ``OJSBackend``. Else the task is unknown to this worker (in
  a rolling deploy the web tier may run newer code than the workers): outcome ``unknown_type``
  (the loop nacks it retryable, never discarded by this worker), logged at WARNING with the
  task path, counted (``counts["unknown"]``). Args that are not ``[{"args": [...], "kwargs":
  {...}}]`` fail the job for good (``invalid_task_args``, not retryable);
- the task runs through ``Task.call`` (``takes_context``: with a ``TaskContext``), between
  ``task_started`` and ``task_finished`` (sender: the backend's class), as Django's own
  ``ImmediateBackend`` sends them, with ``close_old_connections()`` before and after, as
  Django's request cycle does; ``current_job()`` gives the task its job (id, trace context);
- its return value, normalised to JSON as Django does, is the ack's ``result``; an exception
  fails the job (retryable: the OJS backend retries per the job's policy) with the exception's
  class path as ``code``, its text as ``message`` and ``{"traceback", "worker_id"}`` as
  ``details``; a return value JSON cannot hold fails it without retry (the task ran);
- ``install_signal_handlers``: SIGTERM / SIGINT stop gracefully (no more fetches, the running
  tasks have the stop deadline to finish and be acked or nacked; what still runs then is given
  back); a second signal gives the running jobs back at once.

docs/django-tasks.md, "Running tasks", has the rules and the reasons.
"""

from __future__ import annotations

import json
import logging
import signal
import threading
import time
from contextvars import ContextVar
from dataclasses import dataclass, field
from traceback import format_exception
from typing import Any, Callable, Optional

from django.db import close_old_connections, connections
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

from . import _native
from .context import attach_trace, detach_trace
from .tasks import OJSBackend

#: The worker's logger (a child of ``ojs_adapter_django``); the worker loop's own records (the
#: backend down and back, an ack or nack not delivered, a job timed out or given back, a job
#: that cannot be decrypted) come here too.
logger = logging.getLogger("ojs_adapter_django.worker")

#: The nack ``code`` of a job whose args are not ``[{"args": [...], "kwargs": {...}}]`` (never
#: retried).
INVALID_TASK_ARGS = "invalid_task_args"

#: With ``once`` and no ``poll_interval``: how long the worker waits for a job before it exits.
ONCE_WAIT = 1.0
#: Seconds between two looks of the main thread (stop requests, the loop's log records).
TICK = 0.25
#: A slot's wait for a job per call (a stop ends the wait at once).
SLOT_WAIT_MS = 10_000

_LEVELS = {"info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}
_REQUEUE = json.dumps({"outcome": "requeue"})


@dataclass(frozen=True)
class Job:
    """The job the current task runs, as the worker loop handed it out (``current_job()``)."""

    id: str
    type: str
    queue: Optional[str]
    #: The W3C trace context of the request that enqueued the job (its ``meta``), or None.
    traceparent: Optional[str]
    tracestate: Optional[str]
    meta: dict = field(default_factory=dict)


_current_job: ContextVar[Optional[Job]] = ContextVar("ojs_current_job", default=None)


def current_job() -> Optional[Job]:
    """The job of the task running in this thread (or its ``async def`` task's event loop)
    under ``ojs_worker``; None outside one. ``current_job().traceparent`` continues the trace
    of the request that enqueued it."""
    return _current_job.get()


class _Unknown(Exception):
    """The job names no task of an ``OJSBackend`` here (outcome ``unknown_type``)."""


class _Refused(Exception):
    """A job of a task whose args no run can use (``invalid_task_args``, not retried)."""


class OJSWorkerError(Exception):
    """A worker that cannot run with these settings or options."""


def class_path(kind: type) -> str:
    return f"{kind.__module__}.{kind.__qualname__}"


def _ms(seconds: float) -> int:
    return int(round(seconds * 1000))


class Worker:
    """Runs the jobs of ``queues`` through the adapter and database of the ``TASKS`` backend
    ``backend_alias`` (an ``OJSBackend``) on the core worker loop. ``None`` options take the
    core's defaults (``concurrency``, ``visibility_timeout``, ``poll_interval`` and
    ``stop_deadline`` in seconds, ``worker_id``). ``count``: the most jobs to take before stopping (default: no limit; with
    ``run(once=True)``: 1)."""

    def __init__(self, backend_alias: str = "default", queues: Optional[list[str]] = None,
                 count: Optional[int] = None, visibility_timeout: Optional[float] = None,
                 poll_interval: Optional[float] = None, worker_id: Optional[str] = None,
                 concurrency: Optional[int] = None,
                 stop_deadline: Optional[float] = None) -> None:
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
        if count is not None and count < 1:
            raise OJSWorkerError("--count must be at least 1")
        self.count = count
        self.poll_interval = poll_interval
        #: The loop's options; what is absent takes the core's default.
        self.options: dict[str, Any] = {"queues": self.queues}
        if concurrency is not None:
            self.options["concurrency"] = concurrency
        if visibility_timeout is not None:
            self.options["visibility_timeout_ms"] = _ms(visibility_timeout)
        if poll_interval is not None:
            self.options["idle_poll_ms"] = _ms(poll_interval)
        if worker_id is not None:
            self.options["worker_id"] = worker_id
        if stop_deadline is not None:
            self.options["stop_deadline_ms"] = _ms(stop_deadline)
        #: The loop's worker id once ``run`` started it (given, or the core's).
        self.worker_id = worker_id
        #: What this worker did with the jobs it was handed: ran them (``completed``,
        #: ``failed``; a job past its ``timeout_ms`` is failed), refused them for good
        #: (``refused``), gave them back unfinished (``requeued``), or left them to the
        #: backend's retries because it does not know their task (``unknown``).
        self.counts = {"completed": 0, "failed": 0, "refused": 0, "requeued": 0, "unknown": 0}
        #: Set by ``stop()`` (the first SIGTERM/SIGINT): the loop stops fetching.
        self.stopping = threading.Event()
        #: Set once every slot is about to wait for its first job (or ``run`` ended): a job the
        #: loop fetches from then on goes to a slot at once (one fetched while no slot waits
        #: stays buffered, and a stop gives it back unrun).
        self.ready = threading.Event()
        self._slots_waiting = 0
        self._give_back = threading.Event()
        self._deadline_ms: Optional[int] = None
        self._lock = threading.RLock()
        #: The most jobs to take (None: no limit), those taken, those waited for.
        self._limit: Optional[int] = None
        self._handed = 0
        self._reserved = 0
        #: job id -> (the slot thread running it, its assignment, when it began).
        self._running: dict[str, tuple[threading.Thread, dict, float]] = {}
        #: Jobs given back while their task runs: no longer this worker's.
        self._abandoned: set[str] = set()
        self._gave_back = False

    # -- running -----------------------------------------------------------------------------

    def run(self, once: bool = False) -> None:
        """Runs the slots until ``stop()`` (``once``: until ``count`` jobs, default 1, were
        taken or a wait of ``poll_interval`` brought none). Returns once the loop has stopped
        and every ack and nack went. With ``once``, a backend that does not answer raises
        ``BackendUnavailableError`` (one request first); otherwise the loop waits it out."""
        if once:
            # The loop waits out an outage; a single run must say it instead.
            self.backend.adapter.worker(
                {"op": "get", "job_id": "00000000-0000-0000-0000-000000000000"},
                using=self.backend.database)
        native = self.backend.adapter.start_worker(self.options, using=self.backend.database)
        self._native = native
        self.worker_id = native.worker_id
        self._limit = self.count if self.count is not None else (1 if once else None)
        slots = native.concurrency
        if self._limit is not None:
            slots = min(slots, self._limit)
        wait_ms = _ms(ONCE_WAIT if self.poll_interval is None else self.poll_interval) \
            if once else SLOT_WAIT_MS
        logger.info("worker %s fetching from %s (backend %r, database %r, %d slot%s)",
                    self.worker_id, ", ".join(self.queues), self.backend.alias,
                    self.backend.database, slots, "" if slots == 1 else "s")
        threads = [threading.Thread(target=self._slot, args=(native, once, wait_ms, slots),
                                    name=f"ojs-worker-slot-{n}", daemon=True)
                   for n in range(slots)]
        for thread in threads:
            thread.start()
        try:
            while not self.stopping.wait(TICK):
                self._forward_log()
                if not any(thread.is_alive() for thread in threads):
                    break
        finally:
            try:
                self._shut_down(native, threads)
            finally:
                self.ready.set()

    def stop(self, deadline: Optional[float] = None) -> None:
        """Stops gracefully: no more fetches; the running tasks have ``deadline`` seconds to
        finish (None: the worker's ``stop_deadline``, else the core's default, 25 s), then their
        jobs are given back. ``run`` returns
        once the loop has stopped. Thread-safe; a signal handler may call it."""
        if deadline is not None and not self.stopping.is_set():
            self._deadline_ms = max(0, _ms(deadline))
        self.stopping.set()

    def give_back(self) -> None:
        """Stops at once: the running jobs are given back now (no attempt used) while their
        tasks are left running, and ``run`` returns (a second SIGTERM/SIGINT)."""
        self._give_back.set()
        self.stopping.set()

    def _shut_down(self, native: Any, threads: list[threading.Thread]) -> None:
        self.stopping.set()
        stopper = threading.Thread(target=native.stop, args=(self._deadline_ms,), name="ojs-worker-stop",
                                   daemon=True)
        stopper.start()
        while stopper.is_alive():
            if self._give_back.is_set() and not self._gave_back:
                self._give_back_running(native)
            self._forward_log()
            stopper.join(TICK)
        self._past_the_deadline()
        # The slots end once their task is done. A task whose job was given back (past the
        # deadline, or by a second signal) is no longer this worker's: it is not waited for.
        for thread in threads:
            while thread.is_alive() and not self._give_back.is_set():
                with self._lock:
                    abandoned = any(held[0] is thread and job_id in self._abandoned
                                    for job_id, held in self._running.items())
                if abandoned:
                    break
                thread.join(TICK)
        self._forward_log()

    def _past_the_deadline(self) -> None:
        """After the stop's deadline: the jobs still running were given back by the loop."""
        with self._lock:
            for job_id, (_, assignment, started) in self._running.items():
                if job_id in self._abandoned or _timed_out(assignment, started):
                    continue
                self._abandoned.add(job_id)
                self.counts["requeued"] += 1
                logger.warning("job %s (%s) given back unfinished: the stop deadline passed; "
                               "its task is left running", job_id, assignment.get("type"))

    def _give_back_running(self, native: Any) -> None:
        """A second signal: the running jobs go back to the backend now."""
        with self._lock:
            self._gave_back = True
            for job_id in self._running:
                if job_id not in self._abandoned and native.finish(job_id, _REQUEUE):
                    self._abandoned.add(job_id)
                    self.counts["requeued"] += 1
                    logger.warning("job %s given back unfinished (a second signal); its task "
                                   "is left running", job_id)

    def _take(self) -> bool:
        """Reserves one job of the budget for a wait, if any is left."""
        with self._lock:
            if self._limit is None:
                return True
            if self._handed + self._reserved >= self._limit:
                return False
            self._reserved += 1
            return True

    def _untake(self) -> None:
        with self._lock:
            if self._limit is not None:
                self._reserved -= 1

    def _slot(self, native: Any, once: bool, wait_ms: int, slots: int) -> None:
        """One handler slot: next -> run -> finish, until the loop stops (``once``: until the
        budget is used or a wait brings no job)."""
        me = threading.current_thread()
        with self._lock:
            self._slots_waiting += 1
            if self._slots_waiting == slots:
                self.ready.set()
        try:
            while self._take():
                text = native.next(wait_ms)
                if not text:
                    self._untake()
                    if text is None or once:
                        return
                    continue
                assignment = json.loads(text)
                job_id = assignment["id"]
                with self._lock:
                    if self._limit is not None:
                        self._reserved -= 1
                    self._handed += 1
                    if self._gave_back:  # handed out just as a second signal came
                        if native.finish(job_id, _REQUEUE):
                            self.counts["requeued"] += 1
                        return
                    self._running[job_id] = (me, assignment, time.monotonic())
                    if self._handed == self._limit:
                        self.stopping.set()  # the last job of the budget: no more fetches
                try:
                    self._handle(native, assignment)
                finally:
                    with self._lock:
                        self._running.pop(job_id, None)
        except Exception:
            logger.exception("a worker slot failed; the worker stops")
            self.stopping.set()
        finally:
            connections.close_all()  # this thread's connections

    def _handle(self, native: Any, assignment: dict) -> None:
        """Runs one job handed out by the loop and gives the loop its outcome."""
        job_id, job_type = assignment["id"], assignment.get("type")
        started = time.monotonic()
        meta = assignment.get("meta")
        job = Job(id=job_id, type=str(job_type), queue=assignment.get("queue"),
                  traceparent=assignment.get("traceparent"),
                  tracestate=assignment.get("tracestate"),
                  meta=meta if isinstance(meta, dict) else {})
        token = _current_job.set(job)
        trace_token = attach_trace(job.traceparent, job.tracestate)
        close_old_connections()
        try:
            outcome, kind, why = self._run(assignment)
        except Exception as exc:  # the glue failed (not the task): the job must not stay held
            logger.exception("job %s (%s) could not be run", job_id, job_type)
            outcome, kind, why = self._failure(exc, None, True), "failed", str(exc)
        finally:
            close_old_connections()
            detach_trace(trace_token)
            _current_job.reset(token)
        took = time.monotonic() - started
        with self._lock:  # one step with the bookkeeping of a stop
            finished = native.finish(job_id, json.dumps(outcome))
            self._running.pop(job_id, None)
            if job_id in self._abandoned:
                return  # counted when it was given back
            if finished:
                self.counts[kind] += 1
            elif _timed_out(assignment, started):
                self.counts["failed"] += 1
            else:
                self.counts["requeued"] += 1
        if finished and kind == "completed":
            logger.info("job %s (%s) completed in %.3fs", job_id, job_type, took)
        elif finished and kind == "failed":
            logger.warning("job %s (%s) failed after %.3fs: %s: %s", job_id, job_type, took,
                           outcome["code"], why)
        elif not finished and _timed_out(assignment, started):
            logger.warning("job %s (%s) ran past its timeout_ms: the worker loop nacked it "
                           "timeout; its outcome (%s) is dropped", job_id, job_type, kind)
        elif not finished:
            logger.warning("job %s (%s) given back unfinished: the stop deadline passed; its "
                           "outcome (%s) is dropped", job_id, job_type, kind)

    def _run(self, assignment: dict) -> tuple[dict, str, str]:
        """The outcome of one job (the ``finish`` JSON of the bridge), the count it goes to and
        what to log."""
        job_id, job_type = assignment["id"], assignment.get("type")
        try:
            task, backend, args, kwargs = self._resolve(assignment)
        except _Unknown as unknown:
            logger.warning("job %s: unknown task %s, left to the backend's retries (a worker "
                           "that knows the task runs it): %s", job_id, job_type, unknown)
            return {"outcome": "unknown_type"}, "unknown", str(unknown)
        except _Refused as refused:
            logger.error("job %s refused (%s, not retried): %s", job_id, INVALID_TASK_ARGS,
                         refused)
            return ({"outcome": "failed", "code": INVALID_TASK_ARGS, "message": str(refused),
                     "retryable": False, "details": {"worker_id": self.worker_id}},
                    "refused", str(refused))
        except Exception as exc:
            # Not the task's exception: its module raised while imported (a broken deploy).
            logger.exception("job %s (%s) could not be run", job_id, job_type)
            return self._failure(exc, None, True), "failed", str(exc)
        result = self._result(task, assignment.get("job") or {}, job_id, args, kwargs)
        sender = type(backend)
        _send(task_started, sender, result)
        context = (TaskContext(task_result=result),) if task.takes_context else ()
        ran = False
        try:
            raw = task.call(*context, *args, **kwargs)
            # The task ran: a return value JSON cannot hold fails the same way on every
            # attempt, so that failure is not retried (its side effects are done).
            ran = True
            value = normalize_json(raw)
            outcome: dict[str, Any] = {"outcome": "completed"}
            if value is not None:
                outcome["result"] = value
            json.dumps(outcome, allow_nan=False)
        except BaseException as exc:
            message = str(exc) or class_path(type(exc))
            if ran:
                message = (f"the return value of {job_type} cannot be stored as JSON "
                           f"(Django's normalize_json): {message}")
            failure = self._failure(exc, message, not ran)
            object.__setattr__(result, "finished_at", timezone.now())
            result.errors.append(TaskError(exception_class_path=failure["code"],
                                           traceback=failure["details"]["traceback"]))
            object.__setattr__(result, "status", TaskResultStatus.FAILED)
            _send(task_finished, sender, result)
            return failure, "failed", message
        object.__setattr__(result, "finished_at", timezone.now())
        object.__setattr__(result, "status", TaskResultStatus.SUCCESSFUL)
        object.__setattr__(result, "_return_value", value)
        _send(task_finished, sender, result)
        return outcome, "completed", ""

    def _failure(self, exc: BaseException, message: Optional[str], retryable: bool) -> dict:
        path = class_path(type(exc))
        return {"outcome": "failed", "code": path, "message": message or str(exc) or path,
                "retryable": retryable,
                "details": {"traceback": "".join(format_exception(exc)),
                            "worker_id": self.worker_id}}

    def _resolve(self, assignment: dict) -> tuple[Any, OJSBackend, list, dict]:
        job_type = assignment.get("type")
        if not isinstance(job_type, str):
            raise _Unknown(f"job type {job_type!r} is not an import path")
        try:
            task = import_string(job_type)
        except ImportError as exc:
            raise _Unknown(f"{job_type} is not a task of this project: {exc}")
        if not isinstance(task, Task):
            raise _Unknown(f"{job_type} is a {class_path(type(task))}, not a Django task (a "
                           "function decorated with @task)")
        if task.module_path != job_type:
            raise _Unknown(f"{job_type} is the task {task.module_path} under another name: a "
                           "job names a task by its own import path")
        try:
            backend = task.get_backend()
        except Exception as exc:
            raise _Unknown(f"the backend {task.backend!r} of the task {job_type} cannot be "
                           f"loaded: {exc}")
        if not isinstance(backend, OJSBackend):
            raise _Unknown(f"the task {job_type} runs on the task backend {task.backend!r} "
                           f"({class_path(type(backend))}), not an "
                           "ojs_adapter_django.tasks.OJSBackend")
        payload = assignment.get("args")
        if (not isinstance(payload, list) or len(payload) != 1 or not isinstance(payload[0], dict)
                or not isinstance(payload[0].get("args", []), list)
                or not isinstance(payload[0].get("kwargs", {}), dict)):
            # The shape only: a job's arguments are the application's data, never logged.
            raise _Refused(f"the args of a {job_type} job must be "
                           f'[{{"args": [...], "kwargs": {{...}}}}], got {_shape(payload)}')
        return task, backend, payload[0].get("args", []), payload[0].get("kwargs", {})

    def _result(self, task: Any, job: dict, job_id: str, args: list, kwargs: dict) -> Any:
        """The ``TaskResult`` of this attempt: the job id, RUNNING, the job's earlier failures
        as ``errors`` (class path and traceback, as this worker fails them) and one worker id
        per attempt (the earlier ones from those failures), so ``TaskContext.attempt`` counts
        the attempts as the OJS backend does."""
        earlier = [error for error in job.get("errors") or [] if isinstance(error, dict)]
        errors = []
        worker_ids = []
        for error in earlier:
            details = error.get("details") if isinstance(error.get("details"), dict) else {}
            errors.append(TaskError(exception_class_path=str(error.get("type") or ""),
                                    traceback=str(details.get("traceback") or
                                                  error.get("message") or "")))
            worker_ids.append(str(details.get("worker_id") or ""))
        worker_ids.append(self.worker_id or "")
        now = timezone.now()
        enqueued_at = job.get("enqueued_at")
        return TaskResult(
            task=task,
            id=job_id,
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

    def _forward_log(self) -> None:
        """The worker loop's records since the last call, on ``logger``."""
        native = getattr(self, "_native", None)
        if native is None:
            return
        for level, message, job_id in native.drain_log():
            if job_id:
                message = f"job {job_id}: {message}"
            logger.log(_LEVELS.get(level, logging.WARNING), "%s", message,
                       extra={"job_id": job_id})

    # -- signals -----------------------------------------------------------------------------

    def install_signal_handlers(self) -> Callable[[], None]:
        """SIGTERM/SIGINT: the first stops gracefully (the running tasks have the stop deadline
        to finish), the second gives the running jobs back at once. Returns what restores the previous handlers."""
        previous = {number: signal.getsignal(number) for number in (signal.SIGTERM, signal.SIGINT)}

        def handler(number: int, frame: Any) -> None:
            name = signal.Signals(number).name
            if self.stopping.is_set():
                logger.warning("%s received again: giving the running jobs back", name)
                self.give_back()
                return
            native = getattr(self, "_native", None)
            deadline = ("the stop deadline" if native is None
                        else f"{native.stop_deadline_ms} ms")
            logger.warning("%s received: no more fetches; the running tasks have %s to finish "
                           "(a second signal gives their jobs back)", name, deadline)
            self.stop()

        for number in previous:
            signal.signal(number, handler)

        def restore() -> None:
            for number, old in previous.items():
                signal.signal(number, old)

        return restore


def _timed_out(assignment: dict, started: float) -> bool:
    """Whether the job's ``timeout_ms`` (what was left of it when handed out) has passed: the
    loop then nacked it ``timeout``."""
    timeout_ms = assignment.get("timeout_ms")
    return isinstance(timeout_ms, int) and (time.monotonic() - started) * 1000 >= timeout_ms


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


def _send(sig: Any, sender: type, result: Any) -> None:
    """Sends ``task_started`` / ``task_finished``; a receiver's exception is logged, not raised
    (it must not stop the worker or leave the job unanswered)."""
    for receiver, response in sig.send_robust(sender, task_result=result):
        if isinstance(response, Exception):
            logger.error("a receiver of the task signal, %r, raised", receiver,
                         exc_info=response)


__all__ = ["Worker", "Job", "current_job", "OJSWorkerError", "INVALID_TASK_ARGS"]
