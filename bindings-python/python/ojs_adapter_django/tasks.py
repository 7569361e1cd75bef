"""A Django Tasks backend (DEP 0014) that stages every ``task.enqueue()`` in the outbox.

    TASKS = {
        "default": {
            "BACKEND": "ojs_adapter_django.tasks.OJSBackend",
            "QUEUES": ["default", "email"],
            "OPTIONS": {"DATABASE": "default"},
        }
    }

``task.enqueue(*args, **kwargs)`` is ``ojs.enqueue_after_commit`` on the alias ``DATABASE``:
the same core call, the same validation, the same savepoint and autocommit rules. The job is
committed with the caller's transaction or not at all, and relayed after the outermost commit.

``get_result(id)`` (and ``aget_result``, ``TaskResult.refresh()``) reads the job back: from the
OJS backend once the relay has sent it (its state mapped onto ``TaskResultStatus``), else from
its outbox row through Django's connection of ``DATABASE`` (so also inside the transaction that
staged it): READY, or FAILED for a row the relay gave up on.

One code path for Django 6 (``django.tasks``) and Django 5.2 with the ``django-tasks`` backport
(``django_tasks``, the same API): whichever the running Django has. docs/django-tasks.md has
the mapping (job type, args, options) and what is not supported, and why.
"""

from __future__ import annotations

import difflib
import uuid
from typing import Any, Optional

from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS
from django.utils import timezone
from django.utils.dateparse import parse_datetime
from django.utils.module_loading import import_string

try:  # Django >= 6.0
    from django.tasks import TaskResult, TaskResultStatus
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskError
    from django.tasks.exceptions import TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued
except ImportError:  # Django 5.2 with the django-tasks backport
    try:
        from django_tasks import TaskResult, TaskResultStatus
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import Task, TaskError
        from django_tasks.exceptions import TaskResultDoesNotExist
        from django_tasks.signals import task_enqueued
    except ImportError as exc:
        raise ImportError(
            "ojs_adapter_django.tasks needs Django's tasks framework: Django >= 6.0 "
            "(django.tasks), or on Django 5.2 the django-tasks package (pip install django-tasks)"
        ) from exc

from .facade import OJS
from .errors import InvalidJobTypeError
from .json import json_value

#: The keys of ``TASKS[alias]["OPTIONS"]``, with their defaults.
OPTION_DEFAULTS = {
    #: The database alias whose transaction the job is staged in (and whose outbox holds it).
    "DATABASE": DEFAULT_DB_ALIAS,
    #: The adapter that stages it: an ``OJS`` instance, or the import path of one.
    "ADAPTER": "ojs_adapter_django.ojs",
}


#: How the state of a job the OJS backend holds reads as a Django ``TaskResultStatus``
#: (docs/django-tasks.md, "Results"). The eight states of the OJS spec (ojs-core.md).
STATUS_OF_STATE = {
    "scheduled": TaskResultStatus.READY,    # waiting for its delay_until (run_after)
    "available": TaskResultStatus.READY,    # waiting for a worker
    "pending": TaskResultStatus.READY,      # enqueued, waiting to be activated (spec §9)
    "retryable": TaskResultStatus.READY,    # failed, to be run again: "ready to be executed again"
    "active": TaskResultStatus.RUNNING,     # a worker holds it
    "completed": TaskResultStatus.SUCCESSFUL,
    "discarded": TaskResultStatus.FAILED,   # failed for good (attempts used up, or not retryable)
    "cancelled": TaskResultStatus.FAILED,   # never ran to its end: "unable to start"
}

#: How the status of an outbox row (a job the relay has not sent, read through Django's
#: connection) reads: ``sent`` rows are read from the OJS backend.
STATUS_OF_ROW = {
    "pending": TaskResultStatus.READY,      # not yet sent (committed, or in your transaction)
    "failed": TaskResultStatus.READY,       # a send failed; the relay tries again
    "dead": TaskResultStatus.FAILED,        # the relay gave up: the task will never run
}


class JobNotDelivered(Exception):
    """The ``exception_class_path`` of the error of a task whose outbox row is ``dead``: the
    relay gave up sending the job to the OJS backend, so the task never ran."""


class JobCancelled(Exception):
    """The ``exception_class_path`` of the error of a task whose job the OJS backend cancelled
    (state ``cancelled``, e.g. a unique ``replace``) before it ran to its end."""


