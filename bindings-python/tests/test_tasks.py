"""The Django Tasks backend (``ojs_adapter_django.tasks.OJSBackend``, docs/django-tasks.md),
through ``task.enqueue()`` / ``aenqueue()`` on real Django (6.x: ``django.tasks``; 5.2: the
``django-tasks`` backport), SQLite and PostgreSQL, against a real ojs-devserver. Every test
observes the backend or the outbox table; delivery is waited for, never slept on."""

from __future__ import annotations

import asyncio
import datetime
import decimal
import uuid

import pytest
from asgiref.sync import async_to_sync, sync_to_async
from django.core.exceptions import ImproperlyConfigured
from django.db import connections, transaction
from django.test import override_settings
from django.utils import timezone
from django.utils.module_loading import import_string

from ojs_adapter_django import (
    OJS,
    InvalidArgsError,
    InvalidJobTypeError,
    InvalidQueueError,
    OutboxTableMissingError,
    PayloadTooLargeError,
    request_context,
)
from ojs_adapter_django.tasks import OJSBackend
from support import (
    TaskResultStatus,
    drop_table,
    outbox_count,
    outbox_rows,
    task,
    task_backends,
    task_enqueued,
)

DB = pytest.mark.django_db(transaction=True, databases=["default", "pg", "my"])
TABLE = "py_tasks"

#: What the tasks below ran with, when a test runs one as a worker would.
CALLS: list = []


@task
def send_welcome(user_id, *extra, **options):
    CALLS.append((user_id, extra, options))
    return user_id


@task(priority=-20)  # a queue of its own would fail here: the import-time backend has "default"
def build_report(report_id):
    return report_id


@task
def SendNewsletter(issue):  # noqa: N802 - its import path breaks the OJS job-type rule
    return issue


class Opaque:
    """A value no JSON encoder can hold."""


def task_setting(alias: str, adapter: OJS, **options) -> dict:
    """``TASKS`` with the OJS backend as "default" (every queue allowed: QUEUES empty)."""
    return {"default": {"BACKEND": "ojs_adapter_django.tasks.OJSBackend", "QUEUES": [],
                        "OPTIONS": {"DATABASE": alias, "ADAPTER": adapter, **options}}}


def own_adapter(backend, alias: str, table: str = TABLE) -> OJS:
    """An adapter with a fresh table of its own. Its poller leaves every row younger than an hour
    alone (``skip_recent``), so what the backend receives was sent by the after-commit wake-up."""
    adapter = OJS({"ojs_url": backend.url,
                   "outbox": {"table_name": table, "poll_interval": "PT30S"},
                   "relay": {"skip_recent": "PT1H"}})
    drop_table(alias, table)
    adapter.create_outbox_table(alias)
    return adapter


@pytest.fixture
def adapter(alias, backend):
    """The OJS backend on ``alias`` is the project's "default" task backend for one test."""
    adapter = own_adapter(backend, alias)
    with override_settings(TASKS=task_setting(alias, adapter)):
        yield adapter
    adapter.reset()


@pytest.fixture
def enqueued():
    """What ``task_enqueued`` was sent with during one test (``listen``): ``(sender, result,
    outbox rows, ids the backend held)``, the last two read when the signal came."""
    seen: list = []
    yield seen
    task_enqueued.disconnect(dispatch_uid="test_tasks")


def listen(seen: list, alias: str, backend) -> None:
    def receiver(sender, task_result, **kwargs):
        seen.append((sender, task_result, outbox_rows(alias, TABLE),
                     [job["id"] for job in backend.jobs()]))

    task_enqueued.connect(receiver, dispatch_uid="test_tasks", weak=False)


def stored(backend, result) -> dict:
    (job,) = backend.wait_for([result.id])
    return job


# -- what a task becomes ----------------------------------------------------------------------

