"""Keyed staging and encryption through the Django adapter (docs/django.md "Ordering keys",
"Unique jobs", "Encrypted args"): ``options.unique`` decided in the application's transaction
(``DuplicateJobError``, ``ignore`` returning the held id, a bulk with a rejected job staging
nothing), ``options.ordering_key`` staged and delivered, and ``OJS_CONFIG["encryption"]``: the
devserver stores the args as the encryption extension's envelope, and ``manage.py ojs_worker``
runs the task with the plaintext args (the core decodes them in the worker's fetch). Real
SQLite and PostgreSQL, a real devserver; no mocks."""

from __future__ import annotations

import base64
import json

import pytest
from django.db import transaction
from django.test import override_settings

from ojs_adapter_django import OJS, DuplicateJobError
from support import drop_table, outbox_rows, tasks_setting, worker_once
from testproject.worker_tasks import create_runs_table, record_run, runs

DB = pytest.mark.django_db(transaction=True, databases=["default", "pg", "my"])
TABLE = "py_keys"

REJECT = {"unique": {"keys": ["type", "args"], "on_conflict": "reject"}}
IGNORE = {"unique": {"keys": ["type", "args"], "args_keys": ["day"], "on_conflict": "ignore"}}

#: Two keys of the ring (32 bytes each, standard base64); k2 is the current one.
KEY_1 = base64.b64encode(bytes(range(32))).decode()
KEY_2 = base64.b64encode(bytes(range(32, 64))).decode()
ENCRYPTION = {"key_id": "k2", "keys": {"k1": KEY_1, "k2": KEY_2}}


def adapter(url: str, alias: str, **config) -> OJS:
    ojs = OJS({"ojs_url": url, "outbox": {"table_name": TABLE, "poll_interval": "PT0.2S"},
               **config})
    drop_table(alias, TABLE)
    ojs.create_outbox_table(alias)
    return ojs


@pytest.fixture
def ojs(alias, backend):
    ojs = adapter(backend.url, alias)
    yield ojs
    ojs.reset()


# -- unique ------------------------------------------------------------------------------------

@DB
def test_reject_raises_duplicate_naming_the_held_job_and_the_transaction_goes_on(alias, backend,
                                                                                 ojs):
    with transaction.atomic(using=alias):
        held = ojs.enqueue_after_commit("invoice.send", [{"invoice": 7}], using=alias, **REJECT)
        with pytest.raises(DuplicateJobError) as raised:
            ojs.enqueue_after_commit("invoice.send", [{"invoice": 7}], using=alias, **REJECT)
        assert raised.value.code == "DUPLICATE"
        assert raised.value.existing_job_id == held
        assert raised.value.field == "options.unique"
        # The transaction is still usable: the next job is staged and committed with it.
        after = ojs.enqueue_after_commit("invoice.audit", [7], using=alias)
        assert list(outbox_rows(alias, TABLE)) == [held, after]
    backend.wait_for([held, after])
    assert len(backend.jobs()) == 2
    # A held job of an earlier transaction rejects as well (the relay may not have sent it yet:
    # either it is held and the call raises, or it was sent and the new job is staged).
    with transaction.atomic(using=alias):
        try:
            again = ojs.enqueue_after_commit("invoice.send", [{"invoice": 7}], using=alias, **REJECT)
        except DuplicateJobError as error:
            assert error.existing_job_id == held
        else:
            assert again != held


@DB
def test_reject_in_autocommit_raises_too(alias, backend):
    ojs = OJS({"ojs_url": backend.url, "outbox": {"table_name": TABLE}}, auto_start=False)
    drop_table(alias, TABLE)
    ojs.create_outbox_table(alias)
    try:
        held = ojs.enqueue_after_commit("invoice.send", [1], using=alias, **REJECT)
        with pytest.raises(DuplicateJobError) as raised:
            ojs.enqueue_after_commit("invoice.send", [1], using=alias, **REJECT)
        assert raised.value.existing_job_id == held
        assert list(outbox_rows(alias, TABLE)) == [held]
    finally:
        ojs.reset()