def _time(value: Any) -> Any:
    return parse_datetime(value) if isinstance(value, str) else None


def _arguments(payload: Any) -> tuple[list, dict]:
    """A task's ``(args, kwargs)`` from its job's args, ``[{"args": [...], "kwargs": {...}}]``
    (docs/django-tasks.md, "Arguments"); empty ones for any other shape."""
    arguments = payload[0] if (isinstance(payload, list) and len(payload) == 1
                               and isinstance(payload[0], dict)) else {}
    args, kwargs = arguments.get("args", []), arguments.get("kwargs", {})
    return (args if isinstance(args, list) else [], kwargs if isinstance(kwargs, dict) else {})


def _task_error(error: Any) -> TaskError:
    """A failure as the OJS backend recorded it (``ojs_worker``'s nack: ``type`` the exception's
    class path, ``details.traceback``): the class path, and the traceback (else the message)."""
    if not isinstance(error, dict):
        return TaskError(exception_class_path="", traceback=str(error))
    details = error.get("details") if isinstance(error.get("details"), dict) else {}
    return TaskError(exception_class_path=str(error.get("type") or error.get("code") or ""),
                     traceback=str(details.get("traceback") or error.get("message") or ""))


def _worker_id(error: Any) -> str:
    details = error.get("details") if isinstance(error, dict) else None
    return str(details.get("worker_id") or "") if isinstance(details, dict) else ""


