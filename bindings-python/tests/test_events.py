"""Issue 15, the Django binding: the relay's HTTP surface mounted with
``include("ojs_adapter_django.urls")`` (events as SSE, Prometheus metrics, health), who may read
it (staff by default, ``OJS_HTTP_ACCESS``, tenant scoping), and the SDK's event client
(``subscribe_events``) against the devserver's live stream, including a dropped connection,
and against the mount served by a real ``manage.py runserver``. Real Django, SQLite and
PostgreSQL, the real devserver; every wait has a deadline."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from asgiref.sync import sync_to_async
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connections, transaction
from django.test import AsyncClient, Client, RequestFactory
from prometheus_client.openmetrics.parser import text_string_to_metric_families

from ojs_adapter_django import OJS, Event, InvalidConfigError, ojs, request_context, subscribe_events
from ojs_adapter_django import mount
from support import WAIT, drop_table, wait_until

DB = pytest.mark.django_db(transaction=True, databases=["default", "pg", "my"])
#: Where tests/testproject/urls.py mounts the surface of each database alias.
MOUNT = {"default": "/ojs", "pg": "/ojs-pg", "my": "/ojs-my"}
TABLE = "py_outbox"
SOURCE = f"/ojs/outbox/{TABLE}"
HERE = Path(__file__).parent
MANAGE = str(HERE / "manage.py")


@pytest.fixture
def staff():
    user = User.objects.create_user("operator", password="pw", is_staff=True)
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def by_token(settings):
    """``OJS_HTTP_ACCESS``: bearer tokens for the operator and for tenants acme and globex."""
    settings.OJS_HTTP_ACCESS = "testproject.access.by_token"


def token_client(token):
    return Client(headers={"Authorization": f"Bearer {token}"})


class Stream:
    """The frames of a streamed response of Django's test client, read on this thread (the
    mount's keep-alive comment every 0.2 s gives the reader a turn to check its deadline)."""

    def __init__(self, response):
        assert response.status_code == 200, response.content
        assert response["Content-Type"] == "text/event-stream"
        self.response = response
        self.chunks = iter(response.streaming_content)
        self.buffer = ""
        self.events: list[dict] = []
        self.comments = 0

    def feed(self, chunk):
        self.buffer += chunk.decode() if isinstance(chunk, bytes) else chunk
        while "\n\n" in self.buffer:
            frame, self.buffer = self.buffer.split("\n\n", 1)
            data = [line[5:].lstrip() for line in frame.split("\n") if line.startswith("data:")]
            if data:
                self.events.append(json.loads("\n".join(data)))
            elif frame.startswith(":"):
                self.comments += 1

    def until(self, condition, what, timeout=WAIT):
        deadline = time.monotonic() + timeout
        while not condition(self):
            if time.monotonic() > deadline:
                raise AssertionError(f"timed out waiting for {what}; events: {self.events}")
            try:
                self.feed(next(self.chunks))
            except StopIteration:
                raise AssertionError(f"the stream ended before {what}; events: {self.events}")
        return self

    def until_end(self, timeout=WAIT):
        deadline = time.monotonic() + timeout
        for chunk in self.chunks:
            self.feed(chunk)
            if time.monotonic() > deadline:
                raise AssertionError("the stream did not end")

    def job_events(self, job_ids):
        return [event for event in self.events if event.get("subject") in job_ids]

    def has(self, job_id, event_type="job.enqueued"):
        return lambda stream: any(event["subject"] == job_id and event["type"] == event_type
                                  for event in stream.events)

    def close(self):
        self.response.close()


def stage(alias, *jobs):
    """Commits these jobs (type, meta) in one transaction of ``alias``; their ids in order."""
    with transaction.atomic(using=alias):
        return [ojs.enqueue_after_commit(job_type, [index], using=alias, meta=meta)
                for index, (job_type, meta) in enumerate(jobs)]


# -- the mount: events/stream ----------------------------------------------------------------

