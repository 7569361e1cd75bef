"""Type stubs of the native module (bindings-python/src): the core's bridge (``ojs_bridge``).
Everything crosses as text in the bridge's encodings: JSON for configuration, jobs, context,
staged jobs (bulk), results and errors; a NUL-separated text for one staged job; ids joined by
``"\\n"``."""

from typing import Optional

#: The workspace's version ([workspace.package] of the root Cargo.toml).
__version__: str

def codes_json() -> str:
    """Every core error code with its family and retryable flag: ``[{"code", "family",
    "retryable"}]`` (``error::codes_json``)."""

def database_error(sqlstate: Optional[str], driver_message: str, message: str) -> str:
    """The error JSON for a failure of the host cursor: OUTBOX_TABLE_MISSING or DATABASE by the
    core's rule on the driver's SQLSTATE and message, with ``message``."""

def unencodable(part: str, path: str, why: str) -> str:
    """The error JSON for a value that cannot become JSON, at ``path`` in the job's ``part``
    (``bridge::unencodable``: the core decides the code)."""

def unknown_option(key: str, accepted: list[str]) -> str:
    """The error JSON (INVALID_CONFIG, ``field`` = ``key``) for a setting that is none of
    ``accepted``, naming the accepted spelling when ``key`` is a near miss of one (the core's
    rule, ``config::unknown_option``)."""

def database_url_from_parts(parts_json: str) -> str:
    """The relay's database URL from connection settings (``db_url::ConnectionParts`` JSON).
    Raises NativeError (INVALID_DATABASE_URL) when it cannot be derived."""

def context_header_names() -> list[str]:
    """The request headers the core reads for the context, lowercase."""

def arm_stop_signals() -> None:
    """SIGINT/SIGTERM stop ``Bridge.run_relay_until_signal`` gracefully from now on, also when
    they arrive before it runs. Process-wide, idempotent. Raises NativeError (RELAY_SHUT_DOWN)
    when the handlers cannot be installed."""

def enable_log_feed() -> None:
    """Turns the relay's log feed on for this process; idempotent."""

def drain_log_feed() -> list[tuple[str, str, Optional[str], str]]:
    """The relay log records since the last call, oldest first: ``(level, message, job_id,
    table)``, ``level`` one of "info", "warning", "error". Never blocks on I/O."""

class NativeError(Exception):
    """A core error; ``args[0]`` is its JSON text (``Error::to_json``: code, field, message,
    retryable, family), decoded by ``errors.from_native``."""

    args: tuple[str]  # type: ignore[assignment]

class Bridge:
    def __init__(self, config_json: str, development: bool = False,
                 url_setting: str = 'OJS_CONFIG["ojs_url"]', needs_backend: bool = True) -> None: ...
    @property
    def notice(self) -> Optional[str]: ...
    @property
    def table_name(self) -> str: ...
    @property
    def relay_in_process(self) -> bool: ...
    def create_table_sql(self, dialect: str) -> list[str]: ...
    def drop_table_sql(self, dialect: str) -> str: ...
    def stage(
        self,
        dialect: str,
        placeholder: str,
        jobs_json: str,
        context_json: Optional[str] = None,
    ) -> str:
        """``Staged::to_json``: ``{"job_ids", "statements": [{"sql", "params"}],
        "needs_savepoint"}``."""
    def stage_job(
        self,
        dialect: str,
        placeholder: str,
        job_type: str,
        args_json: str,
        options_json: Optional[str] = None,
        meta_json: Optional[str] = None,
        context_json: Optional[str] = None,
        with_sql: bool = False,
    ) -> str:
        """``StagedJob::encode(with_sql)``: ``[sql]``, job_id, type, args, options, meta,
        ``[tenant]``, NUL-separated."""
    def open_args(self, args_json: str, meta_json: str) -> str: ...
    def select_job_sql(self, dialect: str, placeholder: str) -> str:
        """The core's SELECT of one outbox row by job id, for the host's own connection (it sees
        the rows of its open transaction): columns ``job_type, job_args`` (JSON text), ``status,
        attempts, error, created_at_ms`` (ms since the epoch); one parameter, the job id."""
    def start_relay(self) -> None: ...
    def ensure_relay(self) -> None: ...
    def stop_relay(self) -> None: ...
    def close(self) -> None: ...
    def kill_relay(self) -> None: ...
    def notify_committed(self, job_ids: str) -> None: ...
    def enqueue_now(self, job_json: str, context_json: Optional[str] = None) -> str: ...
    def metrics_json(self) -> str: ...
    def surface(self, request_json: str) -> tuple[int, list[tuple[str, str]], str, Optional[RelayFrames]]:
        """One request of the mount (``{"method", "path", "query", "last_event_id", "access",
        "access_field", "keep_alive_ms"}``), answered by the core's surface policy: ``(status,
        headers, body, stream)``; ``stream`` the frames of an event stream, keep-alive comments
        included."""

    @staticmethod
    def surface_is_open(path: str) -> bool:
        """Whether ``path`` (under the mount) answers every caller."""

    def metrics_text(self) -> Optional[str]:
        """The Prometheus text exposition (version 0.0.4) of this process's relay; None when no
        relay runs in this process."""
    def readiness_json(self) -> str:
        """``{"ready": bool, "database": "ok" | why, "backend": "ok" | why}`` through the
        relay's own connection (``ready`` false: answer 503)."""
    def relay_events(self, request_json: str) -> RelayFrames:
        """A subscriber of this process's relay events as SSE frames. ``request_json``:
        ``{"types", "queues", "job_types"}`` (comma-separated text, as in the query string),
        ``"tenant"``, ``"since"`` (RFC 3339), ``"last_event_id"``; absent keys: no filter. Raises
        NativeError: RELAY_SHUT_DOWN when no relay runs here, INVALID_CONFIG (field ``since``)
        for a ``since`` that is not a time."""
    def subscribe_events(self, options_json: str) -> EventFeed:
        """A client of an OJS event stream: ``{"url" (default: the backend's
        ``/v1/events/stream``), "token", "types", "queues", "job_types" (lists), "tenant",
        "since", "last_event_id"}``. Reconnects and resumes (Last-Event-ID) in the core."""
    def prune(self, older_than: str) -> int: ...
    def migrate(self) -> None: ...
    def status_json(self) -> str: ...
    def dead_list_json(self, tenant: Optional[str] = None, limit: Optional[int] = None) -> str: ...
    def dead_replay(self, tenant: Optional[str] = None) -> int: ...
    def dead_purge(self, tenant: Optional[str] = None) -> int: ...
    def admin(self, command_json: str) -> tuple[int, str, str]:
        """``(exit_code, stdout, stderr)`` of an operator command (``admin::Command`` JSON)."""
    def worker(self, command_json: str) -> str:
        """One worker request to the backend's ``/ojs/v1/workers/*`` (``worker::WorkerCommand``
        JSON: ``{"op": "fetch", "queues", "count", "worker_id", "visibility_timeout_ms"?}``,
        ``{"op": "ack", "job_id", "result"?}``, ``{"op": "nack", "job_id", "error": {"code",
        "message", "retryable"?, "details"?}, "requeue"?}``, ``{"op": "heartbeat", "worker_id",
        "active_jobs", "visibility_timeout_ms"?}``); the server's answer as JSON text. Raises
        NativeError: BACKEND_UNAVAILABLE (no answer, 5xx, 429), BACKEND_REJECTED (another
        refusal), INVALID_QUEUE / INVALID_CONFIG (checked before sending). Releases the GIL."""
    def start_worker(self, options_json: str) -> Worker:
        """Starts the core worker loop on this configuration's backend (and key ring):
        ``{"queues", "concurrency"?, "visibility_timeout_ms"?, "worker_id"?, "idle_poll_ms"?}``;
        an absent key takes the core's default. Raises NativeError (INVALID_CONFIG,
        INVALID_QUEUE) for bad options."""
    def rows_json(self, job_ids: str) -> str: ...
    def run_relay_until_signal(self) -> None: ...