@DB
def test_ignore_returns_the_held_job_id_and_stages_nothing(alias, backend):
    ojs = OJS({"ojs_url": backend.url, "outbox": {"table_name": TABLE}}, auto_start=False)
    drop_table(alias, TABLE)
    ojs.create_outbox_table(alias)
    try:
        with transaction.atomic(using=alias):
            held = ojs.enqueue_after_commit("report.build", [{"day": "2026-11-28", "n": 1}],
                                            using=alias, **IGNORE)
        with transaction.atomic(using=alias):
            again = ojs.enqueue_after_commit("report.build", [{"day": "2026-11-28", "n": 2}],
                                             using=alias, **IGNORE)
            # A bulk reports the held id in the ignored job's place.
            ids = ojs.enqueue_bulk([{"type": "report.other", "args": [1]},
                                    {"type": "report.build", "args": [{"day": "2026-11-28"}],
                                     "options": IGNORE}], using=alias)
        assert again == held
        assert ids[1] == held and ids[0] != held
        assert list(outbox_rows(alias, TABLE)) == [held, ids[0]]
        ojs.start_relay(alias)
        (job,) = backend.wait_for([held])
        assert job["args"] == [{"day": "2026-11-28", "n": 1}]
    finally:
        ojs.reset()


@DB
def test_a_bulk_with_a_rejected_job_stages_nothing_and_the_transaction_goes_on(alias, backend,
                                                                               ojs):
    with transaction.atomic(using=alias):
        held = ojs.enqueue_after_commit("invoice.send", [{"invoice": 8}], using=alias, **REJECT)
        with pytest.raises(DuplicateJobError) as raised:
            ojs.enqueue_bulk([
                {"type": "invoice.audit", "args": [8]},
                {"type": "invoice.send", "args": [{"invoice": 9}], "options": REJECT},
                {"type": "invoice.send", "args": [{"invoice": 8}], "options": REJECT},
            ], using=alias)
        assert raised.value.existing_job_id == held
        assert list(outbox_rows(alias, TABLE)) == [held]  # the whole bulk rolled back
        after = ojs.enqueue_after_commit("invoice.audit", [8], using=alias)
    backend.wait_for([held, after])
    assert sorted(job["id"] for job in backend.jobs()) == sorted([held, after])


# -- ordering_key ------------------------------------------------------------------------------

@DB
def test_a_job_with_an_ordering_key_is_staged_and_delivered_in_order(alias, backend, ojs):
    with transaction.atomic(using=alias):
        first = ojs.enqueue_after_commit("account.update", [1], using=alias,
                                         ordering_key="account-42", queue="accounts")
        ids = ojs.enqueue_bulk([{"type": "account.update", "args": [n],
                                 "options": {"ordering_key": "account-42"}} for n in (2, 3)],
                               using=alias)
        assert backend.jobs() == []
    jobs = backend.wait_for([first, *ids])
    assert [job["args"] for job in jobs] == [[1], [2], [3]]
    received = [job["id"] for job in backend.jobs()]
    assert received == [first, *ids]  # sent in staging order
    for job in jobs:
        assert "ordering_key" not in (job.get("options") or {}), job
        assert "ordering_key" not in job, job
    assert jobs[0]["options"]["queue"] == "accounts"


# -- encryption --------------------------------------------------------------------------------

def assert_envelope(job: dict, key_id: str) -> None:
    (envelope,) = job["args"]
    assert envelope["ojs_encoded"] is True and envelope["encoding"] == "binary/encrypted"
    assert isinstance(envelope["data"], str)
    assert job["meta"]["ojs.codec.encodings"] == ["binary/encrypted"]
    assert job["meta"]["ojs.codec.key_id"] == key_id


@DB
def test_encrypted_args_reach_the_devserver_as_ciphertext(alias, backend):
    ojs = adapter(backend.url, alias, encryption=ENCRYPTION)
    try:
        with transaction.atomic(using=alias):
            job_id = ojs.enqueue_after_commit("payment.capture",
                                              [{"card": "4111111111111111", "amount": 9999}],
                                              using=alias)
            bulk = ojs.enqueue_bulk([{"type": "payment.capture", "args": ["4111111111111111"]}],
                                    using=alias)
        jobs = backend.wait_for([job_id, *bulk])
        for job in jobs:
            assert_envelope(job, "k2")
        stored = json.dumps(backend.received())
        assert "4111111111111111" not in stored
    finally:
        ojs.reset()


def test_a_bad_encryption_key_is_a_configuration_error(alias):
    from ojs_adapter_django import InvalidConfigError

    ojs = OJS({"ojs_url": "http://127.0.0.1:9", "encryption": {"key_id": "k1",
                                                                "keys": {"k1": "too-short"}}},
              auto_start=False)
    with pytest.raises(InvalidConfigError) as raised:
        ojs.check(alias)
    assert raised.value.field.startswith("adapter.encryption.keys.k1")
    assert "too-short" not in str(raised.value)


