"""Bad input: every invalid call raises the OJSError subclass of its core code, stages nothing,
sends nothing, and leaves the host transaction usable (on PostgreSQL too, where a failed
statement would abort it)."""

from __future__ import annotations

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.db import connections, transaction

from ojs_adapter_django import (
    OJS,
    ConfigurationError,
    InvalidArgsError,
    InvalidJobTypeError,
    InvalidMetaError,
    InvalidOptionsError,
    InvalidQueueError,
    OJSError,
    PayloadTooLargeError,
    ValidationError,
    errors,
    request_context,
)
from ojs_adapter_django import _native
from support import drop_table, outbox_count

TABLE = "py_bad_input"


class Unserializable:
    pass


def _circular() -> list:
    args: list = []
    args.append(args)
    return args


# (id, call, code, field, class): call(ojs, alias) makes the invalid call.
BAD_CALLS = [
    ("type-with-capitals", lambda o, a: o.enqueue_after_commit("Email.Welcome", [1], using=a),
     "INVALID_JOB_TYPE", "type", InvalidJobTypeError),
    ("type-segment-starting-with-hyphen", lambda o, a: o.enqueue_after_commit("email.-welcome", [1], using=a),
     "INVALID_JOB_TYPE", "type", InvalidJobTypeError),
    ("type-empty", lambda o, a: o.enqueue_after_commit("", [1], using=a),
     "INVALID_JOB_TYPE", "type", InvalidJobTypeError),
    ("type-not-a-string", lambda o, a: o.enqueue_after_commit(5, [1], using=a),
     "INVALID_JOB_TYPE", "type", InvalidJobTypeError),
    ("args-missing", lambda o, a: o.enqueue_after_commit("email.welcome", using=a),
     "INVALID_ARGS", "args", InvalidArgsError),
    ("args-not-an-array", lambda o, a: o.enqueue_after_commit("email.welcome", {"id": 1}, using=a),
     "INVALID_ARGS", "args", InvalidArgsError),
    ("args-not-json", lambda o, a: o.enqueue_after_commit("email.welcome", [Unserializable()], using=a),
     "INVALID_ARGS", "args", InvalidArgsError),
    ("args-circular", lambda o, a: o.enqueue_after_commit("email.welcome", _circular(), using=a),
     "INVALID_ARGS", "args", InvalidArgsError),
    ("args-nan", lambda o, a: o.enqueue_after_commit("email.welcome", [float("nan")], using=a),
     "INVALID_ARGS", "args", InvalidArgsError),
    ("queue-capitals", lambda o, a: o.enqueue_after_commit("email.welcome", [1], queue="Email", using=a),
     "INVALID_QUEUE", "options.queue", InvalidQueueError),
    ("queue-empty", lambda o, a: o.enqueue_after_commit("email.welcome", [1], queue="", using=a),
     "INVALID_QUEUE", "options.queue", InvalidQueueError),
    ("priority-out-of-range", lambda o, a: o.enqueue_after_commit("email.welcome", [1], priority=101, using=a),
     "INVALID_OPTIONS", "options.priority", InvalidOptionsError),
    ("unknown-option", lambda o, a: o.enqueue_after_commit("email.welcome", [1], colour="red", using=a),
     "INVALID_OPTIONS", "options.colour", InvalidOptionsError),
    ("timeout-negative", lambda o, a: o.enqueue_after_commit("email.welcome", [1], timeout_ms=-5, using=a),
     "INVALID_OPTIONS", "options.timeout_ms", InvalidOptionsError),
    ("delay-until-not-rfc3339", lambda o, a: o.enqueue_after_commit("email.welcome", [1], delay_until="tomorrow", using=a),
     "INVALID_OPTIONS", "options.delay_until", InvalidOptionsError),
    ("retry-coefficient-below-one", lambda o, a: o.enqueue_after_commit("email.welcome", [1], retry={"backoff_coefficient": 0.5}, using=a),
     "INVALID_OPTIONS", "options.retry.backoff_coefficient", InvalidOptionsError),
    ("option-not-json", lambda o, a: o.enqueue_after_commit("email.welcome", [1], tags={"a", "b"}, using=a),
     "INVALID_OPTIONS", "options", InvalidOptionsError),
    ("meta-not-an-object", lambda o, a: o.enqueue_after_commit("email.welcome", [1], meta="x", using=a),
     "INVALID_META", "meta", InvalidMetaError),
    ("meta-tenant-not-a-string", lambda o, a: o.enqueue_after_commit("email.welcome", [1], meta={"tenant_id": 5}, using=a),
     "INVALID_META", "meta.tenant_id", InvalidMetaError),
    ("meta-not-json", lambda o, a: o.enqueue_after_commit("email.welcome", [1], meta={"k": Unserializable()}, using=a),
     "INVALID_META", "meta", InvalidMetaError),
    ("payload-over-1-mib", lambda o, a: o.enqueue_after_commit("email.welcome", ["x" * (1 << 20)], using=a),
     "PAYLOAD_TOO_LARGE", "args", PayloadTooLargeError),
    ("bulk-one-invalid-job", lambda o, a: o.enqueue_bulk([{"type": "ok.job", "args": [1]}, {"type": "Bad", "args": [2]}], using=a),
     "INVALID_JOB_TYPE", "type", InvalidJobTypeError),
    ("bulk-unknown-job-key", lambda o, a: o.enqueue_bulk([{"type": "ok.job", "args": [1], "when": "now"}], using=a),
     "INVALID_ARGS", "when", InvalidArgsError),
    ("bulk-job-not-a-dict", lambda o, a: o.enqueue_bulk([{"type": "ok.job", "args": [1]}, "ok.job"], using=a),
     "INVALID_ARGS", "job", InvalidArgsError),
    ("bulk-args-not-json", lambda o, a: o.enqueue_bulk([{"type": "ok.job", "args": [1]}, {"type": "ok.job", "args": [Unserializable()]}], using=a),
     "INVALID_ARGS", "args", InvalidArgsError),
    ("context-unknown-key", lambda o, a: _with_context(lambda: o.enqueue_after_commit("email.welcome", [1], using=a), user=1),
     "INVALID_META", "context", InvalidMetaError),
    ("immediate-enqueue-bad-type", lambda o, a: o.enqueue("Bad Type", [1], using=a),
     "INVALID_JOB_TYPE", "type", InvalidJobTypeError),
    ("immediate-enqueue-bad-queue", lambda o, a: o.enqueue("email.welcome", [1], queue="UPPER", using=a),
     "INVALID_QUEUE", "options.queue", InvalidQueueError),
]


