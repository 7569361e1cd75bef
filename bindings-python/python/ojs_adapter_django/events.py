"""The event client (RFC-0005 §7): ``subscribe_events`` reads an OJS event stream, the
backend's (``<ojs_url>/v1/events/stream``, the default) or a relay's (a Django mount of
``ojs_adapter_django.urls``, or ``ojs-relay run --listen``), as ``Event`` objects.

    from ojs_adapter_django import subscribe_events

    with subscribe_events(types=["job.*"], queues=["email"]) as events:
        for event in events:                 # or: async for event in events
            print(event.type, event.subject, event.data)

Everything about the stream is the core's (``Bridge.subscribe_events``,
``ojs_outbox::event_client``): the query it sends, SSE parsing, reconnecting after a dropped
connection with ``Last-Event-ID`` set to the last event handed over, never handing the same
id twice, and the refusals that end it. This module only waits for the core's next event on a
thread with the GIL released (a thread of its own for ``async for``, so the event loop never
blocks) and turns the CloudEvents JSON text into an ``Event``.
"""

from __future__ import annotations

import asyncio
import datetime
import json
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, Iterable, Optional, Union

from . import _native
from .conf import invalid_setting
from .errors import from_native

#: How long one wait in the core lasts, in milliseconds. It bounds how late ``close()`` (which
#: waits for a ``next`` in progress) returns and how late a cancelled ``async for`` frees its
#: thread; an event arriving earlier is handed over at once.
WAIT_MS = 250


@dataclass(frozen=True)
class Event:
    """One event, as CloudEvents 1.0 describes it (RFC-0005 §2)."""

    #: The event id (a UUIDv7 for the relay's events).
    id: str
    #: ``job.enqueued``, ``job.failed``, ``ojs.relay.paused``, ... (docs/events.md).
    type: str
    #: Who made it: ``/ojs/outbox/<table>`` for a relay's events.
    source: str
    #: What it is about: the job id for ``job.*`` events.
    subject: Optional[str]
    #: When it happened (aware, UTC), or None when the event has no time.
    time: Optional[datetime.datetime]
    #: The event's ``data`` (``job_id``, ``type``, ``queue``, ``attempt``, ...).
    data: dict
    #: The whole envelope as the server sent it (``specversion``, extensions, ...).
    envelope: dict = field(repr=False, compare=False)

    @classmethod
    def from_json(cls, text: str) -> "Event":
        """The event of one CloudEvents JSON text."""
        envelope = json.loads(text)
        return cls(
            id=envelope.get("id"),
            type=envelope.get("type"),
            source=envelope.get("source"),
            subject=envelope.get("subject"),
            time=_time(envelope.get("time")),
            data=envelope.get("data") if isinstance(envelope.get("data"), dict) else {},
            envelope=envelope,
        )


def _time(value: Any) -> Optional[datetime.datetime]:
    """An RFC 3339 time as an aware datetime (None when absent)."""
    if not isinstance(value, str):
        return None
    from django.utils.dateparse import parse_datetime

    return parse_datetime(value)