@DB
def test_the_worker_runs_an_encrypted_task_with_its_plaintext_args(alias, backend):
    """``task.enqueue`` with encryption: the devserver holds only the envelope, and
    ``manage.py ojs_worker`` (its fetch decodes in the core) runs the task with the args."""
    ojs = adapter(backend.url, alias, encryption=ENCRYPTION)
    create_runs_table(alias)
    try:
        with override_settings(TASKS=tasks_setting(alias, ojs)):
            with transaction.atomic(using=alias):
                result = record_run.enqueue(alias, "secret-label", value={"pin": "0000"})
            (job,) = backend.wait_for([result.id])
            assert_envelope(job, "k2")
            assert "secret-label" not in json.dumps(job)
            assert "1 completed" in worker_once()
        assert runs(alias) == [("secret-label", result.id, 1, "ran")]
        done = backend.call("GET", f"/ojs/v1/jobs/{result.id}")["job"]
        assert done["state"] == "completed"
        assert done["result"] == {"label": "secret-label", "value": {"pin": "0000"},
                                  "attempt": 1}
    finally:
        ojs.reset()


@DB
def test_after_rotation_the_worker_still_opens_jobs_of_the_old_key(alias, backend):
    """Rotation: jobs sealed with k1 are still opened once k2 is current (k1 stays in the
    ring); new jobs are sealed with k2."""
    old = adapter(backend.url, alias, encryption={"key_id": "k1", "keys": {"k1": KEY_1}})
    create_runs_table(alias)
    try:
        with override_settings(TASKS=tasks_setting(alias, old)):
            before = record_run.enqueue(alias, "before")
            (job,) = backend.wait_for([before.id])
            assert_envelope(job, "k1")
    finally:
        old.reset()
    new = OJS({"ojs_url": backend.url, "outbox": {"table_name": TABLE}, "encryption": ENCRYPTION})
    try:
        with override_settings(TASKS=tasks_setting(alias, new)):
            after = record_run.enqueue(alias, "after")
            (job,) = backend.wait_for([after.id])
            assert_envelope(job, "k2")
            assert "2 completed" in worker_once("--count", "2")
        assert sorted(label for label, *_ in runs(alias)) == ["after", "before"]
    finally:
        new.reset()


@DB
def test_a_job_the_worker_cannot_decrypt_never_runs(alias, backend, caplog):
    """A job sealed with a key that is not in the worker's ring: the core nacks it
    ``decode_failed`` (not retried) in the fetch, the task never runs, and the WARNING reaches
    the worker's logger with the job id."""
    old = adapter(backend.url, alias, encryption={"key_id": "k1", "keys": {"k1": KEY_1}})
    create_runs_table(alias)
    try:
        with override_settings(TASKS=tasks_setting(alias, old)):
            sealed = record_run.enqueue(alias, "sealed")
            backend.wait_for([sealed.id])
    finally:
        old.reset()
    other = OJS({"ojs_url": backend.url, "outbox": {"table_name": TABLE},
                 "encryption": {"key_id": "k2", "keys": {"k2": KEY_2}}})
    try:
        with override_settings(TASKS=tasks_setting(alias, other)), \
                caplog.at_level("WARNING", logger="ojs_adapter_django.worker"):
            assert "0 completed, 0 failed, 0 refused, 0 given back, 0 unknown" in worker_once()
    finally:
        other.reset()
    job = backend.call("GET", f"/ojs/v1/jobs/{sealed.id}")["job"]
    assert (job["state"], job["error"]["type"]) == ("discarded", "decode_failed"), job
    assert runs(alias) == []
    assert any(sealed.id in r.getMessage() and "decode_failed" in r.getMessage()
               for r in caplog.records if r.name == "ojs_adapter_django.worker")


@DB
def test_get_result_of_an_encrypted_task_shows_its_arguments(alias, backend):
    """``get_result`` opens encrypted args with the key ring (the core's ``open_args`` for the
    outbox row, the core's worker ``get`` for the backend's job): the row the open transaction
    staged, then the job the backend holds."""
    ojs = adapter(backend.url, alias, encryption=ENCRYPTION)
    create_runs_table(alias)
    try:
        with override_settings(TASKS=tasks_setting(alias, ojs)):
            with transaction.atomic(using=alias):
                result = record_run.enqueue(alias, "secret-label", value={"pin": "0000"})
                staged = record_run.get_result(result.id)
                assert list(staged.args) == [alias, "secret-label"]
                assert staged.kwargs == {"value": {"pin": "0000"}}
            (job,) = backend.wait_for([result.id])
            assert "secret-label" not in json.dumps(job)
            held = record_run.get_result(result.id)
            assert list(held.args) == [alias, "secret-label"]
            assert held.kwargs == {"value": {"pin": "0000"}}
    finally:
        ojs.reset()
