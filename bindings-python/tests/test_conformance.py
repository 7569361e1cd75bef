"""The conformance runner: every case of conformance-tests/cases/*.json, through the real
Django adapter (transaction.atomic, on_commit, the host cursor), on SQLite, PostgreSQL and
MariaDB (Django's MySQL backend), against ojs-devserver. Mirrors
conformance-tests/runner-rust/src/lib.rs; prints the matrix at the end of the session
(conftest/pytest_terminal_summary) and writes target/matrix/django-<MAJOR.MINOR>.tsv (and .txt).

Worker cases (``worker_start``, ``worker_stop``, ``wait_jobs``) run Django's own worker,
``ojs_adapter_django.worker.Worker`` (what ``manage.py ojs_worker`` runs), in a thread, on the
queue ``default``, with the case's adapter as the ``TASKS["default"]`` ``OJSBackend``. That
worker runs Django tasks only, so the suite handlers are the tasks of ``tests/conf.py``, whose
import paths are exactly ``conf.echo``, ``conf.fail``, ``conf.sleep`` and ``conf.trace``; a
worker case stages each ``conf.*`` job through the Task machinery with the case's args as the
task's positional args: ``task.enqueue(*args)`` when the case gives no options, else, options
unchanged, ``ojs.enqueue_after_commit(task.module_path, [{"args": args, "kwargs": {}}],
**options)`` (the documented path for options a ``Task`` has no field for: ``retry``,
``timeout_ms``). Jobs of other types are staged as given (they are unknown to the worker)."""

from __future__ import annotations

import contextvars
import json
import re
import threading
import time
from pathlib import Path
from typing import Any, Optional

import pytest
from django.db import connections, transaction
from django.test import override_settings
from django.utils.module_loading import import_string

from ojs_adapter_django import OJS, OJSError, clear_request_context, set_request_context
from conformance_skips import SKIPS
from support import REPO, drop_table, outbox_count, outbox_rows, suppressed_wakeups

CASES_DIR = REPO / "conformance-tests/cases"
SCHEMA = REPO / "conformance-tests/schema/case.schema.json"
DATABASES = {"sqlite": "default", "postgres": "pg", "mariadb": "my"}
KNOWN_OPS = {
    "begin", "savepoint", "release_savepoint", "rollback_savepoint", "commit", "rollback",
    "enqueue_after_commit", "enqueue", "enqueue_bulk", "set_context", "clear_context",
    "backend_fault", "backend_clear_faults", "backend_manifest", "relay_start", "relay_stop",
    "relay_kill", "sleep", "prune", "dead_replay", "dead_purge", "wait_delivered",
    "wait_outbox", "expect_backend", "expect_requests", "expect_outbox",
    "events_subscribe", "wait_events", "expect_events", "race_enqueue", "race_join",
    "worker_start", "worker_stop", "wait_jobs",
}
#: The suite handlers (conformance-tests/README.md, "Workers"): tasks of tests/conf.py.
SUITE_HANDLERS = {"conf.echo", "conf.fail", "conf.sleep", "conf.trace"}
WORKER_OPS = {"worker_start", "worker_stop", "wait_jobs"}

#: (case id, database) -> "PASS" | "FAIL: why" | "SKIP: reason", for the matrix.
RESULTS: dict[tuple[str, str], str] = {}


def load_cases() -> list[dict]:
    return [json.loads(path.read_text()) for path in sorted(CASES_DIR.glob("*.json"))]


def suite_defaults() -> dict:
    """The `default` annotations of the case schema: the one source every runner reads."""
    schema = json.loads(SCHEMA.read_text())
    defaults: dict = {}
    for section in ("outbox", "relay"):
        keys = schema["$defs"]["config"]["properties"][section]["properties"]
        for key, spec in keys.items():
            if "default" in spec:
                defaults.setdefault(section, {})[key] = spec["default"]
    return defaults


def merge(base: dict, patch: dict) -> dict:
    for key, value in patch.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            merge(base[key], value)
        else:
            base[key] = value
    return base


CASES = load_cases()
for _skip in SKIPS:
    if _skip.split(" [")[0] not in {case["id"] for case in CASES}:
        raise RuntimeError(f"conformance_skips.py lists {_skip!r}, which is no case")


class CaseFailed(AssertionError):
    pass


class _Rollback(Exception):
    """Raised into an atomic block's __exit__ to roll it back, as a failing block would."""


def now_us() -> int:
    return time.time_ns() // 1000


