"""The public API: ``ojs.enqueue``, ``ojs.enqueue_after_commit``, ``ojs.enqueue_bulk`` and the
relay/admin calls, on top of the native core bridge (``_native.Bridge``).

Staging: the core validates the jobs and returns its INSERT; this module runs it on
``connections[using].cursor()``, inside whatever transaction Django has open (in a savepoint of
its own when the core says the statements need one), and registers the wake-up with
``transaction.on_commit``, so Django's own savepoint rules apply: a rolled-back savepoint drops
its rows (the database) and its wake-ups (Django), a released one relays nothing until the
outermost commit, and in autocommit the wake-up runs at once.

One bridge exists per database alias, because the relay reads the outbox of that database
through its own connection. With ``auto_start`` (the default) a serving process starts the
default alias's relay when Django is ready (``apps.py``, ``OJS.start_at_boot``), and any
in-process relay starts in its process on first use (``Bridge.ensure_relay``: once per process,
again after a fork).
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
import uuid
from datetime import datetime, timedelta, timezone
from typing import Any, Iterable, Mapping, Optional, Sequence

from django.core.exceptions import ImproperlyConfigured
from django.db import DEFAULT_DB_ALIAS, connections, transaction
from django.db import DatabaseError as DjangoDatabaseError
from django.db.transaction import TransactionManagementError

from . import _native, events, relay_log
from .conf import config_json
from .context import context_json
from .errors import ConfigurationError, OJSError, decode, from_native
from .json import encode, jobs_json, part_json

logger = logging.getLogger("ojs_adapter_django")

#: Django's cursor takes ``%s`` on every backend (its SQLite wrapper rewrites them to ``?``).
PLACEHOLDER = "percent"

_SETTINGS = object()

#: How users of the settings-backed ``ojs`` set the backend URL (named by the core's messages).
URL_SETTING = 'OJS_CONFIG["ojs_url"]'
#: The same for an adapter built with an explicit configuration.
EXPLICIT_URL_SETTING = 'the "ojs_url" key of OJS(config)'


def _staged_job(text: str) -> list[Optional[str]]:
    """A ``StagedJob::encode`` text without its SQL: the INSERT's six parameters (``job_id``,
    ``type``, ``args``, ``options``, ``meta``, ``tenant``; five fields mean no tenant)."""
    params: list[Optional[str]] = text.split("\0")  # type: ignore[assignment]
    if len(params) == 5:
        params.append(None)
    return params


def _bulk_placeholder(connection: Any) -> str:
    """The placeholder style of a bulk's statements. Django's SQLite cursor rewrites ``%s`` to
    ``?`` with a regular expression over the whole statement on every execute (0.4 ms for a
    1,000-row INSERT); it leaves ``?`` as it is, so a bulk on SQLite asks the core for ``?``,
    unless the statement is logged (DEBUG) or goes through an execute wrapper, which may format
    it with ``%s``."""
    if (connection.vendor == "sqlite" and not connection.queries_logged
            and not connection.execute_wrappers):
        return "question"
    return PLACEHOLDER


def _staging_cursor(connection: Any) -> Any:
    """Django's cursor, kept on the connection for the staging INSERTs of a transaction:
    opening one costs more than a small INSERT. Used only inside atomic(), where the connection
    cannot be swapped under it; a new connection, or query logging (DEBUG), gets a new one."""
    if connection.queries_logged:
        return connection.cursor()
    cached = connection.__dict__.get("_ojs_staging_cursor")
    if cached is not None and cached[0] is connection.connection:
        return cached[1]
    cursor = connection.cursor()
    connection._ojs_staging_cursor = (connection.connection, cursor)
    return cursor


def _execute(cursor: Any, bridge: _native.Bridge,
             statements: Sequence[tuple[str, list, Optional[Mapping[str, Any]]]],
             job_ids: list[str]) -> None:
    """Runs the statements on ``cursor``. Any may return rows (PostgreSQL's advisory lock and
    NOTIFY are SELECTs): only those of a statement with ``returns`` are read, and the core's
    ``held_outcome`` decides what they mean; this module never compares ids."""
    for sql, params, returns in statements:
        cursor.execute(sql, params)
        if returns is not None:
            row = cursor.fetchone()
            returned = None if row is None or row[0] is None else str(row[0])
            try:
                job_ids[returns["job"]] = bridge.held_outcome(returns["token"], returned)
            except _native.NativeError as native:
                raise from_native(native) from None


class _Wake:
    """The after-commit wake-up of the jobs staged one after another at one savepoint level."""

    __slots__ = ("ojs", "bridge", "job_ids")

    def __init__(self, ojs: "OJS", bridge: _native.Bridge, job_ids: list[str]) -> None:
        self.ojs = ojs
        self.bridge = bridge
        self.job_ids = job_ids

    def __call__(self) -> None:
        self.ojs._wake(self.bridge, self.job_ids)


def _wake_at_commit(ojs: "OJS", connection: Any, bridge: _native.Bridge,
                    job_ids: list[str]) -> None:
    """``on_commit`` for these ids. When the last callback of the transaction is our wake-up,
    registered under the same savepoints, the ids join it: Django would run or drop a new
    callback exactly with it, and registering one costs as much as the INSERT's overhead."""
    hooks = connection.run_on_commit
    if hooks:
        last = hooks[-1]
        wake = last[1]
        if (wake.__class__ is _Wake and wake.bridge is bridge
                and last[0] == set(connection.savepoint_ids)):
            wake.job_ids.extend(job_ids)
            return
    connection.on_commit(_Wake(ojs, bridge, list(job_ids)))