class EventSubscription:
    """A subscription to an event stream: an iterator and an async iterator of ``Event``s, a
    context manager (sync and async) that closes it. Iteration ends when the subscription is
    closed; a refusal by the server (bad filter, token, URL) raises the adapter's error
    (``OJSError``: ``BackendRejectedError`` and the like, with the server's answer)."""

    def __init__(self, feed: _native.EventFeed) -> None:
        self._feed = feed
        self._closed = False
        self._executor: Optional[ThreadPoolExecutor] = None
        #: The wait of ``async for`` in progress, kept when its caller was cancelled.
        self._pending: Optional[asyncio.Future] = None

    # -- one wait in the core -------------------------------------------------------------

    def _next_text(self, timeout_ms: int) -> Optional[str]:
        try:
            return self._feed.next(timeout_ms)
        except _native.NativeError as native:
            raise from_native(native) from None

    def receive(self, timeout: float) -> Optional[Event]:
        """The next event, waiting at most ``timeout`` seconds; None when none came in time or
        the subscription is closed (``closed`` tells which)."""
        if self._closed:
            return None
        deadline_ms = max(0, int(timeout * 1000))
        while True:
            wait = min(WAIT_MS, deadline_ms)
            text = self._next_text(wait)
            if text is None:
                self._closed = True
                return None
            if text:
                return Event.from_json(text)
            deadline_ms -= wait
            if deadline_ms <= 0:
                return None

    @property
    def closed(self) -> bool:
        """Whether the subscription has ended (closed here, or by the core)."""
        return self._closed

    # -- iteration ------------------------------------------------------------------------

    def __iter__(self) -> "EventSubscription":
        return self

    def __next__(self) -> Event:
        if self._closed:
            raise StopIteration
        while True:
            text = self._next_text(WAIT_MS)
            if text is None:
                self._closed = True
                raise StopIteration
            if text:
                return Event.from_json(text)

    def __aiter__(self) -> "EventSubscription":
        return self

    async def __anext__(self) -> Event:
        if self._closed:
            raise StopAsyncIteration
        loop = asyncio.get_running_loop()
        while True:
            # A wait cancelled by its caller (``asyncio.wait_for``, a task cancelled) leaves the
            # core's answer in ``_pending`` for the next call, so no event is lost.
            pending = self._pending
            if pending is None or pending.get_loop() is not loop:
                pending = loop.run_in_executor(self._thread(), self._next_text, WAIT_MS)
                self._pending = pending
            text = await asyncio.shield(pending)
            self._pending = None
            if text is None:
                self._closed = True
                raise StopAsyncIteration
            if text:
                return Event.from_json(text)

    def _thread(self) -> ThreadPoolExecutor:
        """The one thread this subscription waits on for ``async for`` (not the loop's default
        executor, which a few long-lived subscriptions would fill)."""
        if self._executor is None:
            self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ojs-events")
        return self._executor

    # -- closing --------------------------------------------------------------------------

    def close(self) -> None:
        """Closes the connection; iteration ends. Waits for a wait in progress (at most
        ``WAIT_MS``). Idempotent."""
        self._closed = True
        self._feed.close()
        executor, self._executor = self._executor, None
        if executor is not None:
            executor.shutdown(wait=False)

    async def aclose(self) -> None:
        """``close()`` without blocking the event loop."""
        await asyncio.get_running_loop().run_in_executor(None, self.close)

    def __enter__(self) -> "EventSubscription":
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    async def __aenter__(self) -> "EventSubscription":
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.aclose()


Names = Union[str, Iterable[str], None]


def names(value: Names, field_name: str) -> Optional[list[str]]:
    """A filter of the client (``types``, ``queues``, ``job_types``) as the list of strings
    the core takes; a single name may be given as a string. Anything else is an
    ``InvalidConfigError`` naming the argument."""
    if value is None:
        return None
    if isinstance(value, str):
        return [value]
    try:
        listed = list(value)
    except TypeError:
        raise invalid_setting(field_name, f"{field_name}: expected a list of strings, got "
                                          f"{type(value).__name__}") from None
    for item in listed:
        if not isinstance(item, str):
            raise invalid_setting(field_name, f"{field_name}: expected a list of strings, got an "
                                              f"item of type {type(item).__name__}")
    return listed


def text(value: Any, field_name: str) -> Optional[str]:
    """A text option (``tenant``, ``last_event_id``, ``url``, ``token``): a string or None."""
    if value is None or isinstance(value, str):
        return value
    raise invalid_setting(field_name, f"{field_name}: expected a string, got "
                                      f"{type(value).__name__}")


def time_text(value: Union[str, datetime.datetime, None],
              field_name: str = "since") -> Optional[str]:
    """``since`` as RFC 3339 text: a datetime (a naive one is in Django's current time zone),
    or a string passed as it is (the core, or the server, judges it)."""
    if isinstance(value, datetime.datetime):
        from django.utils import timezone

        if timezone.is_naive(value):
            value = timezone.make_aware(value)
        return value.isoformat()
    return text(value, field_name)


def options_json(**options: Any) -> str:
    """The subscription's options as the core takes them (``EventSubscription`` JSON): absent
    (None) options are left out, so every default is the core's."""
    return json.dumps({key: value for key, value in options.items() if value is not None})


__all__ = ["Event", "EventSubscription", "WAIT_MS"]
