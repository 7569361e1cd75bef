"""The Django glue: migration, request context middleware (sync and async), autocommit,
``using=`` aliases, savepoints through nested atomic(), external relay mode, fork survival and
the management commands. Every test observes the backend (ojs-devserver) or the outbox table."""

from __future__ import annotations

import io
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connections, transaction
from django.test import AsyncClient, Client

from ojs_adapter_django import OJS, ojs
from support import WAIT, drop_table, outbox_count, outbox_rows, wait_until

TRACEPARENT = "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"
HEADERS = {
    "traceparent": TRACEPARENT,
    "tracestate": "congo=t61rcWkgMzE",
    "X-Request-ID": "req-42",
    "X-OJS-Tenant": "acme",
    "Accept-Language": "fr-CA,fr;q=0.9,en;q=0.5",
}
DB = pytest.mark.django_db(transaction=True, databases=["default", "pg", "my"])


def own_ojs(backend, alias, table, **config):
    """An adapter of its own for one test; the table is created fresh. Its poller leaves every
    row younger than an hour alone (``skip_recent``), so whatever the backend receives during
    the test was sent by the hot path: the after-commit wake-up of the process that staged it."""
    adapter = OJS({"ojs_url": backend.url, "outbox": {"table_name": table, "poll_interval": "PT30S"},
                   "relay": {"skip_recent": "PT1H", **config.pop("relay", {})}, **config})
    drop_table(alias, table)
    adapter.create_outbox_table(alias)
    return adapter


@DB
def test_migration_created_the_outbox_table_on_every_database():
    for alias in ("default", "pg", "my"):
        assert outbox_count(alias, "py_outbox") >= 0  # the query fails if the table is missing


def table_exists(alias: str, table: str) -> bool:
    return table in connections[alias].introspection.table_names()


@DB
def test_migrate_back_and_forth_is_idempotent(alias, backend, settings):
    """``migrate ojs_adapter_django`` creates the outbox with the core's DDL, ``zero`` drops it
    (the reverse step), and forth again creates it; the forward step run again over an existing
    table changes nothing and keeps its rows (the core's DDL is idempotent: on MariaDB every
    statement commits on its own, so a migration stopped half-way completes when run again)."""
    table = "py_migrated"
    ojs.reset()
    settings.OJS_CONFIG = {**settings.OJS_CONFIG, "outbox": {"table_name": table}}
    drop_table(alias, table)

    def migrate(*target):
        call_command("migrate", "ojs_adapter_django", *target, database=alias, verbosity=0)

    try:
        migrate("zero")
        assert not table_exists(alias, table)
        migrate("zero")  # nothing to reverse: a no-op
        migrate()
        assert table_exists(alias, table)
        with transaction.atomic(using=alias):
            job_id = ojs.enqueue_after_commit("migrated.job", [1], using=alias)
        backend.wait_for([job_id])
        ojs.reset()  # its relay stopped: the table is dropped below
        migrate()  # applied already: a no-op
        ojs.create_outbox_table(alias)  # the forward step itself, again over the table
        assert list(outbox_rows(alias, table)) == [job_id]
        migrate("zero")
        assert not table_exists(alias, table)
        migrate()
        assert table_exists(alias, table) and outbox_count(alias, table) == 0
    finally:
        migrate()  # whatever happened, the migration is left applied for the next tests
        ojs.reset()
        drop_table(alias, table)