@DB
def test_a_committed_jobs_enqueued_event_arrives_on_the_stream(backend, alias, staff):
    stream = Stream(staff.get(f"{MOUNT[alias]}/events/stream?types=job.*"))
    try:
        (job_id,) = stage(alias, ("email.welcome", None))
        stream.until(stream.has(job_id), "the job's job.enqueued")
    finally:
        stream.close()
    (event,) = stream.job_events({job_id})
    assert event["specversion"] == "1.0"
    assert event["source"] == SOURCE
    assert event["data"]["job_id"] == job_id
    assert event["data"]["type"] == "email.welcome"
    assert event["data"]["queue"] == "default"
    assert backend.job(job_id) is not None


@DB
def test_an_idle_stream_writes_keep_alive_comments(backend, staff):
    stream = Stream(staff.get("/ojs/events/stream"))
    try:
        # The first at once (the headers leave with it), then one per keepalive (0.2 s here).
        stream.until(lambda s: s.comments >= 3, "three keep-alive comments")
    finally:
        stream.close()
    assert stream.events == []


@DB
def test_the_stream_filters_by_queue_and_replays_nothing_without_retention(backend, staff):
    stream = Stream(staff.get("/ojs/events/stream?queues=email"))
    try:
        with transaction.atomic():
            other = ojs.enqueue_after_commit("report.build", [1])
            email = ojs.enqueue_after_commit("email.welcome", [2], queue="email")
        stream.until(stream.has(email), "the email job's event")
    finally:
        stream.close()
    assert [event["subject"] for event in stream.events] == [email]
    backend.wait_for([other])


@DB
def test_the_stream_outlives_the_relay_of_its_process(backend, staff):
    """The stream reads the table's event log (the default): with this process's relay stopped
    it goes on (keep-alive comments keep coming), and it still serves the events of a job that
    another process's relay delivers."""
    stream = Stream(staff.get("/ojs/events/stream"))
    try:
        stream.until(lambda s: s.comments >= 1, "the stream's first comment")
        ojs.stop_relay()
        seen = stream.comments
        stream.until(lambda s: s.comments >= seen + 2, "more comments with the relay stopped")
        # Another process's relay: the same table, delivering a job staged there.
        other = OJS({"ojs_url": backend.url, "outbox": {"table_name": TABLE}})
        try:
            job_id = other.enqueue_after_commit("elsewhere.job", [1])
            stream.until(stream.has(job_id), "the job another relay delivered")
        finally:
            other.reset()
    finally:
        stream.close()
        ojs.start_relay()


@DB
def test_a_live_only_stream_ends_when_the_relay_stops(backend, staff, settings):
    settings.OJS_CONFIG = {**settings.OJS_CONFIG, "relay": {"event_retention": None}}
    ojs.start_relay()
    stream = Stream(staff.get("/ojs/events/stream"))
    try:
        stream.until(lambda s: s.comments >= 1, "the stream's first comment")
        ojs.stop_relay()
        stream.until_end()
    finally:
        stream.close()


@DB
def test_a_since_that_is_not_a_time_is_a_400_naming_it(backend, staff):
    response = staff.get("/ojs/events/stream?since=yesterday")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid_request"
    assert response.json()["error"]["message"].startswith("since: ")


@DB
def test_without_a_relay_in_this_process_the_stream_reads_the_log(backend, staff, settings):
    """An external-mode process runs no relay: its mount still streams the table's events
    (the event log) and /metrics gives the table's figures; live only, the stream is 503."""
    settings.OJS_CONFIG = {**settings.OJS_CONFIG, "relay": {"mode": "external"}}
    stream = Stream(staff.get("/ojs/events/stream"))
    stream.close()
    # /metrics: the table's figures, and no relay's counters (none runs here).
    metrics = staff.get("/ojs/metrics")
    assert metrics.status_code == 200
    text = metrics.content.decode()
    assert "ojs_outbox_backlog_jobs{" in text and "ojs_relay_" not in text, text
    settings.OJS_CONFIG = {**settings.OJS_CONFIG,
                           "relay": {"mode": "external", "event_retention": None}}
    response = staff.get("/ojs/events/stream")
    assert response.status_code == 503
    assert response.json()["error"]["code"] == "relay_not_running"