@DB
def test_commit_delivers_the_task_as_an_ojs_job(alias, backend, adapter):
    run_after = timezone.now() + datetime.timedelta(hours=2)
    when = datetime.datetime(2026, 3, 1, 9, 0, tzinfo=datetime.timezone.utc)
    key = uuid.UUID("12345678-1234-5678-1234-567812345678")
    with transaction.atomic(using=alias):
        result = send_welcome.using(queue_name="email", priority=7, run_after=run_after).enqueue(
            42, "text with ünïcödé", when, decimal.Decimal("1.50"), key, plan="pro", tags=["a"])
        assert outbox_rows(alias, TABLE) == {result.id: "pending"}
    job = stored(backend, result)
    assert job["type"] == "test_tasks.send_welcome"
    args = [42, "text with ünïcödé", "2026-03-01T09:00:00Z", "1.50",
            "12345678-1234-5678-1234-567812345678"]
    assert job["args"] == [{"args": args, "kwargs": {"plan": "pro", "tags": ["a"]}}]
    assert job["options"]["queue"] == "email"
    assert job["options"]["priority"] == 7
    delay_until = datetime.datetime.fromisoformat(job["options"]["delay_until"].replace("Z", "+00:00"))
    assert abs(delay_until - run_after) < datetime.timedelta(milliseconds=1)
    # The result: the job id (the core's UUIDv7), READY, and the arguments as the job has them.
    assert uuid.UUID(result.id).version == 7
    assert result.status == TaskResultStatus.READY
    assert result.backend == "default"
    assert result.task.module_path == "test_tasks.send_welcome"
    assert result.args == args
    assert result.kwargs == {"plan": "pro", "tags": ["a"]}
    assert result.enqueued_at is not None and result.started_at is None
    assert not result.is_finished


@DB
def test_the_tasks_defaults_become_queue_and_priority(alias, backend, adapter):
    with transaction.atomic(using=alias):
        report = build_report.using(queue_name="reports").enqueue(3)
        welcome = send_welcome.enqueue(1)
    assert stored(backend, report)["options"] == {"queue": "reports", "priority": -20}
    assert stored(backend, welcome)["options"] == {"queue": "default", "priority": 0}


@DB
def test_a_worker_maps_the_job_type_back_to_the_task(alias, backend, adapter):
    """docs/django-tasks.md: the job type is the import path; ``import_string`` gives the Task."""
    CALLS.clear()
    result = send_welcome.enqueue(5, "x", plan="pro")
    job = stored(backend, result)
    found = import_string(job["type"])
    assert found.func is send_welcome.func
    (payload,) = job["args"]
    assert found.call(*payload["args"], **payload["kwargs"]) == 5
    assert CALLS == [(5, ("x",), {"plan": "pro"})]


@DB
def test_request_context_lands_in_the_jobs_meta(alias, backend, adapter):
    with request_context(request_id="import-42", tenant_id="acme"):
        result = send_welcome.enqueue(1)
    meta = stored(backend, result)["meta"]
    assert meta["ojs.context.request_id"] == "import-42"
    assert meta["tenant_id"] == "acme"


@DB
def test_naive_run_after_without_use_tz_is_local_time(alias, backend, adapter):
    with override_settings(USE_TZ=False, TIME_ZONE="Europe/Paris"):
        naive = datetime.datetime(2030, 1, 2, 10, 30)
        result = send_welcome.using(run_after=naive).enqueue(1)
    assert stored(backend, result)["options"]["delay_until"] == "2030-01-02T10:30:00+01:00"


# -- transactions -----------------------------------------------------------------------------

@DB
def test_rollback_sends_nothing_and_leaves_no_row(alias, backend, adapter):
    with pytest.raises(RuntimeError):
        with transaction.atomic(using=alias):
            dropped = [send_welcome.enqueue(1).id, send_welcome.enqueue(2).id]
            assert outbox_count(alias, TABLE) == 2
            raise RuntimeError("roll back")
    assert outbox_count(alias, TABLE) == 0
    with transaction.atomic(using=alias):
        kept = send_welcome.enqueue(3)
    stored(backend, kept)  # the relay has sent since the rollback: only what committed
    assert [job["id"] for job in backend.jobs()] == [kept.id]
    assert not set(dropped) & set(outbox_rows(alias, TABLE))


