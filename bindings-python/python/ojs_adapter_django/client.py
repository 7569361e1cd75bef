"""The public API: ``ojs.enqueue``, ``ojs.enqueue_after_commit``, ``ojs.enqueue_bulk`` and the
relay/admin calls, on top of the native core adapter.

Staging: the core validates the jobs and returns its INSERT; this module runs it on
``connections[using].cursor()``, inside whatever transaction Django has open, and registers the
wake-up with ``transaction.on_commit``, so Django's own savepoint rules apply: a rolled-back
savepoint drops its rows (the database) and its wake-ups (Django), a released one relays
nothing until the outermost commit, and in autocommit the wake-up runs at once.

One core adapter exists per database alias, because the relay reads the outbox of that
database through its own connection. A serving process starts the default alias's relay when
Django is ready (``apps.py``, ``OJS.start_at_boot``); any other relay starts in its process on
first use.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import threading
from json.encoder import c_make_encoder, encode_basestring_ascii  # type: ignore[attr-defined]
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence

from django.core.exceptions import ImproperlyConfigured
from django.core.serializers.json import DjangoJSONEncoder
from django.db import DEFAULT_DB_ALIAS, DatabaseError, connections, transaction
from django.db.transaction import TransactionManagementError

from . import _native, relay_log
from .conf import config_json
from .context import context_json
from .errors import ConfigurationError, OJSError, error, from_native

logger = logging.getLogger("ojs_adapter_django")

#: Django's cursor takes ``%s`` on every backend (its SQLite wrapper rewrites them to ``?``).
PLACEHOLDER = "percent"

_SETTINGS = object()

#: How users of the settings-backed ``ojs`` set the backend URL (named by the core's messages).
URL_SETTING = 'OJS_CONFIG["ojs_url"]'
#: The same for an adapter built with an explicit configuration.
EXPLICIT_URL_SETTING = 'the "ojs_url" key of OJS(config)'


#: One encoder for every call (building one per call costs more than encoding a small job).
_ENCODER = DjangoJSONEncoder(separators=(",", ":"), allow_nan=False)


def _compact_encoder() -> Callable[[Any], str]:
    """``_ENCODER.encode``, minus the C encoder it builds on every call (that costs more than
    encoding a job's args). Same output and errors; circular data raises RecursionError instead
    of ValueError (no markers). Falls back to ``encode`` where the C accelerator is missing."""
    if c_make_encoder is None:
        return _ENCODER.encode
    iterencode = c_make_encoder(None, _ENCODER.default, encode_basestring_ascii, None,
                                _ENCODER.key_separator, _ENCODER.item_separator,
                                False, False, False)
    return lambda value: "".join(iterencode(value, 0))


_dumps = _compact_encoder()

#: What a value JSON cannot hold raises while encoding.
_UNENCODABLE = (TypeError, ValueError, RecursionError)


def _jobs_json(jobs: Sequence[Mapping[str, Any]]) -> str:
    """The jobs as the core takes them. A value JSON cannot hold is reported with the core's
    code for its part (INVALID_ARGS / INVALID_OPTIONS / INVALID_META) and its field."""
    try:
        return _dumps(jobs)
    except _UNENCODABLE:
        pass
    codes = {"args": "INVALID_ARGS", "options": "INVALID_OPTIONS", "meta": "INVALID_META"}
    for index, job in enumerate(jobs):
        if not isinstance(job, Mapping):
            raise error("INVALID_ARGS", f"jobs[{index}]: job: must be a dict, got {type(job).__name__}", "job")
        for part, code in codes.items():
            try:
                _dumps(job.get(part))
            except _UNENCODABLE as exc:
                prefix = f"jobs[{index}]: " if len(jobs) > 1 else ""
                raise error(code, f"{prefix}{part}: cannot be converted to JSON: {exc}", part) from None
    raise error("INVALID_ARGS", "jobs: cannot be converted to JSON", "jobs")


def _part_json(value: Any, part: str, code: str) -> str:
    """One part of a job (args, options or meta) as JSON text, or the core's code for it."""
    try:
        return _dumps(value)
    except _UNENCODABLE as exc:
        raise error(code, f"{part}: cannot be converted to JSON: {exc}", part) from None


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


class _Wake:
    """The after-commit wake-up of the jobs staged one after another at one savepoint level."""

    __slots__ = ("ojs", "adapter", "job_ids")

    def __init__(self, ojs: "OJS", adapter: _native.Adapter, job_ids: list[str]) -> None:
        self.ojs = ojs
        self.adapter = adapter
        self.job_ids = job_ids

    def __call__(self) -> None:
        self.ojs._wake(self.adapter, self.job_ids)


def _wake_at_commit(ojs: "OJS", connection: Any, adapter: _native.Adapter,
                    job_ids: list[str]) -> None:
    """``on_commit`` for these ids. When the last callback of the transaction is our wake-up,
    registered under the same savepoints, the ids join it: Django would run or drop a new
    callback exactly with it, and registering one costs as much as the INSERT's overhead."""
    hooks = connection.run_on_commit
    if hooks:
        last = hooks[-1]
        wake = last[1]
        if (wake.__class__ is _Wake and wake.adapter is adapter
                and last[0] == set(connection.savepoint_ids)):
            wake.job_ids.extend(job_ids)
            return
    connection.on_commit(_Wake(ojs, adapter, list(job_ids)))


def _staging_error(exc: DatabaseError) -> OJSError:
    """A failure of Django's cursor, with the core's code (OUTBOX_TABLE_MISSING or DATABASE)."""
    cause = exc.__cause__
    sqlstate = getattr(cause, "sqlstate", None) or getattr(cause, "pgcode", None)
    code = _native.database_error_code(sqlstate, str(exc))
    return error(code, f"staging the outbox rows failed: {exc}")


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

    def __init__(self, config: Any = _SETTINGS, *, autostart_relay: bool = True) -> None:
        """``config``: the spec §5.2 dict (default: ``settings.OJS_CONFIG``).
        ``autostart_relay=False``: enqueueing does not start the in-process relay; call
        ``start_relay()`` yourself."""
        self._config = config
        self._autostart_relay = autostart_relay
        self._lock = threading.Lock()
        self._adapters: dict[str, _native.Adapter] = {}
        self._relay_pid: dict[str, int] = {}
        self._atexit_registered = False
        self._fork_hook_registered = False

    # -- configuration -------------------------------------------------------------------

    def _raw_config(self) -> Any:
        if self._config is _SETTINGS:
            from django.conf import settings

            return getattr(settings, "OJS_CONFIG", None)
        return self._config

    def adapter(self, using: Optional[str] = None) -> _native.Adapter:
        """The core adapter of a database alias (built on first use)."""
        alias = using or DEFAULT_DB_ALIAS
        adapter = self._adapters.get(alias)
        if adapter is not None:
            return adapter
        with self._lock:
            adapter = self._adapters.get(alias)
            if adapter is None:
                adapter = self._build(alias)
                if adapter.notice:
                    logger.warning("%s", adapter.notice)
                self._adapters[alias] = adapter
            return adapter

    def _build(self, alias: str, *, needs_backend: bool = True) -> _native.Adapter:
        """A core adapter of an alias, parsed as this project runs: development mode is
        ``settings.DEBUG`` (the core's rule then gives a missing URL its development default)."""
        from django.conf import settings

        text = config_json(self._raw_config(), connections[alias].settings_dict, alias)
        setting = URL_SETTING if self._config is _SETTINGS else EXPLICIT_URL_SETTING
        try:
            return _native.Adapter(text, bool(getattr(settings, "DEBUG", False)), setting,
                                   needs_backend)
        except _native.NativeError as native:
            raise from_native(native) from None

    def check(self, using: Optional[str] = None) -> None:
        """Raises ConfigurationError (an ImproperlyConfigured) when the configuration is bad."""
        self.adapter(using)

    def reset(self) -> None:
        """Stops this process's relays and forgets the adapters (settings changed)."""
        self.stop_relay()
        with self._lock:
            self._adapters.clear()
            self._relay_pid.clear()

    # -- relay lifecycle (FA-R003) -------------------------------------------------------

    def start_relay(self, using: Optional[str] = None) -> None:
        """Starts the in-process relay of an alias in this process (a no-op in external mode).
        Called on first enqueue; safe to call again, also after a fork."""
        alias = using or DEFAULT_DB_ALIAS
        adapter = self.adapter(alias)
        pid = os.getpid()
        if self._relay_pid.get(alias) == pid:
            return
        if adapter.relay_in_process:
            # Its pauses, resumes and dead letters go to logging ("ojs_adapter_django.relay").
            relay_log.start()
            try:
                adapter.start_relay()
            except _native.NativeError as native:
                raise from_native(native) from None
            if not self._atexit_registered:
                self._atexit_registered = True
                atexit.register(self.stop_relay)
        # Recorded in external mode too: enqueueing then skips this method altogether.
        self._relay_pid[alias] = pid

    def start_at_boot(self) -> None:
        """Starts the default alias's in-process relay now, and again in every child process
        forked from this one (pre-fork servers: gunicorn ``--preload``, uWSGI), so no request
        pays for the start. What ``AppConfig.ready`` calls in a serving process. A bad
        configuration raises (the server fails to start); a relay that cannot start is logged
        and retried on the next enqueue. Nothing happens with ``autostart_relay=False``."""
        if not self._autostart_relay:
            return
        self._start_relay_lazily(DEFAULT_DB_ALIAS)
        if not self._fork_hook_registered:
            self._fork_hook_registered = True
            os.register_at_fork(after_in_child=self._start_after_fork)

    def _start_after_fork(self) -> None:
        try:
            self._start_relay_lazily(DEFAULT_DB_ALIAS)
        except Exception as exc:  # a fork hook must not raise
            logger.error("ojs: the in-process relay did not start after fork: %s", exc)

    def _start_relay_lazily(self, alias: str) -> None:
        try:
            self.start_relay(alias)
        except ConfigurationError:
            raise
        except OJSError as exc:
            # The row is durable either way: the relay started by a later enqueue (or by
            # another process) sends it. Not marked as started, so the next enqueue retries.
            logger.error("ojs: the in-process relay for %r did not start (retried on the next "
                         "enqueue): %s", alias, exc)

    def stop_relay(self, using: Optional[str] = None) -> None:
        """Graceful stop of this process's relay(s): flushes what was notified, releases leases.
        The relay's last log records (those of the flush) are logged before it returns."""
        aliases = [using or DEFAULT_DB_ALIAS] if using else list(self._adapters)
        for alias in aliases:
            adapter = self._adapters.get(alias)
            if adapter is not None:
                adapter.stop_relay()
            self._relay_pid.pop(alias, None)
        relay_log.forward()

    def kill_relay(self, using: Optional[str] = None) -> None:
        """Abrupt stop, as a crash would: no flush, leases stay until they expire. For tests of
        crash recovery; applications use ``stop_relay``."""
        alias = using or DEFAULT_DB_ALIAS
        adapter = self._adapters.get(alias)
        if adapter is not None:
            adapter.kill_relay()
        self._relay_pid.pop(alias, None)

    # -- enqueue (spec §5.1) -------------------------------------------------------------

    def enqueue(self, type: str, args: Any = None, *, meta: Any = None,
                using: Optional[str] = None, **options: Any) -> str:
        """Sends one job to the backend now, outside any transaction; returns its id.
        Raises BackendUnavailableError / BackendRejectedError when the backend does not take it."""
        adapter = self.adapter(using)
        job_json = _jobs_json([_job(type, args, options, meta)])[1:-1]
        try:
            return adapter.enqueue_now(job_json, context_json())
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
        adapter = self._adapters.get(alias) or self.adapter(alias)
        connection = connections[alias]
        args_json = _part_json(args, "args", "INVALID_ARGS")
        options_json = _part_json(options, "options", "INVALID_OPTIONS") if options else None
        meta_json = None if meta is None else _part_json(meta, "meta", "INVALID_META")
        try:
            job_id, sql, params = adapter.stage_job(
                connection.vendor, PLACEHOLDER, type, args_json, options_json, meta_json,
                context_json(),
            )
        except _native.NativeError as native:
            raise from_native(native) from None
        self._write(connection, alias, adapter, [(sql, params)], [job_id])
        return job_id

    def enqueue_bulk(self, jobs: Iterable[Mapping[str, Any]], *,
                     using: Optional[str] = None) -> list[str]:
        """Stages several jobs (dicts with ``type``, ``args``, optional ``options``, ``meta``)
        with one INSERT, all or none; after-commit semantics. Returns the ids in order."""
        jobs = list(jobs)
        if not jobs:
            return []
        return self._stage(jobs, using)

    def _stage(self, jobs: Sequence[Mapping[str, Any]], using: Optional[str]) -> list[str]:
        alias = using or DEFAULT_DB_ALIAS
        adapter = self.adapter(alias)
        connection = connections[alias]
        try:
            job_ids, statements = adapter.stage(
                connection.vendor, PLACEHOLDER, _jobs_json(jobs), context_json()
            )
        except _native.NativeError as native:
            raise from_native(native) from None
        self._write(connection, alias, adapter, statements, job_ids)
        return job_ids

    def _write(self, connection: Any, alias: str, adapter: _native.Adapter,
               statements: Sequence[tuple[str, list]], job_ids: list[str]) -> None:
        """Runs the core's INSERT(s) on Django's connection and arranges the wake-up: at the
        outermost commit inside atomic(), at once in autocommit."""
        in_atomic = connection.in_atomic_block
        if not in_atomic and not connection.get_autocommit():
            raise TransactionManagementError(
                "ojs: enqueue_after_commit needs transaction.atomic() or autocommit; "
                "manual transaction management has no commit hook"
            )
        if self._autostart_relay and self._relay_pid.get(alias) != os.getpid():
            self._start_relay_lazily(alias)
        try:
            if len(statements) == 1:
                sql, params = statements[0]
                if in_atomic:
                    _staging_cursor(connection).execute(sql, params)
                else:
                    with connection.cursor() as cursor:
                        cursor.execute(sql, params)
            else:
                # Several INSERTs (very large bulks) stage all or nothing.
                with transaction.atomic(using=alias), connection.cursor() as cursor:
                    for sql, params in statements:
                        cursor.execute(sql, params)
        except DatabaseError as exc:
            raise _staging_error(exc) from exc
        if in_atomic:
            _wake_at_commit(self, connection, adapter, job_ids)
        else:
            self._wake(adapter, job_ids)

    def _wake(self, adapter: _native.Adapter, job_ids: list[str]) -> None:
        adapter.notify_committed(job_ids)

    # -- administration ------------------------------------------------------------------

    def _call(self, using: Optional[str], method: str, *args: Any) -> Any:
        try:
            return getattr(self.adapter(using), method)(*args)
        except _native.NativeError as native:
            raise from_native(native) from None

    def _ddl(self, alias: str, method: str, vendor: str) -> Any:
        """The core's DDL for an alias: a migration needs no backend, so no backend URL."""
        adapter = self._adapters.get(alias) or self._build(alias, needs_backend=False)
        try:
            return getattr(adapter, method)(vendor)
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

    def rows(self, job_ids: Sequence[str], *, using: Optional[str] = None) -> dict:
        """Committed state of these jobs' rows: ``{job_id: {status, attempts, error}}``."""
        return json.loads(self._call(using, "rows_json", list(job_ids)))

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


__all__ = ["OJS", "ojs", "enqueue", "enqueue_after_commit", "enqueue_bulk", "ImproperlyConfigured"]