class Subscriber:
    """One ``events_subscribe``: the in-process relay's frames through the call the Django
    mount serves (``OJS.relay_events``, the bridge's ``relay_events``), and every event read
    so far, each checked as an envelope when it is read."""

    def __init__(self, run: "Run", name: str, frames: Any) -> None:
        self.run = run
        self.name = name
        self.frames = frames
        self.events: list[dict] = []
        self.ids: set[str] = set()
        self.ended = False

    def read(self, wait_ms: int) -> bool:
        """Reads one frame, waiting at most ``wait_ms``; whether an event came."""
        if self.ended:
            return False
        frame = self.frames.next(wait_ms)
        if frame is None:
            self.ended = True
            return False
        if not frame:
            return False
        self.events.append(self.envelope(frame))
        return True

    def drain(self) -> None:
        """Reads the events already waiting."""
        while self.read(0):
            pass

    def envelope(self, frame: str) -> dict:
        """The event of one SSE frame (its ``data:`` line), checked as RFC-0005 §2 says."""
        data = [line[5:].removeprefix(" ") for line in frame.split("\n")
                if line.startswith("data:")]
        if not data:
            raise CaseFailed(f"subscription {self.name!r}: a frame without data: {frame!r}")
        try:
            event = json.loads("\n".join(data))
        except ValueError as exc:
            raise CaseFailed(f"subscription {self.name!r}: data is not JSON ({exc}): "
                             f"{frame!r}") from None
        if not isinstance(event, dict):
            raise CaseFailed(f"subscription {self.name!r}: data is not an object: {frame!r}")
        if event.get("specversion") != "1.0":
            raise CaseFailed(f"subscription {self.name!r}: specversion is not \"1.0\": {event}")
        event_id = event.get("id")
        if not event_id:
            raise CaseFailed(f"subscription {self.name!r}: an event without id: {event}")
        if event_id in self.ids:
            raise CaseFailed(f"subscription {self.name!r}: event id {event_id} came twice")
        self.ids.add(event_id)
        source = f"/ojs/outbox/{self.run.table}"
        if event.get("source") != source:
            raise CaseFailed(f"subscription {self.name!r}: source is not {source!r}: {event}")
        if str(event.get("type", "")).startswith("job."):
            job_id = (event.get("data") or {}).get("job_id")
            if event.get("subject") != job_id:
                raise CaseFailed(f"subscription {self.name!r}: subject is not data.job_id: {event}")
        return event


class Race:
    """``race_enqueue``'s second transaction: a thread of its own, so a connection of its own
    (Django's connections are per thread), that opens ``transaction.atomic(using=alias)``,
    calls the adapter's ``enqueue_after_commit`` in it and commits it, also when the enqueue
    failed (a DUPLICATE leaves the transaction usable). It runs in a copy of the caller's
    context, so the request context set by ``set_context`` goes along, and closes its
    connection at the end."""

    #: How long the cleanup of a failed case waits for a race still running.
    CLEANUP_JOIN_S = 30.0

    def __init__(self, run: "Run", step: dict) -> None:
        self.ref: Optional[str] = step.get("ref")
        self.step = step
        self.ojs = run.ojs
        self.alias = run.alias
        self.job_id: Optional[str] = None
        self.error: Optional[OJSError] = None
        self.crash: Optional[BaseException] = None
        #: The thread's DB-API connection, so a cleanup that cannot wait may cancel its query.
        self.raw: Any = None
        context = contextvars.copy_context()
        self.thread = threading.Thread(target=context.run, args=(self.body,),
                                       name=f"race-{self.ref}", daemon=True)
        self.thread.start()

    def body(self) -> None:
        step = self.step
        connection = connections[self.alias]
        try:
            # The test settings give SQLite a busy timeout of 20 s ("timeout"), so this
            # connection waits for the main transaction's write lock instead of failing at
            # once; Django's own default (5 s) is shorter, so say it on this connection only.
            if connection.vendor == "sqlite":
                options = connection.settings_dict.get("OPTIONS") or {}
                if options.get("timeout", 5) < 20:
                    connection.settings_dict = {**connection.settings_dict,
                                                "OPTIONS": {**options, "timeout": 20}}
            connection.ensure_connection()
            self.raw = connection.connection
            with transaction.atomic(using=self.alias):
                try:
                    self.job_id = self.ojs.enqueue_after_commit(
                        step.get("type"), step.get("args"), using=self.alias,
                        meta=step.get("meta"), **(step.get("options") or {}))
                except OJSError as exc:
                    self.error = exc
        except BaseException as exc:  # reported by race_join (or the cleanup)
            self.crash = exc
        finally:
            connection.close()

    def join(self, timeout: float) -> bool:
        self.thread.join(timeout)
        return not self.thread.is_alive()

    def cleanup(self) -> None:
        """After a case (the main transaction already rolled back, so nothing blocks the race
        any more): waits for the thread; if it still runs, cancels its statement
        (PostgreSQL; psycopg's ``cancel`` may be called from another thread) and waits again."""
        if self.join(self.CLEANUP_JOIN_S):
            return
        cancel = getattr(self.raw, "cancel", None)
        if cancel is not None:
            try:
                cancel()
            except Exception:
                pass
        if not self.join(self.CLEANUP_JOIN_S):
            raise RuntimeError(f"race_enqueue {self.ref!r}: the second transaction did not end")