@DB
def test_rolled_back_savepoint_discards_its_task_and_the_outer_commit_sends_the_rest(
        alias, backend, adapter):
    with transaction.atomic(using=alias):
        a = send_welcome.enqueue(1)
        with pytest.raises(RuntimeError):
            with transaction.atomic(using=alias):
                b = send_welcome.enqueue(2)
                raise RuntimeError("roll back the savepoint")
        with transaction.atomic(using=alias):  # released: sent with the outer commit
            c = send_welcome.enqueue(3)
        assert backend.jobs() == []
    backend.wait_for([a.id, c.id])
    assert [job["id"] for job in backend.jobs()] == [a.id, c.id]
    assert set(outbox_rows(alias, TABLE)) == {a.id, c.id}
    assert b.id not in outbox_rows(alias, TABLE)


@DB
def test_enqueue_in_a_loop_goes_out_in_order(alias, backend, adapter):
    with transaction.atomic(using=alias):
        ids = [send_welcome.enqueue(n).id for n in range(25)]
    jobs = backend.wait_for(ids)
    assert [job["id"] for job in backend.jobs()] == ids
    assert [job["args"][0]["args"] for job in jobs] == [[n] for n in range(25)]


@DB
def test_autocommit_commits_the_task_alone_and_relays_it_at_once(alias, backend, adapter):
    assert connections[alias].get_autocommit()
    result = send_welcome.enqueue(1)
    # Committed by the INSERT: the core's own connection sees it.
    assert adapter.outbox_rows([result.id], using=alias)[result.id]["status"] in ("pending", "sent")
    stored(backend, result)  # the poller skips recent rows: the wake-up sent it


@DB
def test_the_database_option_names_the_transaction_the_task_joins(backend):
    """DATABASE = "pg": the job is staged in pg's transaction, whatever "default" does."""
    adapter = own_adapter(backend, "pg")
    other = own_adapter(backend, "default")
    try:
        with override_settings(TASKS=task_setting("pg", adapter)):
            # A transaction on "default" only: pg is in autocommit, the job commits at once and
            # survives default's rollback.
            with pytest.raises(RuntimeError):
                with transaction.atomic(using="default"):
                    survives = send_welcome.enqueue(1)
                    raise RuntimeError("roll back default")
            stored(backend, survives)
            # A transaction on pg: the job is part of it.
            with pytest.raises(RuntimeError):
                with transaction.atomic(using="pg"):
                    dropped = send_welcome.enqueue(2)
                    assert outbox_rows("pg", TABLE)[dropped.id] == "pending"
                    raise RuntimeError("roll back pg")
            with transaction.atomic(using="default"), transaction.atomic(using="pg"):
                kept = send_welcome.enqueue(3)
                assert backend.jobs()[1:] == []
            stored(backend, kept)
        assert set(outbox_rows("pg", TABLE)) == {survives.id, kept.id}
        assert outbox_count("default", TABLE) == 0
        assert [job["id"] for job in backend.jobs()] == [survives.id, kept.id]
    finally:
        adapter.reset()
        other.reset()


# -- the signal -------------------------------------------------------------------------------

@DB
def test_task_enqueued_is_sent_when_the_job_is_staged_not_committed(
        alias, backend, adapter, enqueued):
    listen(enqueued, alias, backend)
    with transaction.atomic(using=alias):
        result = send_welcome.enqueue(1)
        ((sender, signalled, rows, sent),) = enqueued
        assert sender is OJSBackend
        assert signalled.id == result.id and signalled.status == TaskResultStatus.READY
        assert rows == {result.id: "pending"}  # staged in the transaction...
        assert sent == []  # ...and not sent: the commit has not happened
    stored(backend, result)


# -- errors -----------------------------------------------------------------------------------