@DB
def test_a_committed_job_is_delivered_after_the_commit_and_a_rollback_leaves_no_row(alias, backend):
    """``enqueue_after_commit`` inside ``transaction.atomic()``: the row is the transaction's
    (the relay's own connection sees nothing before COMMIT, nothing is sent), the commit
    delivers it; a rolled-back transaction leaves no row and sends nothing."""
    adapter = own_ojs(backend, alias, "py_commit_rollback")
    try:
        with transaction.atomic(using=alias):
            kept = adapter.enqueue_after_commit("job.kept", [1], using=alias)
            assert outbox_rows(alias, "py_commit_rollback") == {kept: "pending"}
            assert adapter.outbox_rows([kept], using=alias) == {}
            assert backend.jobs() == [], "nothing is sent before the commit"
        backend.wait_for([kept])
        with pytest.raises(RuntimeError):
            with transaction.atomic(using=alias):
                dropped = adapter.enqueue_after_commit("job.dropped", [2], using=alias)
                raise RuntimeError("roll back")
        sentinel = adapter.enqueue_after_commit("job.sentinel", [3], using=alias)
        backend.wait_for([sentinel])
        assert backend.job(dropped) is None
        assert set(outbox_rows(alias, "py_commit_rollback")) == {kept, sentinel}
        assert adapter.outbox_rows([dropped], using=alias) == {}
    finally:
        adapter.reset()
        drop_table(alias, "py_commit_rollback")


@DB
def test_middleware_puts_request_context_in_job_meta(backend):
    user = User.objects.create_user("ada", password="pw")
    client = Client()
    client.force_login(user)
    response = client.get("/signup?n=7", headers=HEADERS)
    assert response.status_code == 201
    job_id = response.json()["job_id"]
    (job,) = backend.wait_for([job_id])
    assert job["args"] == ["7"]
    assert job["meta"]["ojs.context.request_id"] == "req-42"
    assert job["meta"]["traceparent"] == TRACEPARENT
    assert job["meta"]["tracestate"] == "congo=t61rcWkgMzE"
    assert job["meta"]["ojs.context.user_id"] == str(user.pk)
    # The client's X-OJS-Tenant is no tenant unless the app trusts it (test_tenant.py).
    assert "tenant_id" not in job["meta"]
    assert job["meta"]["ojs.context.locale"] == "fr-CA"


@DB
def test_middleware_without_headers_or_user_adds_nothing(backend):
    response = Client().get("/signup")
    (job,) = backend.wait_for([response.json()["job_id"]])
    meta = job.get("meta") or {}
    for key in ("ojs.context.request_id", "traceparent", "ojs.context.user_id", "tenant_id",
                "ojs.context.locale"):
        assert key not in meta


@DB
def test_middleware_works_in_an_async_stack(backend):
    import asyncio

    async def request():
        return await AsyncClient().get("/signup-async?n=3", headers=HEADERS)

    response = asyncio.run(request())
    assert response.status_code == 201
    (job,) = backend.wait_for([response.json()["job_id"]])
    assert job["meta"]["ojs.context.request_id"] == "req-42"
    assert "tenant_id" not in job["meta"]
    assert job["meta"]["ojs.context.locale"] == "fr-CA"


@DB
def test_context_does_not_leak_out_of_the_request(backend):
    Client().get("/signup", headers=HEADERS)
    from ojs_adapter_django import get_request_context

    assert get_request_context() is None


@DB
def test_autocommit_writes_and_wakes_the_relay_at_once(alias, backend):
    adapter = own_ojs(backend, alias, "py_autocommit")
    try:
        assert connections[alias].get_autocommit()
        job_id = adapter.enqueue_after_commit("email.welcome", [1], using=alias)
        # Committed by the INSERT itself: another connection (the core's) sees it at once.
        assert adapter.outbox_rows([job_id], using=alias)[job_id]["status"] in ("pending", "sent")
        # The poller leaves the row alone (own_ojs): only the immediate wake-up delivers it.
        backend.wait_for([job_id])
    finally:
        adapter.reset()


@DB
def test_using_writes_in_that_database_and_its_relay_reads_it(backend):
    adapter = own_ojs(backend, "pg", "py_using")
    drop_table("default", "py_using")
    adapter.create_outbox_table("default")
    try:
        with transaction.atomic(using="pg"):
            job_id = adapter.enqueue_after_commit("email.welcome", [1], using="pg")
            assert outbox_rows("pg", "py_using") == {job_id: "pending"}
            assert outbox_count("default", "py_using") == 0
        backend.wait_for([job_id])
        wait_until(lambda: adapter.outbox_rows([job_id], using="pg")[job_id]["status"] == "sent")
        assert outbox_count("default", "py_using") == 0
    finally:
        adapter.reset()