def _database_error(exc: DjangoDatabaseError, doing: str) -> OJSError:
    """A failure of Django's cursor while ``doing`` something, with the core's code
    (OUTBOX_TABLE_MISSING or DATABASE), from the driver's SQLSTATE and message. MySQL's drivers
    (mysqlclient, PyMySQL) give no SQLSTATE and hold the message as the second of the
    exception's ``args``, ``(errno, message)``."""
    cause = exc.__cause__
    sqlstate = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
    message = str(exc)
    args = getattr(cause, "args", ())
    if len(args) == 2 and isinstance(args[0], int) and isinstance(args[1], str):
        message = args[1]
    return decode(_native.database_error(sqlstate, message, f"{doing} failed: {exc}"))


#: ``created_at_ms`` (milliseconds since the epoch) as an aware UTC datetime, exactly.
_EPOCH = datetime(1970, 1, 1, tzinfo=timezone.utc)


def _not_started(alias: str, native: _native.NativeError) -> None:
    """An in-process relay that ``auto_start`` could not start: a bad configuration raises;
    anything else is logged, and the next enqueue tries again (the rows are durable either way:
    the relay started by a later enqueue, or by another process, sends them)."""
    error = from_native(native)
    if isinstance(error, ConfigurationError):
        raise error from None
    logger.error("ojs: the in-process relay for %r did not start (retried on the next "
                 "enqueue): %s", alias, error)


def _query_list(value: Any, field_name: str) -> Optional[str]:
    """A filter of the relay's stream in the request's encoding: the query parameter's
    comma-separated text as it is, or a list of names joined with commas."""
    if value is None or isinstance(value, str):
        return value
    return ",".join(events.names(value, field_name) or [])


def _job(job_type: Any, args: Any, options: Mapping[str, Any], meta: Any) -> dict:
    job = {"type": job_type, "args": args}
    if options:
        job["options"] = dict(options)
    if meta is not None:
        job["meta"] = meta
    return job