class RelayFrames:
    """One subscriber of the in-process relay's events (``Bridge.relay_events``)."""

    def next(self, timeout_ms: int) -> Optional[str]:
        """The next SSE frame (``id:``, ``event:``, ``data:`` lines and a blank line); ``""`` when
        none came within ``timeout_ms``; None at the end of the stream. Releases the GIL."""

class EventFeed:
    """A client of an OJS event stream (``Bridge.subscribe_events``)."""

    def next(self, timeout_ms: int) -> Optional[str]:
        """The next event's CloudEvents JSON text; ``""`` when none came within
        ``timeout_ms``; None once closed. Raises NativeError when the server refuses the
        subscription (final). Releases the GIL."""
    def close(self) -> None:
        """Closes the connection; ``next`` answers None from now on."""

class Worker:
    """A running core worker loop (``Bridge.start_worker``). Handler slots (threads) call
    ``next``, run the job, and call ``finish``; the loop fetches, heartbeats, acks and nacks."""

    def drain_log(self) -> list[tuple[str, str, Optional[str]]]:
        """The loop's log records (the backend down and back, an ack or nack not delivered, a
        job timed out, given back or not decryptable) since the last call, oldest first:
        ``(level, message, job_id)``, ``level`` one of "info", "warning", "error"."""

    @property
    def backend_down(self) -> bool:
        """Whether the backend did not answer the loop's last request."""

    @property
    def worker_id(self) -> str:
        """The id sent with every fetch (given, or the core's)."""
    @property
    def concurrency(self) -> int:
        """Handler slots: the loop holds at most this many jobs at once."""
    @property
    def in_flight(self) -> int:
        """Jobs handed out and not finished."""
    @property
    def stopping(self) -> bool:
        """Whether ``stop`` began."""
    def next(self, timeout_ms: int) -> Optional[str]:
        """Waits up to ``timeout_ms`` for a job: its JSON text (``{"id", "type", "queue",
        "args", "meta", "attempt", "timeout_ms", "traceparent", "tracestate", "job"}``,
        ``timeout_ms`` what is left of the job's, or null), ``""`` when none came in time, None
        once the worker stops. Releases the GIL."""
    def finish(self, job_id: str, outcome_json: str) -> bool:
        """Settles a job ``next`` handed out: ``{"outcome": "completed", "result"?}``,
        ``{"outcome": "failed", "code", "message", "retryable"?, "details"?}``, ``{"outcome":
        "unknown_type"}`` or ``{"outcome": "requeue"}``. False: the loop no longer held it
        (past its ``timeout_ms``, or given back by the stopping loop); the outcome is dropped.
        Raises NativeError (INVALID_ARGS) for a malformed outcome."""
    def stop(self, deadline_ms: int) -> None:
        """Graceful stop: no more fetches, the jobs handed out have ``deadline_ms`` to be
        finished, the rest is given back; returns once every ack and nack went. Releases the
        GIL."""