# -- who may read --------------------------------------------------------------------------

@DB
def test_only_staff_may_read_by_default_and_healthz_is_open(backend):
    User.objects.create_user("ada", password="pw")
    member = Client()
    member.login(username="ada", password="pw")
    for client in (Client(), member):
        for path in ("events/stream", "metrics", "readyz"):
            response = client.get(f"/ojs/{path}")
            assert response.status_code == 403, path
            assert response.json()["error"]["code"] == "forbidden"
    response = Client().get("/ojs/healthz")
    assert response.status_code == 200
    assert response.content == b"ok\n"
    # The core answers methods the surface does not serve.
    staff = User.objects.create_user("grace", password="pw", is_staff=True)
    admin = Client()
    admin.force_login(staff)
    assert admin.post("/ojs/metrics").status_code == 405


@DB
def test_a_tenant_scoped_caller_sees_only_its_tenants_events(backend, by_token):
    acme = token_client("acme-token")
    assert acme.get("/ojs/events/stream?tenant=globex").status_code == 403
    # Nor can a scoped caller widen its scope with the query: a second value (refused, not
    # guessed), an empty one (which the core would read as no tenant filter at all).
    assert acme.get("/ojs/events/stream?tenant=acme&tenant=globex").status_code == 400
    assert acme.get("/ojs/events/stream?tenant=").status_code == 403
    assert acme.get("/ojs/metrics").status_code == 403
    assert acme.get("/ojs/readyz").status_code == 403
    assert token_client("nobody").get("/ojs/events/stream").status_code == 403
    scoped = Stream(acme.get("/ojs/events/stream"))
    explicit = Stream(acme.get("/ojs/events/stream?tenant=acme"))
    operator = Stream(token_client("operator-token").get("/ojs/events/stream?types=job.*"))
    try:
        # One commit, one claim: the events come in this order, so a leaked globex event would
        # come before the last acme one.
        ids = stage("default", ("email.welcome", {"tenant_id": "globex"}),
                    ("email.welcome", {"tenant_id": "acme"}),
                    ("email.welcome", {"tenant_id": "globex"}),
                    ("email.welcome", {"tenant_id": "acme"}))
        for stream in (scoped, explicit):
            stream.until(stream.has(ids[3]), "acme's second job")
        operator.until(lambda s: all(s.has(job_id)(s) for job_id in ids), "all four jobs")
    finally:
        for stream in (scoped, explicit, operator):
            stream.close()
    for stream in (scoped, explicit):
        assert [event["subject"] for event in stream.job_events(set(ids))] == [ids[1], ids[3]]
        assert {event["data"]["tenant_id"] for event in stream.events} == {"acme"}
    assert {event["subject"] for event in operator.job_events(set(ids))} == set(ids)


@DB
def test_an_access_setting_that_names_no_callable_is_an_error(backend, staff, settings):
    for value in ("testproject.access.missing", "testproject.access.NOT_CALLABLE", 42):
        settings.OJS_HTTP_ACCESS = value
        with pytest.raises(InvalidConfigError) as raised:
            staff.get("/ojs/metrics")
        assert raised.value.field == "OJS_HTTP_ACCESS"
        with pytest.raises(SystemCheckError, match=r"ojs_adapter_django\.E002.*OJS_HTTP_ACCESS"):
            call_command("check")
    settings.OJS_HTTP_ACCESS = "testproject.access.answers_nonsense"
    with pytest.raises(InvalidConfigError, match="answered a number") as raised:
        staff.get("/ojs/events/stream")
    assert raised.value.field == "OJS_HTTP_ACCESS"
    settings.OJS_HTTP_ACCESS = "testproject.access.answers_a_user"
    with pytest.raises(InvalidConfigError, match="returned a SimpleLazyObject; expected") as raised:
        staff.get("/ojs/events/stream")
    assert raised.value.field == "OJS_HTTP_ACCESS"