class Run:
    def __init__(self, case: dict, alias: str, backend: Any) -> None:
        self.case = case
        self.alias = alias
        self.backend = backend
        self.refs: dict[str, str] = {}
        self.atomics: list[Any] = []
        self.last_commit_us = 0
        slug = re.sub(r"[^a-z0-9]", "_", case["id"].lower())
        self.table = f"py_case_{slug[:40]}"
        config = merge(suite_defaults(), {"ojs_url": backend.url, "outbox": {"table_name": self.table}})
        merge(config, case.get("config") or {})
        self.ojs = OJS(config, auto_start=False)
        self.subscribers: dict[str, Subscriber] = {}
        self.race: Optional[Race] = None
        self.worker_case = any(step["op"] in WORKER_OPS for step in case["steps"])
        self.worker: Optional[CaseWorker] = None

    # -- helpers -----------------------------------------------------------------------

    def id_of(self, ref: str) -> str:
        if ref not in self.refs:
            raise CaseFailed(f"ref {ref!r} was never enqueued")
        return self.refs[ref]

    def check_error(self, step: dict, error: Optional[OJSError]) -> bool:
        expected = step.get("expect_error")
        if expected and error is not None:
            if error.code != expected:
                raise CaseFailed(f"expected error {expected}, got {error.code}: {error}")
            return True
        if expected:
            raise CaseFailed(f"expected error {expected}, the call succeeded")
        if error is not None:
            raise CaseFailed(f"unexpected error {error.code}: {error}")
        return False

    def rows(self) -> dict[str, str]:
        """Row statuses as the application sees them: through its open transaction when there
        is one, else as committed (the core's own read)."""
        if self.atomics:
            return outbox_rows(self.alias, self.table)
        ids = list(self.refs.values())
        return {job_id: row["status"] for job_id, row in self.ojs.outbox_rows(ids, using=self.alias).items()}

    def check_rows(self, expected: Optional[dict]) -> None:
        if not expected:
            return
        rows = self.rows()
        for ref, allowed in expected.items():
            actual = rows.get(self.id_of(ref), "absent")
            allowed = allowed if isinstance(allowed, list) else [allowed]
            if actual not in allowed:
                raise CaseFailed(f"row {ref!r} is {actual}, expected {allowed}")

    # -- steps -------------------------------------------------------------------------

    def stage(self, step: dict, bulk: bool) -> None:
        if bulk and "generate" in step:
            generate = step["generate"]
            refs = [f"{generate['ref_prefix']}{i}" for i in range(generate["count"])]
            jobs = [{"type": generate["type"], "args": [i]} for i in range(generate["count"])]
        elif bulk:
            refs = [job.get("ref") for job in step["jobs"]]
            jobs = [{k: v for k, v in job.items() if k != "ref"} for job in step["jobs"]]
        else:
            refs = [step.get("ref")]
        error, ids = None, None
        started_us = now_us()  # in autocommit the INSERT is the commit (see "commit")
        try:
            if bulk:
                ids = self.ojs.enqueue_bulk(jobs, using=self.alias)
            elif self.worker_case and step.get("type") in SUITE_HANDLERS:
                ids = [self.stage_task(step)]
            else:
                ids = [self.ojs.enqueue_after_commit(step.get("type"), step.get("args"),
                                                     using=self.alias, meta=step.get("meta"),
                                                     **(step.get("options") or {}))]
        except OJSError as exc:
            error = exc
        if self.check_error(step, error):
            return
        if not bulk and "same_as" in step:
            wanted = self.id_of(step["same_as"])
            if ids[0] != wanted:
                raise CaseFailed(f"expected the id of {step['same_as']!r} ({wanted}), the call "
                                 f"returned {ids[0]}")
        for ref, job_id in zip(refs, ids):
            if ref:
                self.refs[ref] = job_id
        if not self.atomics:
            self.last_commit_us = started_us

    def stage_task(self, step: dict) -> str:
        """A ``conf.*`` job of a worker case, staged through its task (the module doc)."""
        task = import_string(step["type"])
        args = list(step.get("args") or [])
        options = step.get("options") or {}
        if not options and not step.get("meta"):
            return task.enqueue(*args).id
        return self.ojs.enqueue_after_commit(task.module_path, [{"args": args, "kwargs": {}}],
                                             using=self.alias, meta=step.get("meta"),
                                             **options)

    def step(self, step: dict) -> None:
        op = step["op"]
        timeout = step.get("timeout_ms", 10_000) / 1000
        if op == "begin":
            if self.atomics:
                raise CaseFailed("begin: a transaction is already open")
            self.enter()
        elif op == "savepoint":
            self.need_tx()
            self.enter()
        elif op == "release_savepoint":
            self.need_tx()
            self.atomics.pop().__exit__(None, None, None)
        elif op == "rollback_savepoint" or op == "rollback":
            self.need_tx()
            signal = _Rollback()
            self.atomics.pop().__exit__(_Rollback, signal, None)
        elif op == "commit":
            self.need_tx()
            atomic = self.atomics.pop()
            # Taken before the COMMIT: whatever the relay does because of it (a send, a
            # Retry-After wait, a row's skip_recent age) starts later, so `min_elapsed_ms`
            # holds however long the commit itself or this thread's next turn takes.
            self.last_commit_us = now_us()
            if step.get("crash_before_hook"):
                with suppressed_wakeups(self.ojs):
                    atomic.__exit__(None, None, None)
            else:
                atomic.__exit__(None, None, None)
        elif op == "enqueue_after_commit":
            self.stage(step, bulk=False)
        elif op == "enqueue_bulk":
            self.stage(step, bulk=True)
        elif op == "enqueue":
            error, job_id = None, None
            try:
                job_id = self.ojs.enqueue(step.get("type"), step.get("args"), using=self.alias,
                                          meta=step.get("meta"), **(step.get("options") or {}))
            except OJSError as exc:
                error = exc
            if not self.check_error(step, error) and step.get("ref"):
                self.refs[step["ref"]] = job_id
        elif op == "set_context":
            set_request_context(dict(step["context"]))
        elif op == "clear_context":
            clear_request_context()
        elif op == "backend_fault":
            self.backend.call("POST", "/_dev/faults", {k: v for k, v in step.items() if k != "op"})
        elif op == "backend_clear_faults":
            self.backend.call("DELETE", "/_dev/faults")
        elif op == "backend_manifest":
            self.backend.call("POST", "/_dev/manifest", {"batch_enqueue": step["batch_enqueue"]})
        elif op == "relay_start":
            self.ojs.start_relay(self.alias)
        elif op == "relay_stop":
            self.ojs.stop_relay(self.alias)
        elif op == "relay_kill":
            self.ojs.kill_relay(self.alias)
        elif op == "prune":
            self.ojs.prune(step.get("older_than", "PT0S"), using=self.alias)
        elif op == "sleep":
            time.sleep(step["ms"] / 1000)
        elif op == "dead_replay":
            self.ojs.dead_replay(step.get("tenant_id"), using=self.alias)
        elif op == "dead_purge":
            self.ojs.dead_purge(step.get("tenant_id"), using=self.alias)
        elif op == "wait_delivered":
            self.wait_delivered(step, timeout)
        elif op == "wait_outbox":
            deadline = time.monotonic() + timeout
            while True:
                try:
                    self.check_rows(step["rows"])
                    break
                except CaseFailed as why:
                    if time.monotonic() >= deadline:
                        raise CaseFailed(f"wait_outbox timed out: {why}") from None
                    time.sleep(0.02)
        elif op == "expect_backend":
            self.expect_backend(step)
        elif op == "expect_requests":
            requests = self.backend.received()["requests"]
            for kind in ("batch", "single"):
                if kind in step and requests[kind] != step[kind]:
                    raise CaseFailed(f"expected {step[kind]} {kind} requests, the backend got {requests[kind]}")
        elif op == "expect_outbox":
            self.check_rows(step.get("rows"))
            if step.get("absent"):
                rows = self.rows() if self.atomics else outbox_rows(self.alias, self.table)
                for ref in step["absent"]:
                    if self.id_of(ref) in rows:
                        raise CaseFailed(f"outbox still has a row for {ref!r}")
            if "total" in step:
                actual = outbox_count(self.alias, self.table)
                if actual != step["total"]:
                    raise CaseFailed(f"expected {step['total']} outbox rows, found {actual}")
        elif op == "race_enqueue":
            if not self.atomics or self.race is not None:
                raise CaseFailed("race_enqueue: needs an open transaction and no race running")
            self.race = Race(self, step)
        elif op == "race_join":
            self.race_join(step, timeout)
        elif op == "events_subscribe":
            self.events_subscribe(step)
        elif op == "wait_events":
            self.wait_events(step, timeout)
        elif op == "expect_events":
            self.expect_events(step)
        elif op == "worker_start":
            if self.worker is not None:
                raise CaseFailed("worker_start: a worker is running")
            self.worker = CaseWorker(step)
            self.worker.wait_ready()
        elif op == "worker_stop":
            if self.worker is None:
                raise CaseFailed("worker_stop: no worker is running")
            worker, self.worker = self.worker, None
            worker.stop(step.get("deadline_ms", 3000) / 1000)
        elif op == "wait_jobs":
            self.wait_jobs(step, timeout)
        else:
            raise CaseFailed(f"unknown op {op!r}: this runner is out of date")

    def enter(self) -> None:
        atomic = transaction.atomic(using=self.alias)
        atomic.__enter__()
        self.atomics.append(atomic)

    def need_tx(self) -> None:
        if not self.atomics:
            raise CaseFailed("no transaction is open")

    def wait_jobs(self, step: dict, timeout: float) -> None:
        """Until the backend's view of each job matches (README, "Workers")."""
        wanted = {ref: (self.id_of(ref), fields) for ref, fields in step["jobs"].items()}
        deadline = time.monotonic() + timeout
        while True:
            mismatches = []
            for ref, (job_id, fields) in wanted.items():
                why = job_mismatch(self.backend, job_id, fields)
                if why:
                    mismatches.append(f"{ref!r}: {why}")
            if not mismatches:
                return
            if self.worker is not None and self.worker.crash is not None:
                raise CaseFailed(f"the worker failed: {self.worker.crash!r}")
            if time.monotonic() >= deadline:
                raise CaseFailed(f"wait_jobs timed out: {'; '.join(mismatches)}")
            time.sleep(0.02)

    def race_join(self, step: dict, timeout: float) -> None:
        race = self.race
        if race is None:
            raise CaseFailed("race_join: no race running")
        if not race.join(timeout):
            # Left in self.race: the case's cleanup waits for it once the main transaction
            # is rolled back.
            raise CaseFailed(f"race_join: the racing transaction did not end within {timeout}s")
        self.race = None
        if race.crash is not None:
            raise CaseFailed(f"race_enqueue: the second transaction failed: "
                             f"{type(race.crash).__name__}: {race.crash}")
        if not self.check_error(step, race.error) and race.ref:
            self.refs[race.ref] = race.job_id

    def wait_delivered(self, step: dict, timeout: float) -> None:
        wanted = [(ref, self.id_of(ref)) for ref in step["refs"]]
        deadline = time.monotonic() + timeout
        while True:
            stored = {job["id"]: job["received_at_us"] for job in self.backend.jobs()}
            missing = [ref for ref, job_id in wanted if job_id not in stored]
            if not missing:
                if "min_elapsed_ms" in step:
                    last = max(stored[job_id] for _, job_id in wanted)
                    elapsed_ms = (last - self.last_commit_us) // 1000
                    if elapsed_ms < step["min_elapsed_ms"]:
                        raise CaseFailed(f"delivered {elapsed_ms} ms after commit, expected at "
                                         f"least {step['min_elapsed_ms']} ms")
                return
            if time.monotonic() >= deadline:
                status = self.ojs.status(using=self.alias)
                host_view = outbox_rows(self.alias, self.table)
                raise CaseFailed(f"not delivered within {timeout}s: {missing}; outbox {status}; "
                                 f"rows seen by the application: {host_view}")
            time.sleep(0.01)

    # -- events (the relay's event stream) ----------------------------------------------

    def subscriber(self, name: str) -> Subscriber:
        if name not in self.subscribers:
            raise CaseFailed(f"subscription {name!r} was never opened")
        return self.subscribers[name]

    def events_subscribe(self, step: dict) -> None:
        name = step["subscription"]
        if name in self.subscribers:
            raise CaseFailed(f"subscription {name!r} is opened twice")
        last_event_id = None
        if "last_event_id" in step:
            wanted = step["last_event_id"]
            job_id = self.id_of(wanted["ref"])
            found = [event["id"] for event in self.subscriber(wanted["subscription"]).events
                     if event.get("subject") == job_id and event.get("type") == wanted["type"]]
            if not found:
                raise CaseFailed(f"subscription {wanted['subscription']!r} has no "
                                 f"{wanted['type']} event about {wanted['ref']!r}")
            last_event_id = found[0]
        try:
            frames = self.ojs.relay_events(
                types=step.get("types"), queues=step.get("queues"),
                job_types=step.get("job_types"), tenant=step.get("tenant"),
                last_event_id=last_event_id, using=self.alias)
        except OJSError as exc:
            raise CaseFailed(f"relay_events failed: {exc.code}: {exc}") from None
        self.subscribers[name] = Subscriber(self, name, frames)

    def event_matches(self, event: dict, entry: dict) -> bool:
        if event.get("type") != entry["type"]:
            return False
        if "ref" in entry and event.get("subject") != self.id_of(entry["ref"]):
            return False
        return is_subset(entry.get("data") or {}, event.get("data") or {})

    def wait_events(self, step: dict, timeout: float) -> None:
        subscriber = self.subscriber(step["subscription"])
        expected = step["events"]
        refs = {self.id_of(entry["ref"]) for entry in expected if "ref" in entry}
        types = {entry["type"] for entry in expected if "ref" not in entry}
        deadline = time.monotonic() + timeout
        while True:
            subscriber.drain()
            relevant = [event for event in subscriber.events
                        if event.get("subject") in refs or event.get("type") in types]
            for index, event in enumerate(relevant):
                if index >= len(expected):
                    raise CaseFailed(f"more relevant events than the {len(expected)} listed: "
                                     f"{[(e.get('type'), e.get('subject')) for e in relevant]}")
                if not self.event_matches(event, expected[index]):
                    raise CaseFailed(f"event {index} is {event}, expected {expected[index]}")
            if len(relevant) == len(expected):
                return
            if subscriber.ended:
                raise CaseFailed(f"subscription {subscriber.name!r} ended after "
                                 f"{len(relevant)} of {len(expected)} events")
            if time.monotonic() >= deadline:
                raise CaseFailed(f"wait_events timed out after {len(relevant)} of "
                                 f"{len(expected)} events: {relevant}")
            subscriber.read(20)

    def expect_events(self, step: dict) -> None:
        subscriber = self.subscriber(step["subscription"])
        subscriber.drain()
        for ref in step.get("absent", []):
            job_id = self.id_of(ref)
            about = [event for event in subscriber.events if event.get("subject") == job_id]
            if about:
                raise CaseFailed(f"subscription {subscriber.name!r} has events about {ref!r}: "
                                 f"{about}")
        if "total" in step and len(subscriber.events) != step["total"]:
            raise CaseFailed(f"subscription {subscriber.name!r} received "
                             f"{len(subscriber.events)} events, expected {step['total']}: "
                             f"{[(e.get('type'), e.get('subject')) for e in subscriber.events]}")

    def expect_backend(self, step: dict) -> None:
        received = self.backend.received()
        jobs = received["jobs"]
        position = {job["id"]: index for index, job in enumerate(jobs)}
        expected = [(ref, self.id_of(ref)) for ref in step.get("received", [])]
        for ref, job_id in expected:
            if job_id not in position:
                raise CaseFailed(f"the backend did not receive {ref!r}")
        if step.get("order") == "exact":
            for (ref_a, id_a), (ref_b, id_b) in zip(expected, expected[1:]):
                if position[id_a] > position[id_b]:
                    raise CaseFailed(f"{ref_b!r} arrived before {ref_a!r}")
        for ref in step.get("absent", []):
            if self.id_of(ref) in position:
                raise CaseFailed(f"the backend received {ref!r}, which must not be sent")
        if "total" in step and len(jobs) != step["total"]:
            raise CaseFailed(f"the backend stored {len(jobs)} jobs, expected {step['total']}")
        deliveries = received["deliveries"]
        for ref, minimum in (step.get("deliveries_at_least") or {}).items():
            n = deliveries.get(self.id_of(ref), 0)
            if n < minimum:
                raise CaseFailed(f"{ref!r} was delivered {n} times, expected at least {minimum}")
        for ref, exactly in (step.get("deliveries_exactly") or {}).items():
            n = deliveries.get(self.id_of(ref), 0)
            if n != exactly:
                raise CaseFailed(f"{ref!r} was delivered {n} times, expected {exactly}")
        by_id = {job["id"]: job for job in jobs}
        for ref in step.get("encrypted", []):
            job = by_id.get(self.id_of(ref))
            if job is None:
                raise CaseFailed(f"{ref!r} not stored")
            why = not_encrypted(job)
            if why:
                raise CaseFailed(f"{ref!r} is not stored encrypted: {why}; stored {job}")
        for ref, fields in (step.get("jobs") or {}).items():
            job = by_id.get(self.id_of(ref))
            if job is None:
                raise CaseFailed(f"{ref!r} not stored")
            fields = dict(fields)
            meta_absent = fields.pop("meta_absent", [])
            if not is_subset(fields, job):
                raise CaseFailed(f"{ref!r}: expected {fields}, stored {job}")
            for key in meta_absent:
                if key in (job.get("meta") or {}):
                    raise CaseFailed(f"{ref!r}: meta must not have {key!r}, stored {job['meta']}")

    # -- a whole case ------------------------------------------------------------------

    def execute(self) -> None:
        if not self.worker_case:
            self.run_case()
            return
        # The case's adapter, on the case's database, is the task backend the suite handlers
        # stage through and the worker fetches with.
        setting = {"default": {"BACKEND": "ojs_adapter_django.tasks.OJSBackend", "QUEUES": [],
                               "OPTIONS": {"DATABASE": self.alias, "ADAPTER": self.ojs}}}
        with override_settings(TASKS=setting):
            self.run_case()

    def run_case(self) -> None:
        self.backend.reset()
        clear_request_context()
        drop_table(self.alias, self.table)
        self.ojs.create_outbox_table(self.alias)
        if self.case.get("relay") != "stopped":
            self.ojs.start_relay(self.alias)
        try:
            for index, step in enumerate(self.case["steps"]):
                if step["op"] not in KNOWN_OPS:
                    raise CaseFailed(f"step {index}: unknown op {step['op']!r}")
                try:
                    self.step(step)
                except CaseFailed as why:
                    raise CaseFailed(f"step {index} ({step['op']}): {why}") from None
        finally:
            while self.atomics:
                self.atomics.pop().__exit__(_Rollback, _Rollback(), None)
            # A race left running (a case that failed before race_join): the rollback above
            # unblocked it; it ends, closing its connection, before the next case starts.
            race, self.race = self.race, None
            worker, self.worker = self.worker, None
            try:
                if race is not None:
                    race.cleanup()
                if worker is not None:
                    worker.stop(CaseWorker.CLEANUP_DEADLINE_S)
            finally:
                clear_request_context()
                self.subscribers.clear()
                try:
                    self.backend.call("DELETE", "/_dev/faults")
                finally:
                    self.ojs.reset()


