"""Tasks that ``manage.py ojs_worker`` runs in the worker tests (test_worker.py). Each records
its run as a row of ``worker_runs`` on the database alias it is given, the side effect a test
observes."""

import os
import time

from django.db import connections, transaction

try:  # Django 6's framework, else the backport (Django 5.2)
    from django.tasks import task
except ImportError:
    from django_tasks import task

RUNS = "worker_runs"


def create_runs_table(using):
    with connections[using].cursor() as cursor:
        cursor.execute(f"DROP TABLE IF EXISTS {RUNS}")
        cursor.execute(f"CREATE TABLE {RUNS} (label VARCHAR(100), job_id VARCHAR(100), "
                       "attempt INTEGER, step VARCHAR(100), at DOUBLE PRECISION)")


def runs(using):
    with connections[using].cursor() as cursor:
        cursor.execute(f"SELECT label, job_id, attempt, step FROM {RUNS} ORDER BY label, attempt")
        return [tuple(row) for row in cursor.fetchall()]


def times(using):
    """``{(label, step): at}``: when each run of ``overlaps`` started and finished (epoch s)."""
    with connections[using].cursor() as cursor:
        cursor.execute(f"SELECT label, step, at FROM {RUNS} WHERE at IS NOT NULL")
        return {(label, step): at for label, step, at in cursor.fetchall()}


def _record(using, label, job_id=None, attempt=None, step="ran", at=None):
    with transaction.atomic(using=using), connections[using].cursor() as cursor:
        cursor.execute(f"INSERT INTO {RUNS} (label, job_id, attempt, step, at) "
                       "VALUES (%s, %s, %s, %s, %s)", [label, job_id, attempt, step, at])


@task(takes_context=True)
def record_run(context, using, label, *, value=None):
    """Writes its row; returns what it was given and its attempt."""
    _record(using, label, context.task_result.id, context.attempt)
    return {"label": label, "value": value, "attempt": context.attempt}


@task
def plain_run(using, label):
    """A task without context: returns a tuple, which Django normalises to a list."""
    _record(using, label)
    return (label, 1)


@task(takes_context=True)
def always_fails(context, using, label):
    _record(using, label, context.task_result.id, context.attempt)
    raise ValueError(f"boom {label} #{context.attempt}")


@task(takes_context=True)
def waits_for_file(context, using, label, path):
    """Writes a "started" row, then waits until ``path`` exists (a test creates it), then writes
    a "finished" row."""
    _record(using, label, context.task_result.id, context.attempt, "started")
    deadline = time.monotonic() + 120
    while not os.path.exists(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{path} never appeared")
        time.sleep(0.01)
    _record(using, label, context.task_result.id, context.attempt, "finished")
    return label


@task
def overlaps(using, label, other):
    """Records when it started, waits until the run labelled ``other`` has started too (so it
    can finish only while another task runs beside it), then records when it finished."""
    _record(using, label, step="started", at=time.time())
    deadline = time.monotonic() + 60
    while (other, "started") not in times(using):
        if time.monotonic() > deadline:
            raise TimeoutError(f"{other} never ran while {label} did")
        time.sleep(0.01)
    _record(using, label, step="finished", at=time.time())
    return label


@task
def records_trace(using, label):
    """Records the trace context ``ojs_worker`` gives the running task, and returns it."""
    from ojs_adapter_django.worker import current_job

    job = current_job()
    _record(using, label, job.id, None, job.traceparent or "none")
    # The OpenTelemetry context the worker made current: the job's (opentelemetry-api).
    from opentelemetry import trace

    span = trace.get_current_span().get_span_context()
    otel = f"{span.trace_id:032x}-{span.span_id:016x}" if span.is_valid else None
    return {"traceparent": job.traceparent, "tracestate": job.tracestate, "otel": otel}


def not_a_task(*args):
    """A plain function: a job naming it is refused."""
    return args


@task
def returns_a_set(using, label):
    """Runs, then returns what JSON cannot hold."""
    _record(using, label)
    return {label}


@task
def chains(using, label):
    """Enqueues another task in its own transaction: the worker's relay sends it."""
    with transaction.atomic(using=using):
        _record(using, label)
        return plain_run.enqueue(using, f"{label}-child").id


@task
async def async_double(n):
    """An ``async def`` task: Task.call runs it (async_to_sync)."""
    return n * 2


@task(takes_context=True)
def acks_itself(context):
    """Acks its own job before the worker does: the worker's ack is then refused (409)."""
    backend = context.task_result.task.get_backend()
    backend.adapter.worker({"op": "ack", "job_id": context.task_result.id,
                            "result": "acked by the task"}, using=backend.database)
    return "acked by the worker"


@task
def injects_fault(url, fault):
    """Makes the devserver at ``url`` answer the next requests with ``fault`` (the worker's
    ack of this very job among them)."""
    import json
    import urllib.request

    request = urllib.request.Request(url + "/_dev/faults", data=json.dumps(fault).encode(),
                                     method="POST", headers={"content-type": "application/json"})
    urllib.request.urlopen(request, timeout=10).read()
    return "after the fault"