@DB
def test_invalid_input_is_the_bindings_typed_error_and_changes_nothing(
        alias, backend, adapter, enqueued):
    listen(enqueued, alias, backend)
    with transaction.atomic(using=alias):
        first = send_welcome.enqueue(1)
        with pytest.raises(InvalidQueueError) as bad_queue:
            send_welcome.using(queue_name="Email").enqueue(1)
        assert bad_queue.value.code == "INVALID_QUEUE"
        assert bad_queue.value.field == "options.queue"
        with pytest.raises(InvalidArgsError) as bad_arg:
            send_welcome.enqueue(1, Opaque())
        assert (bad_arg.value.code, bad_arg.value.field) == ("INVALID_ARGS", "args")
        assert bad_arg.value.message.startswith("args[1]: ")
        with pytest.raises(InvalidArgsError) as bad_kwarg:
            send_welcome.enqueue(1, tags={"a", "b"})
        assert bad_kwarg.value.field == "args"
        assert bad_kwarg.value.message.startswith("kwargs.tags: ")
        with pytest.raises(InvalidArgsError) as nan:
            send_welcome.enqueue(float("nan"))
        assert nan.value.message.startswith("args[0]: ")
        # The transaction is still usable (PostgreSQL too) and holds only the valid job.
        second = send_welcome.enqueue(2)
        assert outbox_rows(alias, TABLE) == {first.id: "pending", second.id: "pending"}
    backend.wait_for([first.id, second.id])
    assert [job["id"] for job in backend.jobs()] == [first.id, second.id]
    assert [result.id for _, result, _, _ in enqueued] == [first.id, second.id]


@DB
def test_an_import_path_that_is_no_job_type_is_a_clear_typed_error(alias, backend, adapter):
    with transaction.atomic(using=alias):
        with pytest.raises(InvalidJobTypeError) as error:
            SendNewsletter.enqueue(1)
        assert error.value.code == "INVALID_JOB_TYPE"
        assert error.value.field == "type"
        # The core's message (the field, the type, the rule), then where the type came from.
        assert error.value.message.startswith('type: "test_tasks.SendNewsletter" ')
        assert error.value.message.endswith(
            " (the import path of the task test_tasks.SendNewsletter is its OJS job type: name "
            "the module and function in lowercase snake_case, docs/django-tasks.md)")
        assert outbox_count(alias, TABLE) == 0


@DB
def test_the_cores_other_errors_reach_the_caller(alias, backend, adapter):
    with transaction.atomic(using=alias):
        with pytest.raises(PayloadTooLargeError) as too_large:
            send_welcome.enqueue("x" * (1024 * 1024))
        assert too_large.value.code == "PAYLOAD_TOO_LARGE"
        assert outbox_count(alias, TABLE) == 0
    drop_table(alias, TABLE)
    with pytest.raises(OutboxTableMissingError) as missing:
        send_welcome.enqueue(1)
    assert missing.value.code == "OUTBOX_TABLE_MISSING"


@DB
def test_a_manual_transaction_is_refused_before_anything_is_written(alias, backend, adapter):
    connection = connections[alias]
    connection.set_autocommit(False)
    try:
        with pytest.raises(transaction.TransactionManagementError):
            send_welcome.enqueue(1)
        assert outbox_count(alias, TABLE) == 0
    finally:
        connection.rollback()
        connection.set_autocommit(True)


