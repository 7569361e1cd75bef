"""The relay's log records, through Python ``logging``.

The core writes each relay event once (a pause, a resume, a dead letter, a refusal by the
backend, a database or prune failure: every text and level is the core's) into a bounded
queue of this process. A daemon thread drains it every 250 ms into the logger
``ojs_adapter_django.relay`` at the record's level (``INFO``, ``WARNING``, ``ERROR``), with the
job id (a dead letter's, else None) as ``record.job_id`` and the outbox table as
``record.outbox_table``. Nothing of Python runs on the core's threads.

The thread starts with the first in-process relay of the process (just before
``Bridge.ensure_relay``, in ``OJS``), or with ``manage.py ojs_relay``, and again in a forked
child that starts its own (the fork hook forgets the parent's thread); a last drain follows
every relay stop, so the records of the flush are not left behind.
"""

from __future__ import annotations

import logging
import os
import sys
import threading
from typing import Optional

from . import _native

#: The logger the relay's records go to (a child of ``ojs_adapter_django``).
logger = logging.getLogger("ojs_adapter_django.relay")

LEVELS = {"info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}

#: Seconds between two drains.
INTERVAL = 0.25


def forward() -> int:
    """Drains the core's queue into ``logger`` now; returns how many records it logged."""
    records = _native.drain_log_feed()
    for level, message, job_id, table in records:
        logger.log(LEVELS.get(level, logging.WARNING), "%s", message,
                   extra={"job_id": job_id, "outbox_table": table})
    return len(records)


class _Pump:
    """The draining thread of this process (at most one)."""

    def __init__(self) -> None:
        self._forked()
        os.register_at_fork(after_in_child=self._forked)

    def _forked(self) -> None:
        # A fresh state in a forked child: the parent's thread does not exist here, and its
        # lock may have been held at the moment of the fork.
        self._lock = threading.Lock()
        self._thread: Optional[threading.Thread] = None

    def start(self) -> None:
        """Turns the core's feed on and starts the thread in this process, once."""
        if self._thread is not None:
            return
        with self._lock:
            if self._thread is not None:
                return
            _native.enable_log_feed()
            thread = threading.Thread(target=self._run, name="ojs-relay-log", daemon=True)
            thread.start()
            self._thread = thread

    def _run(self) -> None:
        wait = threading.Event().wait
        while True:
            wait(INTERVAL)
            try:
                forward()
            except Exception:  # a failing handler must not end the thread
                logging.getLogger("ojs_adapter_django").exception(
                    "ojs: forwarding relay log records failed")


_pump = _Pump()


#: Starts forwarding the relay's records in this process (idempotent, fork-aware); called
#: before every enqueue's ``ensure_relay``, so one bound call.
start = _pump.start


class console:
    """While open: the relay's records also go to ``stream`` (stderr) when ``logger`` would
    reach no handler of the application's logging configuration, INFO included (the relay
    commands, so that a terminal shows them). Without such a configuration Python would print
    only WARNING and above, without the level."""

    def __init__(self, prefix: str, stream=None, logger: Optional[logging.Logger] = None) -> None:
        self._handler: Optional[logging.Handler] = None
        self._level: Optional[int] = None
        self._prefix = prefix
        self._stream = stream
        #: The relay's logger, or another of the package's (``ojs_worker``'s).
        self._logger = logger or globals()["logger"]

    def __enter__(self) -> "console":
        logger = self._logger
        if not logger.hasHandlers():
            handler = logging.StreamHandler(self._stream or sys.stderr)
            handler.setFormatter(logging.Formatter(f"{self._prefix}: %(levelname)s %(message)s"))
            logger.addHandler(handler)
            self._handler = handler
            if logger.getEffectiveLevel() > logging.INFO:
                self._level = logger.level
                logger.setLevel(logging.INFO)
        return self

    def __exit__(self, *exc: object) -> None:
        logger = self._logger
        if self._handler is not None:
            logger.removeHandler(self._handler)
            self._handler = None
        if self._level is not None:
            logger.setLevel(self._level)
            self._level = None