@DB
def test_other_alias_transaction_does_not_carry_the_job(backend):
    """A job staged on ``pg`` commits with pg's transaction, not with default's."""
    adapter = own_ojs(backend, "pg", "py_using2")
    try:
        with transaction.atomic(using="default"):
            with transaction.atomic(using="pg"):
                kept = adapter.enqueue_after_commit("email.kept", [1], using="pg")
            transaction.set_rollback(True, using="default")
        backend.wait_for([kept])
        with transaction.atomic(using="pg"):
            dropped = adapter.enqueue_after_commit("email.dropped", [2], using="pg")
            transaction.set_rollback(True, using="pg")
        sentinel = adapter.enqueue_after_commit("email.sentinel", [3], using="pg")
        backend.wait_for([sentinel])
        assert backend.job(dropped) is None
        assert dropped not in outbox_rows("pg", "py_using2")
    finally:
        adapter.reset()


@DB
def test_savepoints_follow_django_nested_atomic(alias, backend):
    adapter = own_ojs(backend, alias, "py_savepoints")
    try:
        with transaction.atomic(using=alias):
            outer = adapter.enqueue_after_commit("job.outer", [1], using=alias)
            try:
                with transaction.atomic(using=alias):
                    inner = adapter.enqueue_after_commit("job.inner", [2], using=alias)
                    raise RuntimeError("roll the savepoint back")
            except RuntimeError:
                pass
            with transaction.atomic(using=alias):
                released = adapter.enqueue_after_commit("job.released", [3], using=alias)
            # A released savepoint commits nothing: the relay's own connection cannot see the
            # rows, so nothing can be sent before the outermost commit.
            assert adapter.outbox_rows([outer, released], using=alias) == {}
            assert backend.jobs() == [], "a released savepoint relays nothing"
        jobs = backend.wait_for([outer, released])
        assert [job["type"] for job in jobs] == ["job.outer", "job.released"]
        assert backend.job(inner) is None
        assert inner not in outbox_rows(alias, "py_savepoints")
    finally:
        adapter.reset()


@DB
def test_jobs_of_one_level_share_one_commit_callback_and_keep_the_savepoint_rules(alias, backend):
    """Jobs staged one after another at one savepoint level join one on_commit callback (one per
    job was the largest per-call cost); a savepoint, or an app callback in between, starts a new
    one, so Django still runs or drops each job's wake-up exactly as it would its own. The poll
    interval is 30 s: only the wake-ups explain the deliveries."""
    adapter = own_ojs(backend, alias, "py_wake_merge")
    connection = connections[alias]
    app_callbacks = []
    try:
        with transaction.atomic(using=alias):
            first = [adapter.enqueue_after_commit("job.first", [i], using=alias) for i in range(3)]
            assert len(connection.run_on_commit) == 1
            try:
                with transaction.atomic(using=alias):
                    dropped = [adapter.enqueue_after_commit("job.dropped", [i], using=alias)
                               for i in range(2)]
                    assert len(connection.run_on_commit) == 2
                    raise RuntimeError("roll the savepoint back")
            except RuntimeError:
                pass
            after = adapter.enqueue_after_commit("job.after", [1], using=alias)
            assert len(connection.run_on_commit) == 1, "joined the outer level's callback"
            transaction.on_commit(lambda: app_callbacks.append("app"), using=alias)
            last = adapter.enqueue_after_commit("job.last", [1], using=alias)
            assert len(connection.run_on_commit) == 3
        jobs = backend.wait_for(first + [after, last])
        assert [job["type"] for job in jobs] == ["job.first"] * 3 + ["job.after", "job.last"]
        assert app_callbacks == ["app"]
        assert all(backend.job(job_id) is None for job_id in dropped)
        assert set(outbox_rows(alias, "py_wake_merge")) == set(first + [after, last])
    finally:
        adapter.reset()