class OJSBackend(BaseTaskBackend):
    """Stages each enqueued task as an OJS job in the current transaction of
    ``OPTIONS["DATABASE"]``. Job type: the task's import path (``Task.module_path``); args:
    ``[{"args": [...], "kwargs": {...}}]``; options: ``queue`` (``queue_name``), ``priority``,
    and ``delay_until`` (``run_after``)."""

    #: ``run_after`` becomes the job's ``delay_until``: the backend starts it no earlier.
    supports_defer = True
    #: ``priority`` (-100..100) is the job's OJS priority (-100..100), unchanged.
    supports_priority = True
    #: The job names the task; running it is ``Task.call``'s, which runs coroutine functions too.
    supports_async_task = True
    #: ``get_result``: the job as the OJS backend holds it, or its outbox row (read through
    #: Django's connection) before the relay sent it (docs/django-tasks.md, "Results").
    supports_get_result = True

    def __init__(self, alias: str, params: dict) -> None:
        super().__init__(alias, params)
        where = f'TASKS["{alias}"]["OPTIONS"]'
        if not isinstance(self.options, dict):
            raise ImproperlyConfigured(
                f"{where} must be a dict, got {type(self.options).__name__}")
        for key in self.options:
            if key not in OPTION_DEFAULTS:
                near = difflib.get_close_matches(str(key).upper(), OPTION_DEFAULTS, n=1)
                hint = f' (did you mean "{near[0]}"?)' if near else ""
                raise ImproperlyConfigured(
                    f'{where}["{key}"]: unknown option of ojs_adapter_django.tasks.OJSBackend'
                    f'{hint}; the options are {", ".join(OPTION_DEFAULTS)}')
        options = {**OPTION_DEFAULTS, **self.options}
        self.database: str = options["DATABASE"]
        from django.conf import settings

        if self.database not in settings.DATABASES:
            raise ImproperlyConfigured(
                f'{where}["DATABASE"]: {self.database!r} is not a database alias of DATABASES '
                f'({", ".join(map(repr, settings.DATABASES))})')
        adapter = options["ADAPTER"]
        if isinstance(adapter, str):
            try:
                adapter = import_string(adapter)
            except ImportError as exc:
                raise ImproperlyConfigured(f'{where}["ADAPTER"]: {exc}') from exc
        if not isinstance(adapter, OJS):
            raise ImproperlyConfigured(
                f'{where}["ADAPTER"] must be an ojs_adapter_django.OJS or the import path of '
                f"one, got {type(adapter).__name__}")
        self.adapter: OJS = adapter

    def check(self, **kwargs: Any) -> Any:
        """``manage.py check`` (the tasks framework's check of every backend): the adapter's
        configuration for ``DATABASE``, as the first enqueue would build it (e.g. a database
        whose relay URL cannot be derived), as ``ojs_adapter_django.tasks.E001``."""
        yield from super().check(**kwargs)
        try:
            self.adapter.check(self.database)
        except ImproperlyConfigured as exc:  # ConfigurationError is one too
            code = getattr(exc, "code", None)
            yield checks.Error(
                f'TASKS["{self.alias}"] (DATABASE {self.database!r}): '
                + (f"[{code}] {exc}" if code else str(exc)),
                id="ojs_adapter_django.tasks.E001")

    def enqueue(self, task: Any, args: Any, kwargs: Any) -> Any:
        """Stages the job in the current transaction of ``DATABASE`` (at once in autocommit)
        and returns its ``TaskResult`` (``id``: the job id, status READY). ``task_enqueued``
        is sent when the job is staged: inside ``atomic()`` the job is not committed yet."""
        self.validate_task(task)
        positional = json_value(list(args), "args")
        keywords = json_value(dict(kwargs), "kwargs")
        options: dict[str, Any] = {"queue": task.queue_name, "priority": task.priority}
        if task.run_after is not None:
            run_after = task.run_after
            if timezone.is_naive(run_after):  # USE_TZ = False: Django's local time
                run_after = timezone.make_aware(run_after)
            options["delay_until"] = run_after
        # Built before the job is staged: nothing after the INSERT can fail but the signal.
        result = TaskResult(
            task=task,
            id="",
            status=TaskResultStatus.READY,
            enqueued_at=None,
            started_at=None,
            last_attempted_at=None,
            finished_at=None,
            args=positional,
            kwargs=keywords,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        job_type = task.module_path
        try:
            job_id = self.adapter.enqueue_after_commit(
                job_type, [{"args": positional, "kwargs": keywords}], using=self.database,
                **options)
        except InvalidJobTypeError as exc:
            # The core's message (it names the field and the rule), then where the type came
            # from and what to change.
            raise InvalidJobTypeError(
                f"{exc.message} (the import path of the task {job_type} is its OJS job type: "
                f"name the module and function in lowercase snake_case, docs/django-tasks.md)",
                code=exc.code, field=exc.field, retryable=exc.retryable) from exc
        # TaskResult is frozen; Django's own backends set fields the same way.
        object.__setattr__(result, "id", job_id)
        object.__setattr__(result, "enqueued_at", timezone.now())
        task_enqueued.send(type(self), task_result=result)
        return result

    # -- results -----------------------------------------------------------------------------

    def get_result(self, result_id: str) -> Any:
        """The ``TaskResult`` of the job ``result_id``, read where the job is now:

        1. held by the OJS backend (``GET /ojs/v1/jobs/{id}``): its state per
           ``STATUS_OF_STATE``, with the result, the recorded errors, the times, one worker id
           per attempt; the task resolved from the job type. Asked first: once the relay has
           sent a job, only the backend knows how the task ran (a ``pending`` row may already
           be in flight);
        2. its outbox row, read through Django's connection of ``DATABASE``
           (``OJS.outbox_job``), so also a row the caller's open transaction staged:
           ``pending``/``failed`` READY, ``dead`` FAILED with a ``JobNotDelivered`` error, the
           task resolved from the row's type and the arguments from its args; ``sent`` (and
           the backend does not hold it): ``TaskResultDoesNotExist`` saying so;
        3. else ``TaskResultDoesNotExist`` (an unknown id, a job rolled back with its
           transaction or savepoint).

        BackendUnavailableError when the OJS backend does not answer."""
        try:
            job_id = str(uuid.UUID(str(result_id)))  # the core's form: lowercase, hyphenated
        except ValueError:
            raise TaskResultDoesNotExist(
                f"{result_id!r} is no job id (a job id is a UUID)") from None
        job = self._backend_job(job_id)
        if job is not None:
            return self._backend_result(job_id, job)
        row = self.adapter.outbox_job(job_id, using=self.database)
        if row is None:
            raise TaskResultDoesNotExist(
                f"no job {job_id}: neither the OJS backend nor the outbox of database "
                f"{self.database!r} holds it")
        if row["status"] == "sent":
            # Sent between the two reads; or sent, and the backend no longer holds it.
            job = self._backend_job(job_id)
            if job is not None:
                return self._backend_result(job_id, job)
            raise TaskResultDoesNotExist(
                f"job {job_id} was sent to the OJS backend, which no longer holds it")
        return self._outbox_result(job_id, row)

    def _backend_job(self, job_id: str) -> Optional[dict]:
        answer = self.adapter.worker({"op": "get", "job_id": job_id}, using=self.database)
        job = (answer or {}).get("job") if isinstance(answer, dict) else None
        return job if isinstance(job, dict) else None

    def _outbox_result(self, job_id: str, row: dict) -> Any:
        """A job the relay has not sent (``pending``, ``failed``) or gave up on (``dead``), as
        its outbox row holds it."""
        status = row["status"]
        if status not in STATUS_OF_ROW:
            raise ValueError(f"job {job_id}: its outbox row has the status {status!r}, none of "
                             f"{', '.join(STATUS_OF_ROW)} or sent")
        task = self._resolve(job_id, row["type"])
        args, kwargs = _arguments(row["args"])
        errors = []
        if status == "dead":
            errors.append(TaskError(
                exception_class_path=f"{JobNotDelivered.__module__}.{JobNotDelivered.__qualname__}",
                traceback=f"the relay gave up sending job {job_id} to the OJS backend after "
                          f"{row['attempts']} attempt(s); the task never ran: "
                          f"{row['error'] or 'no error recorded'} "
                          "(manage.py ojs_outbox dead list / replay)"))
        return TaskResult(
            task=task, id=job_id, status=STATUS_OF_ROW[status], enqueued_at=row["created_at"],
            started_at=None, finished_at=None, last_attempted_at=None, args=args, kwargs=kwargs,
            backend=task.backend, errors=errors, worker_ids=[])

    def _resolve(self, job_id: str, job_type: Any) -> Any:
        """The ``Task`` a job type names (its import path), as ``ojs_worker`` resolves it."""
        if not isinstance(job_type, str):
            raise TaskResultDoesNotExist(f"job {job_id} has no job type")
        try:
            task = import_string(job_type)
        except ImportError as exc:
            raise TaskResultDoesNotExist(
                f"job {job_id} is a {job_type} job, which names no task of this project: "
                f"{exc}") from exc
        if not isinstance(task, Task) or task.module_path != job_type:
            raise TaskResultDoesNotExist(
                f"job {job_id} is a {job_type} job, which is not a task (a function decorated "
                "with @task, named by its own import path)")
        return task

    def _backend_result(self, job_id: str, job: dict) -> Any:
        state = job.get("state")
        if state not in STATUS_OF_STATE:
            raise ValueError(f"job {job_id}: the OJS backend answered the state {state!r}, "
                             f"none of {', '.join(STATUS_OF_STATE)}")
        task = self._resolve(job_id, job.get("type"))
        args, kwargs = _arguments(job.get("args"))
        recorded = job.get("errors")
        if not isinstance(recorded, list):
            # A backend that keeps only the last error.
            recorded = [job["error"]] if isinstance(job.get("error"), dict) else []
        errors = [_task_error(error) for error in recorded]
        # One worker id per attempt, as Django counts attempts: each failed one (from its
        # error), then the one running or the one that completed the job (the backend keeps
        # its worker id while the job is active; after that "", unless it keeps it).
        worker_ids = [_worker_id(error) for error in recorded]
        if state in ("active", "completed"):
            worker_ids.append(str(job.get("worker_id") or ""))
        finished_at = None
        if state in ("completed", "discarded"):
            finished_at = _time(job.get("completed_at"))
        elif state == "cancelled":
            finished_at = _time(job.get("cancelled_at"))
            errors.append(TaskError(
                exception_class_path=f"{JobCancelled.__module__}.{JobCancelled.__qualname__}",
                traceback=f"the OJS backend cancelled job {job_id} before it ran to its end"))
        started_at = _time(job.get("started_at"))
        result = TaskResult(
            task=task, id=job_id, status=STATUS_OF_STATE[state],
            enqueued_at=_time(job.get("enqueued_at") or job.get("created_at")),
            started_at=started_at, finished_at=finished_at, last_attempted_at=started_at,
            args=args, kwargs=kwargs,
            backend=task.backend, errors=errors, worker_ids=worker_ids)
        if state == "completed":
            object.__setattr__(result, "_return_value", job.get("result"))
        return result


__all__ = ["OJSBackend", "OPTION_DEFAULTS", "STATUS_OF_STATE", "STATUS_OF_ROW", "JobNotDelivered",
           "JobCancelled"]