def test_a_misspelled_setting_is_a_check_error_naming_the_right_one(settings):
    settings.OJS_HTTP_ACESS = "testproject.access.by_token"
    with pytest.raises(SystemCheckError) as raised:
        call_command("check")
    assert "ojs_adapter_django.E002" in str(raised.value)
    assert "OJS_HTTP_ACESS" in str(raised.value)
    assert '"OJS_HTTP_ACCESS"' in str(raised.value)  # the near miss, named by the core's rule


def test_the_default_access_without_authentication_middleware_is_an_error():
    request = RequestFactory().get("/ojs/metrics")  # no request.user: no AuthenticationMiddleware
    with pytest.raises(InvalidConfigError, match="AuthenticationMiddleware") as raised:
        mount.metrics(request)
    assert raised.value.field == "OJS_HTTP_ACCESS"


def test_a_keepalive_that_is_not_a_positive_number_is_an_error():
    request = RequestFactory().get("/ojs/events/stream")
    for keepalive in (0, -1, "5", True):
        with pytest.raises(InvalidConfigError) as raised:
            mount.events_stream(request, keepalive=keepalive)
        assert raised.value.field == "keepalive"


# -- metrics and readiness -----------------------------------------------------------------

def counts_by_status(alias):
    with connections[alias].cursor() as cursor:
        cursor.execute(f"SELECT status, COUNT(*) FROM {TABLE} GROUP BY status")
        return dict(cursor.fetchall())


def samples(text):
    """``{(sample name, status label or None): value}`` for the table's samples, parsed by
    prometheus_client's OpenMetrics parser (strict: it also checks the text is well formed)."""
    found = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            if sample.labels.get("table") == TABLE:
                key = (sample.name, sample.labels.get("status"), sample.labels.get("le"))
                found[key] = sample.value
    return found


@DB
def test_metrics_parse_and_match_the_outbox_after_a_drain(backend, alias, staff):
    with connections[alias].cursor() as cursor:
        cursor.execute(f"DELETE FROM {TABLE}")
    ojs.reset()  # a relay of its own: its counters start at zero
    # One job refused for good (422), then five delivered in one batch.
    backend.call("POST", "/_dev/faults", {"status": 422, "code": "validation_error",
                                          "match_type": "email.bad"})
    (dead,) = stage(alias, ("email.bad", None))
    wait_until(lambda: counts_by_status(alias) == {"dead": 1}, what="the refused row dead")
    sent = stage(alias, *[("email.welcome", None)] * 5)
    backend.wait_for(sent)
    wait_until(lambda: counts_by_status(alias) == {"dead": 1, "sent": 5}, what="five rows sent")

    def metrics():
        response = staff.get(f"{MOUNT[alias]}/metrics")
        assert response.status_code == 200
        assert response["Content-Type"].startswith("application/openmetrics-text; version=1.0.0")
        return samples(response.content.decode())

    # The counters follow the settle statement: wait until they show the drain.
    wait_until(lambda: metrics().get(("ojs_relay_jobs_sent_total", None, None)) == 5,
               what="ojs_relay_jobs_sent_total 5")
    found = metrics()
    rows = counts_by_status(alias)
    assert found[("ojs_relay_jobs_sent_total", None, None)] == rows["sent"] == 5
    assert found[("ojs_relay_jobs_dead_total", None, None)] == rows["dead"] == 1
    for status in ("pending", "failed", "sent", "dead"):
        assert found[("ojs_outbox_rows", status, None)] == rows.get(status, 0), status
    assert found[("ojs_outbox_backlog_jobs", None, None)] == 0
    assert found[("ojs_relay_jobs_in_flight", None, None)] == 0
    assert found[("ojs_relay_backend_up", None, None)] == 1
    # Every delivered job has its commit-to-delivery lag; at least the two requests were timed.
    assert found[("ojs_relay_delivery_lag_seconds_count", None, None)] == 5
    assert found[("ojs_relay_send_duration_seconds_count", None, None)] >= 2
    assert found[("ojs_relay_send_duration_seconds_bucket", None, "+Inf")] == \
        found[("ojs_relay_send_duration_seconds_count", None, None)]
    assert dead not in sent