class CaseWorker:
    """``worker_start``'s worker: ``ojs_adapter_django.worker.Worker`` on the ``TASKS["default"]``
    backend (the case's adapter), queue ``default``, the step's ``concurrency`` and
    ``visibility_timeout_ms`` (else the core's defaults), its ``run`` in a thread of its own."""

    #: The deadline of the stop of a worker a case left running.
    CLEANUP_DEADLINE_S = 3.0
    #: How long worker_start waits for the slots to wait for jobs (a busy machine is slow).
    START_TIMEOUT_S = 30.0

    def __init__(self, step: dict) -> None:
        from ojs_adapter_django.worker import Worker

        visibility = step.get("visibility_timeout_ms")
        self.worker = Worker("default", queues=["default"], concurrency=step.get("concurrency"),
                             visibility_timeout=None if visibility is None else visibility / 1000)
        self.crash: Optional[BaseException] = None
        self.thread = threading.Thread(target=self.body, name="case-worker", daemon=True)
        self.thread.start()

    def wait_ready(self) -> None:
        """Until every slot waits for a job: a stop right after the start then finds a fetched
        job in a slot, not buffered (which it would give back unrun)."""
        if not self.worker.ready.wait(self.START_TIMEOUT_S):
            raise CaseFailed(f"the worker did not start within {self.START_TIMEOUT_S} s")
        if self.crash is not None:
            raise CaseFailed(f"the worker failed to start: {self.crash!r}")

    def body(self) -> None:
        try:
            self.worker.run()
        except BaseException as exc:  # reported by wait_jobs / worker_stop
            self.crash = exc

    def stop(self, deadline: float) -> None:
        """Graceful stop with ``deadline`` (seconds); returns when the worker has stopped."""
        self.worker.stop(deadline)
        self.thread.join(deadline + 30)
        if self.thread.is_alive():
            raise CaseFailed(f"the worker did not stop within {deadline} s (+30 s)")
        if self.crash is not None:
            raise CaseFailed(f"the worker failed: {self.crash!r}")