#: A trigger refusing every row of type boom.job, so that a bulk fails part-way.
BOOM = {
    "sqlite": ["CREATE TRIGGER {t}_boom BEFORE INSERT ON {t} WHEN NEW.job_type = 'boom.job' "
               "BEGIN SELECT RAISE(ABORT, 'boom'); END"],
    "postgresql": ["CREATE OR REPLACE FUNCTION {t}_boom() RETURNS trigger LANGUAGE plpgsql AS "
                   "$$ BEGIN IF NEW.job_type = 'boom.job' THEN RAISE EXCEPTION 'boom'; END IF; "
                   "RETURN NEW; END $$",
                   "CREATE TRIGGER {t}_boom BEFORE INSERT ON {t} FOR EACH ROW "
                   "EXECUTE FUNCTION {t}_boom()"],
    "mysql": ["CREATE TRIGGER {t}_boom BEFORE INSERT ON {t} FOR EACH ROW "
              "BEGIN IF NEW.job_type = 'boom.job' THEN "
              "SIGNAL SQLSTATE '45000' SET MESSAGE_TEXT = 'boom'; END IF; END"],
}


@DB
def test_a_bulk_runs_in_a_savepoint_exactly_when_the_core_says_so(alias, backend):
    """The savepoint decision is the core's (``needs_savepoint``): a bulk of one INSERT runs
    none; one larger than an INSERT (5,000 rows) runs in a savepoint of its own, so a failure of
    its second INSERT leaves nothing of the first, and the transaction stays usable (on
    PostgreSQL too). Observed through Django's execute wrappers, which also get the ``%s``
    statements Django documents; with query logging on, a bulk stages the same."""
    from ojs_adapter_django.errors import DatabaseError

    table = "py_bulk_savepoint"
    adapter = own_ojs(backend, alias, table)
    connection = connections[alias]
    seen = []

    def record(execute, sql, params, many, context):
        seen.append(sql)
        return execute(sql, params, many, context)

    def savepoints():
        return [sql for sql in seen if sql.lstrip().upper().startswith("SAVEPOINT")]

    try:
        with connection.cursor() as cursor:
            for sql in BOOM[connection.vendor]:
                cursor.execute(sql.format(t=table))
        with transaction.atomic(using=alias):
            with connection.execute_wrapper(record):
                small = adapter.enqueue_bulk([{"type": "bulk.small", "args": [i]} for i in range(3)],
                                             using=alias)
            assert savepoints() == [] and any("%s" in sql for sql in seen), seen
            jobs = [{"type": "bulk.big", "args": [i]} for i in range(5000)]
            with connection.execute_wrapper(record), pytest.raises(DatabaseError) as raised:
                adapter.enqueue_bulk(jobs + [{"type": "boom.job", "args": [0]}], using=alias)
            assert raised.value.code == "DATABASE" and "boom" in str(raised.value)
            assert len(savepoints()) == 1, "one savepoint around the bulk's two INSERTs"
            assert outbox_count(alias, table) == 3, "nothing of the failed bulk stays"
            connection.force_debug_cursor = True
            try:
                logged = adapter.enqueue_bulk([{"type": "bulk.logged", "args": [1]}], using=alias)
            finally:
                connection.force_debug_cursor = False
            assert any(table in query["sql"] for query in connection.queries)
        backend.wait_for(small + logged)
        assert outbox_count(alias, table) == 4
    finally:
        adapter.reset()
        drop_table(alias, table)
        if connection.vendor == "postgresql":
            with connection.cursor() as cursor:
                cursor.execute(f"DROP FUNCTION IF EXISTS {table}_boom()")


MANAGE = str(Path(__file__).with_name("manage.py"))
#: SIGTERM's bit in the SigCgt mask of /proc/<pid>/status: set once the process handles it.
SIGTERM_CAUGHT = 1 << (signal.SIGTERM - 1)
READY = "ojs_relay: relaying"