@pytest.mark.parametrize("options, message", [
    ({"DATABSE": "pg"}, 'TASKS["tasks"]["OPTIONS"]["DATABSE"]: unknown option of '
                        'ojs_adapter_django.tasks.OJSBackend (did you mean "DATABASE"?); '
                        'the options are DATABASE, ADAPTER'),
    ({"database": "pg"}, 'TASKS["tasks"]["OPTIONS"]["database"]: unknown option of '
                         'ojs_adapter_django.tasks.OJSBackend (did you mean "DATABASE"?)'),
    ({"QUEUE": "x"}, 'TASKS["tasks"]["OPTIONS"]["QUEUE"]: unknown option'),
    ({"DATABASE": "nope"}, 'TASKS["tasks"]["OPTIONS"]["DATABASE"]: \'nope\' is not a database '
                           'alias of DATABASES'),
    ({"ADAPTER": "ojs_adapter_django.nothing_here"}, 'TASKS["tasks"]["OPTIONS"]["ADAPTER"]: '),
    ({"ADAPTER": "ojs_adapter_django.conf"}, 'TASKS["tasks"]["OPTIONS"]["ADAPTER"] must be an '
                                             'ojs_adapter_django.OJS or the import path of one, '
                                             'got module'),
])
def test_a_bad_option_is_improperly_configured_naming_it(options, message):
    setting = {"tasks": {"BACKEND": "ojs_adapter_django.tasks.OJSBackend", "OPTIONS": options}}
    with override_settings(TASKS=setting):
        with pytest.raises(ImproperlyConfigured) as error:
            task_backends["tasks"]
    assert str(error.value).startswith(message)


def test_the_backend_defaults_and_what_it_supports():
    setting = {"tasks": {"BACKEND": "ojs_adapter_django.tasks.OJSBackend"}}
    with override_settings(TASKS=setting):
        backend = task_backends["tasks"]
        from ojs_adapter_django import ojs

        assert backend.database == "default"
        assert backend.adapter is ojs
        assert backend.queues == {"default"}
        assert (backend.supports_defer, backend.supports_priority, backend.supports_async_task,
                backend.supports_get_result) == (True, True, True, True)
        # get_result itself: test_task_results.py.


def test_the_system_check_reports_the_adapters_configuration_for_the_database(backend):
    good = OJS({"ojs_url": backend.url})
    bad = OJS({"ojs_url": backend.url, "outbox": {"batch_sise": 10}})
    setting = {
        "good": {"BACKEND": "ojs_adapter_django.tasks.OJSBackend",
                 "OPTIONS": {"DATABASE": "pg", "ADAPTER": good}},
        "bad": {"BACKEND": "ojs_adapter_django.tasks.OJSBackend",
                "OPTIONS": {"DATABASE": "pg", "ADAPTER": bad}},
    }
    try:
        with override_settings(TASKS=setting):
            assert list(task_backends["good"].check()) == []
            (error,) = task_backends["bad"].check()
        assert error.id == "ojs_adapter_django.tasks.E001"
        assert error.msg.startswith('TASKS["bad"] (DATABASE \'pg\'): [INVALID_CONFIG] ')
        assert "adapter.outbox.batch_sise" in error.msg
    finally:
        good.reset()
        bad.reset()


# -- async ------------------------------------------------------------------------------------

@DB
def test_aenqueue_from_async_code_in_autocommit(alias, backend, adapter):
    async def view():
        try:
            return await send_welcome.aenqueue(9, plan="pro")
        finally:
            # The thread-sensitive executor's connection, as a request's end would close it.
            await sync_to_async(lambda: connections[alias].close(), thread_sensitive=True)()

    result = asyncio.run(view())
    job = stored(backend, result)
    assert job["args"] == [{"args": [9], "kwargs": {"plan": "pro"}}]


@DB
def test_aenqueue_joins_the_transaction_of_the_sync_code_that_awaits_it(alias, backend, adapter):
    """Sync code inside atomic() that runs async code (async_to_sync): aenqueue runs on that
    thread, on its connection, so the job commits or rolls back with the block."""
    async def stage(n):
        return await send_welcome.aenqueue(n)

    with pytest.raises(RuntimeError):
        with transaction.atomic(using=alias):
            dropped = async_to_sync(stage)(1)
            assert outbox_rows(alias, TABLE) == {dropped.id: "pending"}
            raise RuntimeError("roll back")
    with transaction.atomic(using=alias):
        kept = async_to_sync(stage)(2)
        assert outbox_rows(alias, TABLE) == {kept.id: "pending"}
        assert backend.jobs() == []
    stored(backend, kept)
    assert set(outbox_rows(alias, TABLE)) == {kept.id}