@DB
def test_readyz_says_ready_with_its_body_then_503_when_the_backend_is_down(backend, alias, staff,
                                                                          settings):
    response = staff.get(f"{MOUNT[alias]}/readyz")
    assert response.status_code == 200
    assert response.json() == {"ready": True, "database": "ok", "backend": "ok"}
    settings.OJS_CONFIG = {**settings.OJS_CONFIG, "ojs_url": "http://127.0.0.1:9"}
    response = staff.get(f"{MOUNT[alias]}/readyz")
    assert response.status_code == 503
    body = response.json()
    assert body["ready"] is False
    assert body["database"] == "ok"
    assert body["backend"] != "ok"


# -- under ASGI ----------------------------------------------------------------------------

@DB
def test_under_asgi_the_stream_is_an_async_iterator(backend, by_token):
    async def scenario():
        response = await AsyncClient().get("/ojs/events/stream?types=job.*",
                                           headers={"Authorization": "Bearer operator-token"})
        assert response.status_code == 200
        assert response.is_async  # Django would buffer a sync iterator whole under ASGI
        (job_id,) = await sync_to_async(stage)("default", ("email.welcome", None))
        buffer = ""
        deadline = time.monotonic() + WAIT
        chunks = response.streaming_content.__aiter__()
        try:
            while f'"subject":"{job_id}"' not in buffer:
                assert time.monotonic() < deadline, f"no event for {job_id}: {buffer!r}"
                chunk = await asyncio.wait_for(chunks.__anext__(), WAIT)
                buffer += chunk.decode() if isinstance(chunk, bytes) else chunk
        finally:
            await chunks.aclose()
        return job_id, buffer

    job_id, buffer = asyncio.run(scenario())
    frame = next(frame for frame in buffer.split("\n\n") if job_id in frame)
    assert "event: job.enqueued" in frame
    assert buffer.startswith(": keep-alive\n\n")


# -- the SDK's event client against the devserver ------------------------------------------

def open_streams(backend):
    return backend.call("GET", "/_dev/events")["open_streams"]


def push(count):
    return [ojs.enqueue("events.sdk", [index]) for index in range(count)]


@DB
def test_the_client_resumes_after_a_drop_without_losing_or_repeating_an_event(backend):
    before = open_streams(backend)
    with subscribe_events(types=["job.enqueued"]) as events:
        # The iterator blocks; if the test goes wrong, close() from another thread ends it.
        watchdog = threading.Timer(WAIT, events.close)
        watchdog.start()
        try:
            wait_until(lambda: open_streams(backend) > before, what="the client connected")
            first = push(5)
            received = [next(events), next(events)]
            assert backend.call("POST", "/_dev/events/drop")["dropped"] >= 1
            second = push(5)
            (sentinel,) = push(1)
            for event in events:
                received.append(event)
                if event.subject == sentinel:
                    break
        finally:
            watchdog.cancel()
        assert not events.closed, "the watchdog closed the subscription: events were missing"
    assert events.closed
    assert [event.subject for event in received] == first + second + [sentinel]
    assert len({event.id for event in received}) == len(received)
    event = received[0]
    assert isinstance(event, Event)
    assert event.type == "job.enqueued"
    assert event.data["job_id"] == first[0] == event.subject
    assert event.data["type"] == "events.sdk"
    assert event.source
    assert event.time is not None and event.time.tzinfo is not None
    # Closed: iteration ends at once.
    assert next(iter(events), None) is None