def ojs_relay(backend, table="py_outbox", **popen):
    """A real ``manage.py ojs_relay`` process relaying ``table`` of the SQLite database."""
    env = {**os.environ, "OJS_TEST_OJS_URL": backend.url, "OJS_TEST_OUTBOX_TABLE": table}
    return subprocess.Popen([sys.executable, MANAGE, "ojs_relay"], env=env,
                            stdin=subprocess.DEVNULL, **popen)


def handles_sigterm(pid):
    with open(f"/proc/{pid}/status") as status:
        caught = next(line for line in status if line.startswith("SigCgt:")).split()[1]
    return bool(int(caught, 16) & SIGTERM_CAUGHT)


def read_until(fd, done, process):
    """Reads ``fd`` until ``done(text)`` or EOF; kills ``process`` if that takes over WAIT."""
    import select

    data = b""
    deadline = time.monotonic() + WAIT
    while not done(data.decode(errors="replace")):
        left = deadline - time.monotonic()
        if left <= 0 or not select.select([fd], [], [], left)[0]:
            process.kill()
            raise AssertionError(f"ojs_relay: no more output within {WAIT}s: {data[-2000:]!r}")
        chunk = os.read(fd, 65536)
        if not chunk:
            break
        data += chunk
    return data.decode(errors="replace")


@DB
def test_external_mode_starts_no_relay_and_ojs_relay_command_delivers(backend):
    adapter = own_ojs(backend, "default", "py_external", relay={"mode": "external"})
    try:
        ids = [adapter.enqueue_after_commit("email.welcome", [i]) for i in range(3)]
        assert adapter.metrics() is None, "no relay runs in this process"
        # No relay runs anywhere yet, and only the command's will read this table.
        assert {adapter.outbox_rows(ids)[job_id]["status"] for job_id in ids} == {"pending"}
        assert all(backend.job(job_id) is None for job_id in ids)
        relay = ojs_relay(backend, "py_external", stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True)
        try:
            backend.wait_for(ids)
        finally:
            relay.send_signal(signal.SIGTERM)
            output, _ = relay.communicate(timeout=WAIT)
        assert relay.returncode == 0, output
        assert "ojs_relay: relaying py_external" in output
        assert "ojs_relay: stopped" in output
        # A graceful stop: the relay's settlements are committed before it exits.
        assert {r["status"] for r in adapter.outbox_rows(ids).values()} == {"sent"}
    finally:
        adapter.reset()


@DB
def test_ojs_relay_exits_0_on_sigterm_during_start_up(backend, tmp_path):
    """SIGTERM once the command has armed its handlers but before its ready line is out: its
    stdout is a pipe we filled, so the ready line cannot be written until we read, which we do
    only after the signal. (Earlier, during Python's and Django's own start-up before the
    command's code runs, SIGTERM keeps its default effect: that window is not the adapter's.)"""
    read, write = os.pipe()
    os.set_blocking(write, False)
    filler = 0
    for size in (65536, 1):  # then byte by byte: no room is left for the ready line
        try:
            while True:
                filler += os.write(write, b"." * size)
        except BlockingIOError:
            pass
    os.set_blocking(write, True)
    with open(tmp_path / "stderr", "w+") as stderr:
        relay = ojs_relay(backend, stdout=write, stderr=stderr)
        os.close(write)
        try:
            wait_until(lambda: relay.poll() is not None or handles_sigterm(relay.pid),
                       what="ojs_relay to arm its signal handlers")
            relay.send_signal(signal.SIGTERM)
            output = read_until(read, lambda text: False, relay)
        finally:
            os.close(read)
            relay.wait(timeout=WAIT)
        stderr.seek(0)
        errors = stderr.read()
    assert relay.returncode == 0, (output[filler:], errors)
    assert output[:filler] == "." * filler
    assert output[filler:].startswith(READY), output[filler:]
    assert "ojs_relay: stopped" in output[filler:]


