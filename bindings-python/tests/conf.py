"""The suite handlers of the conformance cases' workers (conformance-tests/README.md, "Workers"),
as Django tasks: ``manage.py ojs_worker`` runs Django tasks only, so each handler is a task whose
import path is its job type (``conf.echo``, ``conf.fail``, ``conf.sleep``, ``conf.trace``), run
with the case's args as its positional args (test_conformance.py stages them that way)."""

import time

try:  # Django 6's framework, else the backport (Django 5.2)
    from django.tasks import task
except ImportError:
    from django_tasks import task

from ojs_adapter_django.worker import current_job


@task
def echo(*args):
    """Returns the job's args."""
    return {"echo": list(args)}


@task
def fail(message):
    """Raises Python's ordinary error with the message."""
    raise Exception(message)


@task
def sleep(ms):
    """Sleeps ``ms`` milliseconds (what the case asks of the handler), then says so."""
    time.sleep(ms / 1000)
    return {"slept": ms}


@task
def trace():
    """The W3C traceparent the worker gave this task (``current_job()``), None without one."""
    return {"traceparent": current_job().traceparent}