def _with_context(call, **fields):
    with request_context(**fields):
        return call()


@pytest.fixture
def outbox(alias, backend):
    ojs = OJS({"ojs_url": backend.url, "outbox": {"table_name": TABLE}})
    drop_table(alias, TABLE)
    ojs.create_outbox_table(alias)
    yield ojs
    ojs.reset()


@pytest.mark.django_db(transaction=True, databases=["default", "pg", "my"])
@pytest.mark.parametrize("name,call,code,field,cls", BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_bad_input_raises_its_code_and_stages_nothing(name, call, code, field, cls, alias, outbox, backend):
    before = outbox_count(alias, TABLE)
    with transaction.atomic(using=alias):
        with pytest.raises(cls) as raised:
            call(outbox, alias)
        error = raised.value
        assert type(error) is cls and isinstance(error, ValidationError)
        assert isinstance(error, OJSError)
        assert error.code == code, error
        assert error.field == field, error
        assert error.retryable is False
        assert str(error), "the core's message is the exception message"
        # The transaction is still usable: a valid job stages and the connection answers.
        job_id = outbox.enqueue_after_commit("email.welcome", [1], using=alias)
        assert outbox_count(alias, TABLE) == before + 1
    backend.wait_for([job_id])
    assert outbox_count(alias, TABLE) == before + 1
    assert [job["id"] for job in backend.jobs()] == [job_id], "nothing else reached the backend"


@pytest.mark.django_db(transaction=True, databases=["default", "pg", "my"])
def test_bad_input_in_autocommit_writes_nothing(alias, outbox, backend):
    for name, call, code, *_ in BAD_CALLS:
        with pytest.raises(OJSError) as raised:
            call(outbox, alias)
        assert raised.value.code == code, name
    assert outbox_count(alias, TABLE) == 0
    assert connections[alias].get_autocommit()
    assert backend.received()["requests"] == {"single": 0, "batch": 0, "get": 0}


def test_bad_config_is_improperly_configured_with_the_core_message():
    ojs = OJS({"ojs_url": "http://127.0.0.1:9", "outbox": {"batch_size": 0}})
    with pytest.raises(ImproperlyConfigured) as raised:
        ojs.check()
    error = raised.value
    assert isinstance(error, ConfigurationError) and isinstance(error, OJSError)
    assert error.code == "INVALID_CONFIG"
    assert error.field == "adapter.outbox.batch_size"
    assert "batch_size" in str(error)


@pytest.mark.parametrize("config,field", [
    ({"ojs_url": "ftp://x"}, "adapter.ojs_url"),
    ({"ojs_url": "http://x", "relay": {"mode": "sometimes"}}, "adapter.relay.mode"),
    ({"ojs_url": "http://x", "colour": 1}, "adapter.colour"),
    ({"ojs_url": "http://x", "outbox": {"table_name": "drop table;"}}, "adapter.outbox.table_name"),
])
def test_each_bad_setting_names_its_key(config, field):
    with pytest.raises(ConfigurationError) as raised:
        OJS(config).check()
    assert raised.value.code == "INVALID_CONFIG"
    assert raised.value.field == field


def test_bad_settings_fail_the_system_check(settings):
    from ojs_adapter_django.apps import check_config

    settings.OJS_CONFIG = {"ojs_url": "http://x", "outbox": {"poll_interval": "soon"}}
    messages = check_config()
    assert [m.id for m in messages] == ["ojs_adapter_django.E001"]
    assert "adapter.outbox.poll_interval" in messages[0].msg


#: docs/errors.md, the Python column: the class of each code and of each family.
DOCUMENTED_CLASSES = {
    "INVALID_JOB_TYPE": "InvalidJobTypeError",
    "INVALID_QUEUE": "InvalidQueueError",
    "INVALID_ARGS": "InvalidArgsError",
    "INVALID_OPTIONS": "InvalidOptionsError",
    "INVALID_META": "InvalidMetaError",
    "PAYLOAD_TOO_LARGE": "PayloadTooLargeError",
    "INVALID_CONFIG": "InvalidConfigError",
    "INVALID_DATABASE_URL": "InvalidDatabaseUrlError",
    "OUTBOX_TABLE_MISSING": "OutboxTableMissingError",
    "DATABASE": "DatabaseError",
    "BACKEND_UNAVAILABLE": "BackendUnavailableError",
    "BACKEND_REJECTED": "BackendRejectedError",
    "NO_TRANSACTION": "NoTransactionError",
    "RELAY_SHUT_DOWN": "RelayShutDownError",
    "DUPLICATE": "DuplicateJobError",
}
DOCUMENTED_FAMILIES = {
    "validation": "ValidationError",
    "configuration": "ConfigurationError",
    "database": "DatabaseError",
    "backend": "BackendError",
    "transaction": "NoTransactionError",
    "relay": "RelayShutDownError",
    "duplicate": "DuplicateJobError",
}


def test_every_core_code_decodes_to_its_documented_class_under_its_family():
    import json

    import ojs_adapter_django

    codes = json.loads(_native.codes_json())
    assert {entry["code"] for entry in codes} == set(DOCUMENTED_CLASSES), "docs/errors.md table"
    for entry in codes:
        code, family = entry["code"], entry["family"]
        cls = getattr(errors, DOCUMENTED_CLASSES[code])
        family_cls = getattr(errors, DOCUMENTED_FAMILIES[family])
        assert getattr(ojs_adapter_django, cls.__name__) is cls, "exported by the package"
        assert issubclass(cls, family_cls) and issubclass(family_cls, OJSError), code
        error = errors.decode(json.dumps({"code": code, "field": "f", "message": "m",
                                          "retryable": entry["retryable"], "family": family}))
        assert type(error) is cls, code
        assert (error.code, error.field, str(error), error.retryable) == (
            code, "f", "m", entry["retryable"])
    assert issubclass(errors.ConfigurationError, ImproperlyConfigured)
    # DUPLICATE carries the id of the job that holds the unique key.
    duplicate = errors.decode(json.dumps({
        "code": "DUPLICATE", "field": "options.unique", "message": "m", "retryable": False,
        "family": "duplicate", "existing_job_id": "0190a8e0-0000-7000-8000-000000000001"}))
    assert type(duplicate) is errors.DuplicateJobError
    assert duplicate.existing_job_id == "0190a8e0-0000-7000-8000-000000000001"
    # A code this version does not know yet: the class of its family, else OJSError.
    unknown = errors.decode('{"code": "NEW_ONE", "field": null, "message": "m", '
                            '"retryable": false, "family": "backend"}')
    assert type(unknown) is errors.BackendError and unknown.code == "NEW_ONE"
    assert type(errors.decode('{"code": "X", "message": "m", "family": "new"}')) is OJSError


@pytest.mark.parametrize("call,code,field,where", [
    (lambda o, a: o.enqueue_after_commit("email.welcome", [1, {"tags": {1, 2}}], using=a),
     "INVALID_ARGS", "args", "args[1].tags: cannot be converted to JSON"),
    (lambda o, a: o.enqueue_after_commit("email.welcome", [1], retry={"max_attempts": float("nan")}, using=a),
     "INVALID_OPTIONS", "options", "options.retry.max_attempts: cannot be converted to JSON"),
    (lambda o, a: o.enqueue_after_commit("email.welcome", [1], meta={"odd key": Unserializable()}, using=a),
     "INVALID_META", "meta", 'meta["odd key"]: cannot be converted to JSON'),
    (lambda o, a: o.enqueue_after_commit("email.welcome", _circular(), using=a),
     "INVALID_ARGS", "args", "args[0]: refers to an object that contains it"),
    (lambda o, a: o.enqueue_bulk([{"type": "ok.job", "args": [1]}, {"type": "ok.job", "args": [1, Unserializable()]}], using=a),
     "INVALID_ARGS", "args", "jobs[1].args[1]: cannot be converted to JSON"),
    (lambda o, a: o.enqueue_bulk([{"type": "ok.job", "args": [1]}, object()], using=a),
     "INVALID_ARGS", "job", "jobs[1]: cannot be converted to JSON"),
    (lambda o, a: o.enqueue_after_commit(object(), [1], using=a),
     "INVALID_JOB_TYPE", "type", "type: cannot be converted to JSON"),
], ids=["args-nested", "option-nested", "meta-odd-key", "args-cycle", "bulk-args", "bulk-job",
        "type-object"])
def test_a_value_json_cannot_hold_is_named_by_its_path_with_the_core_code(call, code, field, where):
    """Python finds where the value is; the core decides the code and field (``unencodable``)."""
    ojs = OJS({"ojs_url": "http://127.0.0.1:9", "outbox": {"table_name": TABLE}}, auto_start=False)
    with pytest.raises(OJSError) as raised:
        call(ojs, "default")
    error = raised.value
    assert (error.code, error.field) == (code, field), error
    assert type(error) is errors.CLASS_BY_CODE[code]
    assert str(error).startswith(where), error


@pytest.mark.django_db(transaction=True, databases=["default", "pg", "my"])
def test_staging_without_the_outbox_table_names_the_missing_table(alias, backend):
    """A failure of Django's cursor carries the core's code: a missing table is
    OUTBOX_TABLE_MISSING (not a bare DATABASE), and the error chains Django's exception."""
    ojs = OJS({"ojs_url": backend.url, "outbox": {"table_name": "py_no_such_outbox"}})
    drop_table(alias, "py_no_such_outbox")
    try:
        for call in (lambda: ojs.enqueue_after_commit("email.welcome", [1], using=alias),
                     lambda: ojs.enqueue_bulk([{"type": "email.welcome", "args": [1]}], using=alias)):
            with pytest.raises(errors.OutboxTableMissingError) as raised:
                with transaction.atomic(using=alias):
                    call()
            assert raised.value.code == "OUTBOX_TABLE_MISSING"
            assert "py_no_such_outbox" in str(raised.value)
            assert raised.value.__cause__ is not None
        # The operator commands name the table, the database and Django's way to create it.
        with pytest.raises(errors.OutboxTableMissingError) as raised:
            ojs.admin({"command": "status"}, using=alias)
        assert "py_no_such_outbox" in str(raised.value)
        assert "manage.py migrate ojs_adapter_django" in str(raised.value)
        if alias != "default":
            assert f"--database {alias}" in str(raised.value)
    finally:
        ojs.reset()
    assert backend.received()["requests"] == {"single": 0, "batch": 0, "get": 0}