class OJS:
    """A configured adapter. ``ojs`` (module level) reads ``settings.OJS_CONFIG``; tests and
    multi-tenant setups may build their own with an explicit configuration dict."""

    def __init__(self, config: Any = _SETTINGS, *, auto_start: bool = True) -> None:
        """``config``: the spec §5.2 dict (default: ``settings.OJS_CONFIG``).
        ``auto_start``: True (default): the in-process relay starts by itself, when a serving
        process is ready (``start_at_boot``) or else on the first enqueue, and again in a
        forked child; False: only when you call ``start_relay()``."""
        self._config = config
        self._auto_start = auto_start
        self._lock = threading.Lock()
        self._bridges: dict[str, _native.Bridge] = {}
        #: The aliases whose in-process relay starts by itself (auto_start, relay in_process).
        self._auto_aliases: set[str] = set()
        #: The single-row INSERT of each alias, asked of the core once (``StagedJob::encode``).
        self._insert_sql: dict[str, str] = {}
        #: The SELECT of one row by job id of each alias, asked of the core once.
        self._select_job_sql: dict[str, str] = {}
        self._atexit_registered = False
        self._fork_hook_registered = False

    # -- configuration -------------------------------------------------------------------

    def _raw_config(self) -> Any:
        if self._config is _SETTINGS:
            from django.conf import settings

            return getattr(settings, "OJS_CONFIG", None)
        return self._config

    def bridge(self, using: Optional[str] = None) -> _native.Bridge:
        """The core bridge of a database alias (built on first use)."""
        alias = using or DEFAULT_DB_ALIAS
        bridge = self._bridges.get(alias)
        if bridge is not None:
            return bridge
        with self._lock:
            bridge = self._bridges.get(alias)
            if bridge is None:
                bridge = self._build(alias)
                if bridge.notice:
                    logger.warning("%s", bridge.notice)
                if bridge.relay_in_process:
                    if self._auto_start:
                        self._auto_aliases.add(alias)
                    if not self._atexit_registered:
                        self._atexit_registered = True
                        atexit.register(self.stop_relay)
                self._bridges[alias] = bridge
            return bridge

    def _build(self, alias: str, *, needs_backend: bool = True) -> _native.Bridge:
        """A bridge of an alias, parsed as this project runs: development mode is
        ``settings.DEBUG`` (the core's rule then gives a missing URL its development default)."""
        from django.conf import settings

        text = config_json(self._raw_config(), connections[alias].settings_dict, alias)
        setting = URL_SETTING if self._config is _SETTINGS else EXPLICIT_URL_SETTING
        try:
            return _native.Bridge(text, bool(getattr(settings, "DEBUG", False)), setting,
                                  needs_backend)
        except _native.NativeError as native:
            raise from_native(native) from None

    def check(self, using: Optional[str] = None) -> None:
        """Raises ConfigurationError (an ImproperlyConfigured) when the configuration is bad."""
        self.bridge(using)

    def reset(self) -> None:
        """Stops this process's relays, closes their database connections and forgets the
        bridges (settings changed)."""
        with self._lock:
            bridges = list(self._bridges.values())
        for bridge in bridges:
            bridge.close()
        relay_log.forward()
        with self._lock:
            self._bridges.clear()
            self._auto_aliases.clear()
            self._insert_sql.clear()
            self._select_job_sql.clear()

    # -- relay lifecycle (FA-R003) -------------------------------------------------------

    def start_relay(self, using: Optional[str] = None) -> None:
        """Starts the in-process relay of an alias in this process (a no-op in external mode).
        Safe to call again, also after a fork."""
        bridge = self.bridge(using)
        if bridge.relay_in_process:
            self._ensure_relay(bridge)

    @staticmethod
    def _ensure_relay(bridge: _native.Bridge) -> None:
        """The relay of ``bridge`` in this process, started unless it runs (one atomic load
        then), with its log records going to logging ("ojs_adapter_django.relay")."""
        relay_log.start()
        try:
            bridge.ensure_relay()
        except _native.NativeError as native:
            raise from_native(native) from None

    def start_at_boot(self) -> None:
        """Starts the default alias's in-process relay now, and again in every child process
        forked from this one (pre-fork servers: gunicorn ``--preload``, uWSGI), so no request
        pays for the start. What ``AppConfig.ready`` calls in a serving process. A bad
        configuration raises (the server fails to start); a relay that cannot start is logged
        and retried on the next enqueue. Nothing happens with ``auto_start=False``."""
        if not self._auto_start:
            return
        self._start_by_itself(DEFAULT_DB_ALIAS)
        if not self._fork_hook_registered:
            self._fork_hook_registered = True
            os.register_at_fork(after_in_child=self._start_after_fork)

    def _start_after_fork(self) -> None:
        try:
            self._start_by_itself(DEFAULT_DB_ALIAS)
        except Exception as exc:  # a fork hook must not raise
            logger.error("ojs: the in-process relay did not start after fork: %s", exc)

    def _start_by_itself(self, alias: str) -> _native.Bridge:
        """``auto_start``: the relay of ``alias`` runs in this process, or the reason it does
        not is logged (a bad configuration raises). Returns the alias's bridge."""
        bridge = self.bridge(alias)
        if alias not in self._auto_aliases:
            return bridge
        relay_log.start()
        try:
            bridge.ensure_relay()
        except _native.NativeError as native:
            _not_started(alias, native)
        return bridge

    def stop_relay(self, using: Optional[str] = None) -> None:
        """Graceful stop of this process's relay(s): flushes what was notified, releases leases.
        The relay's last log records (those of the flush) are logged before it returns."""
        aliases = [using or DEFAULT_DB_ALIAS] if using else list(self._bridges)
        for alias in aliases:
            bridge = self._bridges.get(alias)
            if bridge is not None:
                bridge.stop_relay()
        relay_log.forward()

    def kill_relay(self, using: Optional[str] = None) -> None:
        """Abrupt stop, as a crash would: no flush, leases stay until they expire. For tests of
        crash recovery; applications use ``stop_relay``."""
        bridge = self._bridges.get(using or DEFAULT_DB_ALIAS)
        if bridge is not None:
            bridge.kill_relay()

    # -- enqueue (spec §5.1) -------------------------------------------------------------

    def enqueue(self, type: str, args: Any = None, *, meta: Any = None,
                using: Optional[str] = None, **options: Any) -> str:
        """Sends one job to the backend now, outside any transaction; returns its id.
        Raises BackendUnavailableError / BackendRejectedError when the backend does not take it."""
        bridge = self.bridge(using)
        job_json = jobs_json([_job(type, args, options, meta)])[1:-1]
        try:
            return bridge.enqueue_now(job_json, context_json())
        except _native.NativeError as native:
            raise from_native(native) from None

    def enqueue_after_commit(self, type: str, args: Any = None, *, using: Optional[str] = None,
                             meta: Any = None, **options: Any) -> str:
        """Stages one job in the current transaction of ``using``; it is sent after the
        outermost commit (at once in autocommit). Returns the job id."""
        if type.__class__ is not str:
            # The core words the error for a type that is not a string.
            return self._stage([_job(type, args, options, meta)], using)[0]
        alias = using or DEFAULT_DB_ALIAS
        bridge = self._bridges.get(alias) or self.bridge(alias)
        connection = connections[alias]
        args_json = part_json(args, "args")
        options_json = part_json(options, "options") if options else None
        meta_json = None if meta is None else part_json(meta, "meta")
        sql = self._insert_sql.get(alias)
        try:
            staged = bridge.stage_job(connection.vendor, PLACEHOLDER, type, args_json,
                                      options_json, meta_json, context_json(), sql is None)
        except _native.NativeError as native:
            raise from_native(native) from None
        if staged[:1] == "\0":
            # A keyed job (ordering_key, unique): its own statements, run as a bulk of one. Its
            # SQL is never the per-job INSERT, so nothing is cached.
            return self._run_staged(connection, alias, bridge, json.loads(staged[1:]))[0]
        if sql is None:
            sql, staged = staged.split("\0", 1)
            self._insert_sql[alias] = sql
        params = _staged_job(staged)
        job_id: str = params[0]  # type: ignore[assignment]
        self._write(connection, alias, bridge, ((sql, params, None),), [job_id], False)
        return job_id

    def enqueue_bulk(self, jobs: Iterable[Mapping[str, Any]], *,
                     using: Optional[str] = None) -> list[str]:
        """Stages several jobs (dicts with ``type``, ``args``, optional ``options``, ``meta``),
        all or none; after-commit semantics. Returns the ids in order."""
        jobs = list(jobs)
        if not jobs:
            return []
        return self._stage(jobs, using)

    def _stage(self, jobs: Sequence[Mapping[str, Any]], using: Optional[str]) -> list[str]:
        alias = using or DEFAULT_DB_ALIAS
        bridge = self.bridge(alias)
        connection = connections[alias]
        try:
            staged = json.loads(bridge.stage(connection.vendor, _bulk_placeholder(connection),
                                             jobs_json(jobs), context_json()))
        except _native.NativeError as native:
            raise from_native(native) from None
        return self._run_staged(connection, alias, bridge, staged)

    def _run_staged(self, connection: Any, alias: str, bridge: _native.Bridge,
                    staged: Mapping[str, Any]) -> list[str]:
        """Runs a ``Staged`` (decoded ``Staged::to_json``) and returns the ids to report: the
        staged ids, where a unique job's statement may have named another (``held_outcome``)."""
        statements = [(statement["sql"], statement["params"], statement.get("returns"))
                      for statement in staged["statements"]]
        job_ids = list(staged["job_ids"])
        self._write(connection, alias, bridge, statements, job_ids, staged["needs_savepoint"])
        return job_ids

    def _write(self, connection: Any, alias: str, bridge: _native.Bridge,
               statements: Sequence[tuple[str, list, Optional[Mapping[str, Any]]]],
               job_ids: list[str], needs_savepoint: bool) -> None:
        """Runs the core's statements on Django's connection, in a savepoint of their own when
        the core says so, and arranges the wake-up: at the outermost commit inside atomic(), at
        once in autocommit. A statement with ``returns`` (a unique job's) is a query: the core
        says, from the first column of its first row, which id the call reports for job
        ``returns["job"]`` (written into ``job_ids``), or raises DuplicateJobError (in a
        savepoint, rolled back with it: the bulk stages nothing)."""
        in_atomic = connection.in_atomic_block
        if not in_atomic and not connection.get_autocommit():
            raise TransactionManagementError(
                "ojs: enqueue_after_commit needs transaction.atomic() or autocommit; "
                "manual transaction management has no commit hook"
            )
        if alias in self._auto_aliases:
            # One atomic load in the core once the relay runs in this process (inlined: this
            # is every enqueue's path).
            relay_log.start()
            try:
                bridge.ensure_relay()
            except _native.NativeError as native:
                _not_started(alias, native)
        try:
            if needs_savepoint:
                with transaction.atomic(using=alias), connection.cursor() as cursor:
                    _execute(cursor, bridge, statements, job_ids)
            elif in_atomic:
                _execute(_staging_cursor(connection), bridge, statements, job_ids)
            else:
                with connection.cursor() as cursor:
                    _execute(cursor, bridge, statements, job_ids)
        except DjangoDatabaseError as exc:
            raise _database_error(exc, "staging the outbox rows") from exc
        if in_atomic:
            _wake_at_commit(self, connection, bridge, job_ids)
        else:
            self._wake(bridge, job_ids)

    def _wake(self, bridge: _native.Bridge, job_ids: list[str]) -> None:
        bridge.notify_committed("\n".join(job_ids))

    # -- administration ------------------------------------------------------------------

    def _call(self, using: Optional[str], method: str, *args: Any) -> Any:
        try:
            return getattr(self.bridge(using), method)(*args)
        except _native.NativeError as native:
            raise from_native(native) from None

    def _ddl(self, alias: str, method: str, vendor: str) -> Any:
        """The core's DDL for an alias: a migration needs no backend, so no backend URL."""
        bridge = self._bridges.get(alias) or self._build(alias, needs_backend=False)
        try:
            return getattr(bridge, method)(vendor)
        except _native.NativeError as native:
            raise from_native(native) from None

    def create_outbox_table(self, using: Optional[str] = None, *, connection: Any = None) -> None:
        """Creates the outbox table with the core's DDL through Django's connection of ``using``
        (what the migration runs)."""
        alias = using or DEFAULT_DB_ALIAS
        connection = connection or connections[alias]
        statements = self._ddl(alias, "create_table_sql", connection.vendor)
        with connection.cursor() as cursor:
            for sql in statements:
                cursor.execute(sql)

    def drop_outbox_table(self, using: Optional[str] = None, *, connection: Any = None) -> None:
        """Drops the outbox table through Django's connection (the migration's reverse step)."""
        alias = using or DEFAULT_DB_ALIAS
        connection = connection or connections[alias]
        sql = self._ddl(alias, "drop_table_sql", connection.vendor)
        with connection.cursor() as cursor:
            cursor.execute(sql)

    def metrics(self, using: Optional[str] = None) -> Optional[dict]:
        """The in-process relay's counters, or None when no relay runs in this process."""
        return json.loads(self._call(using, "metrics_json"))

    def status(self, using: Optional[str] = None) -> dict:
        return json.loads(self._call(using, "status_json"))

    def dead_list(self, tenant: Optional[str] = None, limit: Optional[int] = None, *,
                  using: Optional[str] = None) -> list[dict]:
        return json.loads(self._call(using, "dead_list_json", tenant, limit))

    def dead_replay(self, tenant: Optional[str] = None, *, using: Optional[str] = None) -> int:
        return self._call(using, "dead_replay", tenant)

    def dead_purge(self, tenant: Optional[str] = None, *, using: Optional[str] = None) -> int:
        return self._call(using, "dead_purge", tenant)

    def prune(self, older_than: str, *, using: Optional[str] = None) -> int:
        """Deletes sent rows older than an ISO-8601 duration (``"PT24H"``); returns how many."""
        return self._call(using, "prune", older_than)

    def outbox_rows(self, job_ids: Sequence[str], *, using: Optional[str] = None) -> dict:
        """Committed state of these jobs' rows: ``{job_id: {status, attempts, error}}``."""
        return json.loads(self._call(using, "rows_json", "\n".join(job_ids)))

    def outbox_job(self, job_id: str, *, using: Optional[str] = None) -> Optional[dict]:
        """The outbox row of ``job_id`` as Django's connection of ``using`` sees it, so inside
        ``atomic()`` also a row the open transaction staged (a rolled-back one is gone): ``{"type",
        "args" (decoded; encrypted args opened with the key ring), "status" ("pending", "failed", "sent", "dead"), "attempts", "error"
        (text or None), "created_at" (aware UTC datetime)}``, or None when there is no such row
        (or ``job_id`` is no UUID). The statement is the core's (``Bridge::select_job_sql``),
        run on Django's cursor. A failure of the cursor raises OutboxTableMissingError or
        DatabaseError (inside ``atomic()`` it breaks the transaction, as any failed query does)."""
        try:
            job_id = str(uuid.UUID(str(job_id)))  # the core's form: lowercase, hyphenated
        except ValueError:
            return None
        alias = using or DEFAULT_DB_ALIAS
        connection = connections[alias]
        sql = self._select_job_sql.get(alias)
        if sql is None:
            sql = self._call(alias, "select_job_sql", connection.vendor, PLACEHOLDER)
            self._select_job_sql[alias] = sql
        try:
            with connection.cursor() as cursor:
                cursor.execute(sql, [job_id])
                row = cursor.fetchone()
        except DjangoDatabaseError as exc:
            raise _database_error(exc, f"reading the outbox row of job {job_id}") from exc
        if row is None:
            return None
        job_type, args_json, status, attempts, error, created_at_ms, meta_json = row
        # Encrypted args open with this process's key ring (the core's codec).
        args_json = self._call(alias, "open_args", args_json, meta_json)
        return {"type": job_type, "args": json.loads(args_json), "status": status,
                "attempts": int(attempts), "error": error,
                "created_at": _EPOCH + timedelta(milliseconds=int(created_at_ms))}

    def admin(self, command: Mapping[str, Any], *,
              using: Optional[str] = None) -> tuple[int, str, str]:
        """An operator command (``{"command": "status" | "dead", "action", "tenant", "limit",
        "json", "yes"}``, as ``ojs-relay`` takes it) run by the core: ``(exit_code, stdout,
        stderr)``, the texts to print as they are (``manage.py ojs_outbox``)."""
        alias = using or DEFAULT_DB_ALIAS
        how = "manage.py migrate ojs_adapter_django"
        if alias != DEFAULT_DB_ALIAS:
            how += f" --database {alias}"
        text = json.dumps({**command, "create_table_with": how})
        bridge = self._bridges.get(alias)
        if bridge is not None:
            return self._call(using, "admin", text)
        # These commands never talk to the backend: a deploy's `ojs_outbox status` runs
        # without OJS_CONFIG["ojs_url"], on a bridge of its own that is closed after.
        bridge = self._build(alias, needs_backend=False)
        try:
            return bridge.admin(text)
        except _native.NativeError as native:
            raise from_native(native) from None
        finally:
            bridge.close()

    def worker(self, command: Mapping[str, Any], *, using: Optional[str] = None) -> Any:
        """One request of the OJS worker protocol to the configured backend
        (``POST /ojs/v1/workers/fetch|ack|nack|heartbeat``): ``command`` is ``{"op": "fetch",
        "queues", "count", "worker_id", "visibility_timeout_ms"?}``, ``{"op": "ack", "job_id",
        "result"?}``, ``{"op": "nack", "job_id", "error": {"code", "message", "retryable"?,
        "details"?}, "requeue"?}`` or ``{"op": "heartbeat", "worker_id", "active_jobs",
        "visibility_timeout_ms"?}``; returns the server's answer (decoded JSON). Raises
        BackendUnavailableError (no answer, 5xx, 429: try again later), BackendRejectedError
        (another refusal, e.g. an ack of a job that is not active), InvalidQueueError /
        InvalidConfigError (checked before anything is sent). ``manage.py ojs_worker`` is
        built on it (docs/django-tasks.md)."""
        return json.loads(self._call(using, "worker", encode(command)))

    def start_worker(self, options: Mapping[str, Any], *,
                     using: Optional[str] = None) -> _native.Worker:
        """Starts the core worker loop on the configured backend (and key ring): ``options`` is
        ``{"queues", "concurrency"?, "visibility_timeout_ms"?, "worker_id"?, "idle_poll_ms"?}``,
        an absent key taking the core's default. The loop fetches, heartbeats, acks and nacks;
        its handler slots call ``next`` / ``finish`` (``ojs_adapter_django.worker.Worker`` runs
        Django tasks on it). Raises InvalidConfigError / InvalidQueueError for bad options."""
        return self._call(using, "start_worker", encode(options))

    # -- events, metrics and health (issue 15; docs/events.md) ------------------------------

    def relay_events(self, *, types: Any = None, queues: Any = None, job_types: Any = None,
                     tenant: Optional[str] = None, since: Any = None,
                     last_event_id: Optional[str] = None,
                     using: Optional[str] = None) -> _native.RelayFrames:
        """A subscriber of this process's relay events, as SSE frames (what the
        ``events/stream`` mount serves): ``.next(timeout_ms)`` gives a frame's text, ``""``
        when none came in time, None at the end. The filters are the query parameters of
        ``GET /v1/events/stream``: ``types``, ``queues``, ``job_types`` (comma-separated text,
        or a list), ``tenant``, ``since`` (RFC 3339 text or a datetime), ``last_event_id``.
        The relay of ``using`` is started first when it starts by itself (``auto_start``).
        Raises RelayShutDownError when no relay runs in this process, InvalidConfigError
        (``field`` ``since``) when ``since`` is not a time."""
        alias = using or DEFAULT_DB_ALIAS
        bridge = self._start_by_itself(alias)
        request = {
            "types": _query_list(types, "types"),
            "queues": _query_list(queues, "queues"),
            "job_types": _query_list(job_types, "job_types"),
            "tenant": events.text(tenant, "tenant"),
            "since": events.time_text(since),
            "last_event_id": events.text(last_event_id, "last_event_id"),
        }
        try:
            return bridge.relay_events(events.options_json(**request))
        except _native.NativeError as native:
            raise from_native(native) from None

    def surface(self, request: dict, using: Optional[str] = None
                ) -> tuple[int, list[tuple[str, str]], str, Optional[_native.RelayFrames]]:
        """One request of ``ojs_adapter_django.urls``, answered by the core's surface policy
        (the same ``ojs-relay run --listen`` serves): ``(status, headers, body, stream)``. The
        relay of ``using`` is started first when it starts by itself (``auto_start``)."""
        bridge = self._start_by_itself(using or DEFAULT_DB_ALIAS)
        try:
            return bridge.surface(json.dumps(request))
        except _native.NativeError as native:
            raise from_native(native) from None

    def metrics_text(self, using: Optional[str] = None) -> Optional[str]:
        """The metrics (OpenMetrics text) of this process's relay of ``using``
        (started first when it starts by itself), or without one the table's figures alone; None
        when neither can be read."""
        return self._start_by_itself(using or DEFAULT_DB_ALIAS).metrics_text()

    def readiness(self, using: Optional[str] = None) -> dict:
        """``{"ready": bool, "database": "ok" | why, "backend": "ok" | why}``: the database
        reachable with the outbox table, the backend reachable (the core's checks, through the
        relay's own connection)."""
        bridge = self._start_by_itself(using or DEFAULT_DB_ALIAS)
        try:
            return json.loads(bridge.readiness_json())
        except _native.NativeError as native:
            raise from_native(native) from None

    def subscribe_events(self, types: Any = None, queues: Any = None, job_types: Any = None,
                         tenant: Optional[str] = None, since: Any = None,
                         last_event_id: Optional[str] = None, url: Optional[str] = None,
                         token: Optional[str] = None, *,
                         using: Optional[str] = None) -> "events.EventSubscription":
        """A client of an OJS event stream: an iterator and an async iterator of
        ``events.Event``, and a context manager. ``url``: any OJS event stream (a Django mount's
        ``.../events/stream``, ``ojs-relay run --listen``'s ``/v1/events/stream``); without
        it, the configured backend's. ``token``: sent as ``Authorization: Bearer``. Filters:
        ``types`` (``job.*`` globs), ``queues``, ``job_types`` (lists, or one name), ``tenant``;
        replay: ``since`` (RFC 3339 text or a datetime), ``last_event_id``. Reconnecting and
        resuming after a dropped connection are the core's."""
        options = events.options_json(
            url=events.text(url, "url"),
            token=events.text(token, "token"),
            types=events.names(types, "types"),
            queues=events.names(queues, "queues"),
            job_types=events.names(job_types, "job_types"),
            tenant=events.text(tenant, "tenant"),
            since=events.time_text(since),
            last_event_id=events.text(last_event_id, "last_event_id"),
        )
        try:
            feed = self.bridge(using).subscribe_events(options)
        except _native.NativeError as native:
            raise from_native(native) from None
        return events.EventSubscription(feed)

    def relay_command(self, args: Iterable[str], *, using: Optional[str] = None,
                      program: str = "manage.py ojs_relay",
                      after_help: Optional[str] = None) -> _native.RelayCommand:
        """The relay command line ``args`` (the options of ``ojs-relay run``), parsed by the core
        over this alias's settings (``OJS_CONFIG`` with the alias's database): flags and their
        environment variables override them, as ``--config FILE`` is overridden for the
        ``ojs-relay`` binary. No I/O; raises the error class of a bad description."""
        from django.conf import settings

        alias = using or DEFAULT_DB_ALIAS
        how = "manage.py migrate ojs_adapter_django"
        if alias != DEFAULT_DB_ALIAS:
            how += f" --database {alias}"
        framework = {
            "program": program,
            "config": config_json(self._raw_config(), connections[alias].settings_dict, alias),
            "development": bool(getattr(settings, "DEBUG", False)),
            "url_setting": URL_SETTING if self._config is _SETTINGS else EXPLICIT_URL_SETTING,
            "create_table_with": how,
            "after_help": after_help,
        }
        try:
            return _native.RelayCommand(list(args), json.dumps(framework))
        except _native.NativeError as native:
            raise from_native(native) from None

    def run_relay_until_signal(self, using: Optional[str] = None) -> None:
        """Runs the relay as this process's only job until SIGINT/SIGTERM (``manage.py ojs_relay``),
        its log records going to logging as with the in-process relay."""
        relay_log.start()
        try:
            self._call(using, "run_relay_until_signal")
        finally:
            relay_log.forward()


ojs = OJS()


def enqueue(type: str, args: Any = None, **options: Any) -> str:
    return ojs.enqueue(type, args, **options)


def enqueue_after_commit(type: str, args: Any = None, **options: Any) -> str:
    return ojs.enqueue_after_commit(type, args, **options)


def enqueue_bulk(jobs: Iterable[Mapping[str, Any]], *, using: Optional[str] = None) -> list[str]:
    return ojs.enqueue_bulk(jobs, using=using)


def subscribe_events(types: Any = None, queues: Any = None, job_types: Any = None,
                     tenant: Optional[str] = None, since: Any = None,
                     last_event_id: Optional[str] = None, url: Optional[str] = None,
                     token: Optional[str] = None, *,
                     using: Optional[str] = None) -> "events.EventSubscription":
    """``ojs.subscribe_events``: a client of the configured backend's event stream, or of
    ``url``."""
    return ojs.subscribe_events(types, queues, job_types, tenant, since, last_event_id, url,
                                token, using=using)


__all__ = ["OJS", "ojs", "enqueue", "enqueue_after_commit", "enqueue_bulk", "subscribe_events",
           "ImproperlyConfigured"]