@DB
def test_the_async_client_resumes_after_a_drop_and_never_blocks_the_loop(backend):
    async def scenario():
        ticks = 0

        async def ticker():
            nonlocal ticks
            while True:
                await asyncio.sleep(0.01)
                ticks += 1

        async def wait_for(condition, what):
            deadline = time.monotonic() + WAIT
            while not await asyncio.to_thread(condition):
                assert time.monotonic() < deadline, f"timed out waiting for {what}"
                await asyncio.sleep(0.01)

        ticking = asyncio.create_task(ticker())
        before = await asyncio.to_thread(open_streams, backend)
        async with subscribe_events(types=["job.enqueued"]) as events:
            await wait_for(lambda: open_streams(backend) > before, "the client connected")
            # Waiting for an event that has not been pushed yet: the loop keeps running.
            pending = asyncio.ensure_future(events.__anext__())
            start = ticks
            while ticks < start + 5:
                await asyncio.sleep(0.01)
            assert not pending.done()
            first = await asyncio.to_thread(push, 5)
            received = [await asyncio.wait_for(pending, WAIT),
                        await asyncio.wait_for(events.__anext__(), WAIT)]
            dropped = await asyncio.to_thread(backend.call, "POST", "/_dev/events/drop")
            assert dropped["dropped"] >= 1
            second = await asyncio.to_thread(push, 5)
            (sentinel,) = await asyncio.to_thread(push, 1)
            while received[-1].subject != sentinel:
                received.append(await asyncio.wait_for(events.__anext__(), WAIT))
        ticking.cancel()
        with pytest.raises(StopAsyncIteration):
            await events.__anext__()
        return first + second + [sentinel], received

    expected, received = asyncio.run(scenario())
    assert [event.subject for event in received] == expected
    assert len({event.id for event in received}) == len(received)


@DB
def test_an_async_wait_cancelled_by_a_timeout_loses_no_event(backend):
    async def scenario():
        before = await asyncio.to_thread(open_streams, backend)
        async with subscribe_events(types=["job.enqueued"]) as events:
            deadline = time.monotonic() + WAIT
            while await asyncio.to_thread(open_streams, backend) <= before:
                assert time.monotonic() < deadline, "the client did not connect"
                await asyncio.sleep(0.01)
            pushed = []
            received = []
            # A short wait times out (its wait in the core goes on), then a job is pushed: its
            # event reaches the cancelled wait, which must hand it to the next one.
            while len(received) < 6:
                assert time.monotonic() < deadline, f"received {len(received)} of 6 events"
                try:
                    received.append(await asyncio.wait_for(events.__anext__(), 0.005))
                except asyncio.TimeoutError:
                    pass
                if len(pushed) < 6:
                    pushed += await asyncio.to_thread(push, 1)
        return pushed, received

    pushed, received = asyncio.run(scenario())
    assert [event.subject for event in received] == pushed


@DB
def test_a_bad_client_option_is_a_typed_error_naming_it(backend):
    with pytest.raises(InvalidConfigError) as raised:
        subscribe_events(types=5)
    assert raised.value.field == "types"
    with pytest.raises(InvalidConfigError) as raised:
        subscribe_events(queues=["email", 7])
    assert raised.value.field == "queues"
    with pytest.raises(InvalidConfigError) as raised:
        subscribe_events(url="ftp://example.invalid/stream")
    assert raised.value.field == "url"


# -- the SDK's client against the mount, served by a real runserver --------------------------

def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