def job_mismatch(backend: Any, job_id: str, fields: dict) -> Optional[str]:
    """Why the backend's view of a job (``GET /ojs/v1/jobs/{id}``) does not match ``fields``
    (``state``, ``attempt``, ``result``, ``error``), or None when it does."""
    try:
        job = backend.call("GET", f"/ojs/v1/jobs/{job_id}")["job"]
    except OSError as exc:  # a 404 before the job arrives, too
        return f"not readable yet ({exc})"
    if "state" in fields:
        allowed = fields["state"] if isinstance(fields["state"], list) else [fields["state"]]
        if job.get("state") not in allowed:
            return f"state {job.get('state')!r}, expected {allowed}"
    if "attempt" in fields and job.get("attempt") != fields["attempt"]:
        return f"attempt {job.get('attempt')!r}, expected {fields['attempt']}"
    if "result" in fields and not json_equal(fields["result"], job.get("result")):
        return f"result {job.get('result')!r}, expected {fields['result']!r}"
    if "error" in fields:
        error = job.get("error") or {}
        expected = fields["error"]
        if "type" in expected and error.get("type") != expected["type"]:
            return f"error {error!r}, expected type {expected['type']!r}"
        if expected.get("message_contains", "") not in str(error.get("message", "")):
            return f"error {error!r}, expected a message containing {expected['message_contains']!r}"
    return None


