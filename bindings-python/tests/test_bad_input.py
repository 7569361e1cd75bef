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
    InvalidJobError,
    OJSError,
    PayloadTooLargeError,
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
     "INVALID_JOB_TYPE", "type", InvalidJobError),
    ("type-segment-starting-with-hyphen", lambda o, a: o.enqueue_after_commit("email.-welcome", [1], using=a),
     "INVALID_JOB_TYPE", "type", InvalidJobError),
    ("type-empty", lambda o, a: o.enqueue_after_commit("", [1], using=a),
     "INVALID_JOB_TYPE", "type", InvalidJobError),
    ("type-not-a-string", lambda o, a: o.enqueue_after_commit(5, [1], using=a),
     "INVALID_JOB_TYPE", "type", InvalidJobError),
    ("args-missing", lambda o, a: o.enqueue_after_commit("email.welcome", using=a),
     "INVALID_ARGS", "args", InvalidJobError),
    ("args-not-an-array", lambda o, a: o.enqueue_after_commit("email.welcome", {"id": 1}, using=a),
     "INVALID_ARGS", "args", InvalidJobError),
    ("args-not-json", lambda o, a: o.enqueue_after_commit("email.welcome", [Unserializable()], using=a),
     "INVALID_ARGS", "args", InvalidJobError),
    ("args-circular", lambda o, a: o.enqueue_after_commit("email.welcome", _circular(), using=a),
     "INVALID_ARGS", "args", InvalidJobError),
    ("args-nan", lambda o, a: o.enqueue_after_commit("email.welcome", [float("nan")], using=a),
     "INVALID_ARGS", "args", InvalidJobError),
    ("queue-capitals", lambda o, a: o.enqueue_after_commit("email.welcome", [1], queue="Email", using=a),
     "INVALID_QUEUE", "options.queue", InvalidJobError),
    ("queue-empty", lambda o, a: o.enqueue_after_commit("email.welcome", [1], queue="", using=a),
     "INVALID_QUEUE", "options.queue", InvalidJobError),
    ("priority-out-of-range", lambda o, a: o.enqueue_after_commit("email.welcome", [1], priority=101, using=a),
     "INVALID_OPTIONS", "options.priority", InvalidJobError),
    ("unknown-option", lambda o, a: o.enqueue_after_commit("email.welcome", [1], colour="red", using=a),
     "INVALID_OPTIONS", "options.colour", InvalidJobError),
    ("timeout-negative", lambda o, a: o.enqueue_after_commit("email.welcome", [1], timeout_ms=-5, using=a),
     "INVALID_OPTIONS", "options.timeout_ms", InvalidJobError),
    ("delay-until-not-rfc3339", lambda o, a: o.enqueue_after_commit("email.welcome", [1], delay_until="tomorrow", using=a),
     "INVALID_OPTIONS", "options.delay_until", InvalidJobError),
    ("retry-coefficient-below-one", lambda o, a: o.enqueue_after_commit("email.welcome", [1], retry={"backoff_coefficient": 0.5}, using=a),
     "INVALID_OPTIONS", "options.retry.backoff_coefficient", InvalidJobError),
    ("option-not-json", lambda o, a: o.enqueue_after_commit("email.welcome", [1], tags={"a", "b"}, using=a),
     "INVALID_OPTIONS", "options", InvalidJobError),
    ("meta-not-an-object", lambda o, a: o.enqueue_after_commit("email.welcome", [1], meta="x", using=a),
     "INVALID_META", "meta", InvalidJobError),
    ("meta-tenant-not-a-string", lambda o, a: o.enqueue_after_commit("email.welcome", [1], meta={"tenant_id": 5}, using=a),
     "INVALID_META", "meta.tenant_id", InvalidJobError),
    ("meta-not-json", lambda o, a: o.enqueue_after_commit("email.welcome", [1], meta={"k": Unserializable()}, using=a),
     "INVALID_META", "meta", InvalidJobError),
    ("payload-over-1-mib", lambda o, a: o.enqueue_after_commit("email.welcome", ["x" * (1 << 20)], using=a),
     "PAYLOAD_TOO_LARGE", "args", PayloadTooLargeError),
    ("bulk-one-invalid-job", lambda o, a: o.enqueue_bulk([{"type": "ok.job", "args": [1]}, {"type": "Bad", "args": [2]}], using=a),
     "INVALID_JOB_TYPE", "type", InvalidJobError),
    ("bulk-unknown-job-key", lambda o, a: o.enqueue_bulk([{"type": "ok.job", "args": [1], "when": "now"}], using=a),
     "INVALID_ARGS", "when", InvalidJobError),
    ("bulk-job-not-a-dict", lambda o, a: o.enqueue_bulk([{"type": "ok.job", "args": [1]}, "ok.job"], using=a),
     "INVALID_ARGS", "job", InvalidJobError),
    ("bulk-args-not-json", lambda o, a: o.enqueue_bulk([{"type": "ok.job", "args": [1]}, {"type": "ok.job", "args": [Unserializable()]}], using=a),
     "INVALID_ARGS", "args", InvalidJobError),
    ("context-unknown-key", lambda o, a: _with_context(lambda: o.enqueue_after_commit("email.welcome", [1], using=a), user=1),
     "INVALID_META", "context", InvalidJobError),
    ("immediate-enqueue-bad-type", lambda o, a: o.enqueue("Bad Type", [1], using=a),
     "INVALID_JOB_TYPE", "type", InvalidJobError),
    ("immediate-enqueue-bad-queue", lambda o, a: o.enqueue("email.welcome", [1], queue="UPPER", using=a),
     "INVALID_QUEUE", "options.queue", InvalidJobError),
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


@pytest.mark.django_db(transaction=True, databases=["default", "pg"])
@pytest.mark.parametrize("name,call,code,field,cls", BAD_CALLS, ids=[c[0] for c in BAD_CALLS])
def test_bad_input_raises_its_code_and_stages_nothing(name, call, code, field, cls, alias, outbox, backend):
    before = outbox_count(alias, TABLE)
    with transaction.atomic(using=alias):
        with pytest.raises(cls) as raised:
            call(outbox, alias)
        error = raised.value
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


@pytest.mark.django_db(transaction=True, databases=["default", "pg"])
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


def test_every_core_code_has_a_class_keeping_the_code_and_retryable_flag():
    for code, retryable in _native.ERROR_CODES:
        cls = errors.CLASS_BY_CODE[code]
        error = errors.error(code, "message", "field")
        assert type(error) is cls and error.code == code and error.retryable is retryable
    assert type(errors.error("SOMETHING_NEW", "m")) is OJSError


@pytest.mark.django_db(transaction=True, databases=["default", "pg"])
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
    finally:
        ojs.reset()
    assert backend.received()["requests"] == {"single": 0, "batch": 0, "get": 0}
