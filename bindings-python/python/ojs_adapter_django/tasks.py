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

One code path for Django 6 (``django.tasks``) and Django 5.2 with the ``django-tasks`` backport
(``django_tasks``, the same API): whichever the running Django has. docs/django-tasks.md has
the mapping (job type, args, options) and what is not supported, and why.
"""

from __future__ import annotations

import difflib
import json
from typing import Any

from django.core import checks
from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS
from django.utils import timezone
from django.utils.module_loading import import_string

try:  # Django >= 6.0
    from django.tasks import TaskResult, TaskResultStatus
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.signals import task_enqueued
except ImportError:  # Django 5.2 with the django-tasks backport
    try:
        from django_tasks import TaskResult, TaskResultStatus
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.signals import task_enqueued
    except ImportError as exc:
        raise ImportError(
            "ojs_adapter_django.tasks needs Django's tasks framework: Django >= 6.0 "
            "(django.tasks), or on Django 5.2 the django-tasks package (pip install django-tasks)"
        ) from exc

from .client import OJS, _UNENCODABLE, _dumps, _unencodable
from .errors import InvalidJobTypeError

#: The keys of ``TASKS[alias]["OPTIONS"]``, with their defaults.
OPTION_DEFAULTS = {
    #: The database alias whose transaction the job is staged in (and whose outbox holds it).
    "DATABASE": DEFAULT_DB_ALIAS,
    #: The adapter that stages it: an ``OJS`` instance, or the import path of one.
    "ADAPTER": "ojs_adapter_django.ojs",
}


def _json_value(value: Any, path: str) -> Any:
    """``value`` as the job will carry it (the binding's encoder: ``DjangoJSONEncoder``, so a
    datetime, Decimal or UUID becomes its string), decoded again, so that the TaskResult holds
    what a worker will get. A value JSON cannot hold is the core's ``INVALID_ARGS`` (field
    ``args``), its message starting with where it is (``args[1]``, ``kwargs.user``)."""
    try:
        text = _dumps(value)
    except _UNENCODABLE as exc:
        raise _unencodable("args", value, path, exc) from None
    return json.loads(text)


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
    #: Results live with the OJS backend's workers, not here: see docs/django-tasks.md.
    supports_get_result = False

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
        positional = _json_value(list(args), "args")
        keywords = _json_value(dict(kwargs), "kwargs")
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


__all__ = ["OJSBackend", "OPTION_DEFAULTS"]