@DB
def test_ojs_relay_exits_0_on_sigterm_right_after_the_ready_line(backend):
    relay = ojs_relay(backend, stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
    try:
        output = read_until(relay.stdout.fileno(), lambda text: "\n" in text, relay)
        assert output.startswith(READY), output
        relay.send_signal(signal.SIGTERM)
        rest, _ = relay.communicate(timeout=WAIT)
    finally:
        if relay.poll() is None:
            relay.kill()
            relay.wait()
    output += rest.decode(errors="replace")
    assert relay.returncode == 0, output
    assert "ojs_relay: stopped" in output


@DB
def test_operator_commands_need_no_backend_url_and_the_relay_does(backend):
    """A deploy's `ojs_outbox status` / `dead ...` never talk to the backend, so they run in
    production (DEBUG off) without OJS_CONFIG["ojs_url"]; the relay, which sends, still
    refuses to start without it, naming the setting (issue 25, as for Rails' rake tasks)."""
    env = {**os.environ, "OJS_TEST_NO_OJS_URL": "1"}
    env.pop("OJS_TEST_OJS_URL", None)
    for command in (["ojs_outbox", "status", "--json"], ["ojs_outbox", "dead", "list"],
                    ["ojs_outbox", "dead", "replay", "--tenant", "x"], ["showmigrations"]):
        done = subprocess.run([sys.executable, MANAGE, *command], env=env,
                              capture_output=True, text=True, timeout=WAIT)
        assert done.returncode == 0, (command, done.stderr)
    assert json.loads(subprocess.run(
        [sys.executable, MANAGE, "ojs_outbox", "status", "--json"], env=env,
        capture_output=True, text=True, timeout=WAIT).stdout)["table"] == "py_outbox"
    relay = subprocess.run([sys.executable, MANAGE, "ojs_relay"], env=env, stdin=subprocess.DEVNULL,
                           capture_output=True, text=True, timeout=WAIT)
    assert relay.returncode != 0
    assert 'OJS_CONFIG["ojs_url"]' in relay.stderr + relay.stdout, relay.stderr


@DB
def test_ojs_outbox_command_lists_replays_and_purges_dead_rows_by_tenant(backend):
    ojs.dead_purge()
    backend.call("POST", "/_dev/faults", {"status": 400, "code": "invalid_request",
                                           "match_type": "poison.job"})
    ids = {tenant: ojs.enqueue_after_commit("poison.job", [tenant], meta={"tenant_id": tenant})
           for tenant in ("t1", "t2", "t3")}
    wait_until(lambda: {r["status"] for r in ojs.outbox_rows(list(ids.values())).values()} == {"dead"},
               what="three dead rows")

    out = io.StringIO()
    call_command("ojs_outbox", "dead", "list", "--tenant", "t1", "--json", stdout=out)
    listed = json.loads(out.getvalue())
    assert [row["job_id"] for row in listed] == [ids["t1"]]
    # The default is the core's table (the same text as `ojs-relay dead list`).
    out = io.StringIO()
    call_command("ojs_outbox", "dead", "list", "--tenant", "t1", stdout=out)
    table = out.getvalue()
    assert table.startswith('1 dead row(s) of tenant "t1"'), table
    assert ids["t1"] in table and ids["t2"] not in table

    out = io.StringIO()
    call_command("ojs_outbox", "status", "--json", stdout=out)
    assert json.loads(out.getvalue())["dead"] == 3
    out = io.StringIO()
    call_command("ojs_outbox", "status", stdout=out)
    assert out.getvalue().startswith('outbox table "py_outbox" in sqlite://'), out.getvalue()
    assert [line.split()[-1] for line in out.getvalue().splitlines()
            if line.strip().startswith("dead ")] == ["3"]

    backend.call("DELETE", "/_dev/faults")
    out = io.StringIO()
    call_command("ojs_outbox", "dead", "replay", "--tenant", "t1", stdout=out)
    assert out.getvalue().startswith('replayed 1 dead row(s) of tenant "t1"'), out.getvalue()
    backend.wait_for([ids["t1"]])

    from django.core.management.base import CommandError

    # Without --yes the core refuses, says how many rows it would delete, deletes none: exit 2.
    err = io.StringIO()
    with pytest.raises(CommandError) as refused:
        call_command("ojs_outbox", "dead", "purge", "--tenant", "t2", stderr=err)
    assert refused.value.returncode == 2
    assert "this would delete 1 dead row(s)" in str(refused.value)
    assert "nothing was deleted" in err.getvalue()
    assert ojs.outbox_rows([ids["t2"]])[ids["t2"]]["status"] == "dead"
    # From the command line: the core's text unchanged on stderr, its exit code.
    done = subprocess.run([sys.executable, MANAGE, "ojs_outbox", "dead", "purge", "--tenant", "t3"],
                          env={**os.environ, "OJS_TEST_OJS_URL": backend.url},
                          capture_output=True, text=True, timeout=WAIT)
    assert done.returncode == 2, done.stderr
    assert done.stderr.startswith('refusing to purge without --yes: this would delete 1 dead '
                                  'row(s) of tenant "t3"'), done.stderr
    out = io.StringIO()
    call_command("ojs_outbox", "dead", "purge", "--tenant", "t2", "--yes", stdout=out)
    assert out.getvalue().startswith('purged 1 dead row(s) of tenant "t2"'), out.getvalue()
    rows = ojs.outbox_rows(list(ids.values()))
    assert ids["t2"] not in rows and rows[ids["t3"]]["status"] == "dead"
    assert backend.job(ids["t3"]) is None


@DB
# Python >= 3.12 warns on any fork of a threaded process; forking after the relay's threads
# started is exactly the pre-fork server case under test.
@pytest.mark.filterwarnings("ignore:This process .* is multi-threaded:DeprecationWarning")
def test_relay_survives_fork_and_the_child_delivers(backend):
    """A pre-fork server forks after the relay started: the child's first enqueue starts a relay
    of its own (the core builds a fresh runtime), and the parent's keeps working. The poll
    interval is 30 s, so each delivery within seconds is the work of that process's hot path."""
    adapter = own_ojs(backend, "default", "py_fork")
    first = adapter.enqueue_after_commit("fork.parent_before", [1])
    backend.wait_for([first])
    assert adapter.metrics() is not None, "the parent's relay runs"
    # The relays of this process keep running across the fork: the core holds the fork back
    # while one of them runs a statement on the file (sqlite_fork.rs), so the child can write it.
    wait_until(lambda: adapter.metrics()["sent"] == 1, what="the parent's relay to settle its job")

    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the child: report through the pipe, never return into pytest
        status = 1
        try:
            os.close(read)
            # The parent's SQLite handle must not be used (nor closed) here: drop it.
            connections["default"].connection = None
            child_job = adapter.enqueue_after_commit("fork.child", [os.getpid()])
            backend.wait_for([child_job])
            wait_until(lambda: (adapter.metrics() or {}).get("sent", 0) >= 1, what="child sent")
            os.write(write, json.dumps({"job": child_job, "metrics": adapter.metrics()}).encode())
            adapter.stop_relay()
            status = 0
        except BaseException as exc:  # noqa: BLE001 - reported to the parent
            os.write(write, json.dumps({"error": repr(exc)}).encode())
        finally:
            os._exit(status)
    os.close(write)
    _, status = os.waitpid(pid, 0)
    with os.fdopen(read) as pipe:
        report = json.loads(pipe.read() or "{}")
    try:
        assert os.waitstatus_to_exitcode(status) == 0, report
        assert backend.job(report["job"])["type"] == "fork.child"
        assert report["metrics"]["sent"] == 1, "the child's own relay sent its job"
        after = adapter.enqueue_after_commit("fork.parent_after", [2])
        backend.wait_for([after])
        # The counter moves just after the relay's settlement commits, which is after the
        # backend answered: wait for it rather than read it at once.
        wait_until(lambda: adapter.metrics()["sent"] == 2,
                   what="the parent's relay to count its two jobs as sent")
    finally:
        adapter.reset()