def json_equal(expected: Any, actual: Any) -> bool:
    """Equality as JSON: numbers by value (not bools), objects regardless of key order."""
    if isinstance(expected, dict):
        return isinstance(actual, dict) and expected.keys() == actual.keys() and all(
            json_equal(value, actual[key]) for key, value in expected.items())
    if isinstance(expected, list):
        return isinstance(actual, list) and len(expected) == len(actual) and all(
            json_equal(e, a) for e, a in zip(expected, actual))
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        return isinstance(actual, (int, float)) and not isinstance(actual, bool) and expected == actual
    return expected == actual


def not_encrypted(job: dict) -> Optional[str]:
    """Why a stored job is not the encryption extension's form (None when it is): ``args`` one
    envelope ``{"ojs_encoded": true, "encoding": "binary/encrypted", "data": text}``, meta with
    ``ojs.codec.encodings`` ``["binary/encrypted"]`` and a text ``ojs.codec.key_id``."""
    args = job.get("args")
    if not (isinstance(args, list) and len(args) == 1 and isinstance(args[0], dict)):
        return "args is not a one-element array holding an object"
    envelope = args[0]
    if envelope.get("ojs_encoded") is not True:
        return "args[0].ojs_encoded is not true"
    if envelope.get("encoding") != "binary/encrypted":
        return "args[0].encoding is not \"binary/encrypted\""
    if not isinstance(envelope.get("data"), str):
        return "args[0].data is not a string"
    meta = job.get("meta") or {}
    if meta.get("ojs.codec.encodings") != ["binary/encrypted"]:
        return "meta[\"ojs.codec.encodings\"] is not [\"binary/encrypted\"]"
    if not isinstance(meta.get("ojs.codec.key_id"), str):
        return "meta[\"ojs.codec.key_id\"] is not a string"
    return None