SERVERS = {
    # WSGI: the stream is a generator on one of runserver's threads.
    "runserver": lambda port: [sys.executable, MANAGE, "runserver", "--noreload",
                               f"127.0.0.1:{port}"],
    # ASGI: the stream is an async iterator; uvicorn tells Django when the client goes. An
    # open stream never completes by itself: a graceful stop waits for it until uvicorn's
    # timeout, then cancels it (docs/django.md).
    "uvicorn": lambda port: [sys.executable, "-m", "uvicorn", "testproject.asgi:application",
                             "--host", "127.0.0.1", "--port", str(port), "--no-access-log",
                             "--timeout-graceful-shutdown", "1"],
}


@DB
@pytest.mark.parametrize("server_kind", list(SERVERS))
def test_the_client_reads_the_mount_of_a_running_server(backend, server_kind):
    import urllib.request

    from ojs_adapter_django import OJS

    table = "py_events_served"
    drop_table("default", table)
    OJS({"ojs_url": backend.url, "outbox": {"table_name": table}}).create_outbox_table("default")
    port = free_port()
    env = {**os.environ, "OJS_TEST_OJS_URL": backend.url, "OJS_TEST_OUTBOX_TABLE": table,
           "OJS_TEST_HTTP_ACCESS": "testproject.access.by_token",
           "OJS_TEST_TENANT_RESOLVER": "testproject.tenancy.tenant_of_user",
           # The tenant resolver reads the user inside the signup's transaction, while two
           # relays (this process's, the server's) commit: SQLite's remedy (docs/django.md).
           "OJS_TEST_SQLITE_IMMEDIATE": "1",
           "DJANGO_SETTINGS_MODULE": "testproject.settings"}
    server = subprocess.Popen(SERVERS[server_kind](port), cwd=HERE, env=env,
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True)
    base = f"http://127.0.0.1:{port}"
    # The tenant of a signup's job is its user's (OJS_TENANT_RESOLVER): one logged-in session
    # per tenant, in the database the server shares with this test.
    sessions = {}
    for tenant in ("acme", "globex"):
        client = Client()
        client.force_login(User.objects.create_user(f"user@{tenant}"))
        sessions[tenant] = client.cookies["sessionid"].value

    def signup(tenant):
        request = urllib.request.Request(f"{base}/signup",
                                         headers={"Cookie": f"sessionid={sessions[tenant]}"})
        with urllib.request.urlopen(request, timeout=WAIT) as response:
            return json.loads(response.read())["job_id"]

    try:
        def up():
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=1):
                    return True
            except OSError:
                return server.poll() is not None
        wait_until(up, what=f"{server_kind} listening")
        assert server.poll() is None, server.communicate()[0]
        with subscribe_events(url=f"{base}/ojs/events/stream", token="acme-token",
                              types=["job.*"]) as events:
            # The stream may connect after the first job's event: stage until one arrives.
            deadline = time.monotonic() + WAIT
            event = None
            while event is None:
                assert time.monotonic() < deadline, "no event from the mount"
                job_id = signup("acme")
                event = events.receive(0.5)
            while event.subject != job_id:
                event = events.receive(WAIT)
                assert event is not None, "the mount's stream gave no event for the last job"
            # globex's job is delivered (so its event, were it leaked, made) before the last
            # acme job is committed: a leaked event would come before the last one.
            globex = signup("globex")
            backend.wait_for([globex])
            last = signup("acme")
            seen = []
            while not seen or seen[-1].subject != last:
                got = events.receive(WAIT)
                assert got is not None, "the acme job's event did not come"
                seen.append(got)
            # The server stops while the stream is open: the response is ended (under ASGI,
            # the stream's iterator cancelled after the graceful timeout) and the server exits.
            server.send_signal(signal.SIGTERM)
            output, _ = server.communicate(timeout=WAIT)
        assert globex not in {event.subject for event in seen}
        assert event.type == "job.enqueued" and event.data["tenant_id"] == "acme"
        assert event.source == f"/ojs/outbox/{table}"
        # uvicorn re-raises the signal once it has stopped (-15); runserver dies of it.
        assert server.returncode == -signal.SIGTERM, output
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate(timeout=WAIT)
        drop_table("default", table)