def is_subset(expected: Any, actual: Any) -> bool:
    if isinstance(expected, dict):
        return isinstance(actual, dict) and all(
            key in actual and is_subset(value, actual[key]) for key, value in expected.items()
        )
    if isinstance(expected, list):
        return isinstance(actual, list) and len(expected) == len(actual) and all(
            is_subset(e, a) for e, a in zip(expected, actual)
        )
    if isinstance(expected, (int, float)) and not isinstance(expected, bool):
        return isinstance(actual, (int, float)) and not isinstance(actual, bool) and expected == actual
    return expected == actual


@pytest.mark.django_db(transaction=True, databases=["default", "pg", "my"])
@pytest.mark.parametrize("database", list(DATABASES))
@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_case(case: dict, database: str, backend: Any) -> None:
    key = (case["id"], database)
    reason = SKIPS.get(f"{case['id']} [{database}]") or SKIPS.get(case["id"])
    if reason:
        RESULTS[key] = f"SKIP ({reason})"
        pytest.skip(reason)
    try:
        Run(case, DATABASES[database], backend).execute()
    except BaseException as exc:
        RESULTS[key] = f"FAIL ({case['title']}): {exc}"
        raise
    RESULTS[key] = "PASS"


def test_suite_defaults_pass_event_retention_through() -> None:
    """The schema's ``relay.event_retention`` default (null: tier 2 off, as in the product)
    reaches the core as null, and a case's value replaces it."""
    defaults = suite_defaults()
    assert "event_retention" in defaults["relay"] and defaults["relay"]["event_retention"] is None
    replay = next(case for case in CASES if case["id"] == "RELAY-events-replay-after-last-event-id")
    merged = merge(suite_defaults(), replay["config"])
    assert merged["relay"]["event_retention"] == "PT1H"
    assert merged["relay"]["max_attempts"] == defaults["relay"]["max_attempts"]
