"""The relay's HTTP surface inside the project (issue 15; docs/events.md, docs/operations.md),
the views of ``ojs_adapter_django.urls``:

- ``events/stream``: the table's events as Server-Sent Events (query parameters ``types``,
  ``queues``, ``job_types``, ``tenant``, ``since``; header ``Last-Event-ID``);
- ``metrics``: the metrics (OpenMetrics text) of this process's relay;
- ``healthz``: the process answers; ``readyz``: database, outbox table and backend reachable;
- ``dashboard/``: the operator's dashboard (the page, its assets, its JSON API).

The policy (who reads what, tenant scoping, the refusals, the keep-alive) is the core's, the one
``ojs-relay run --listen`` serves (``Bridge.surface``). These views only say who the caller is
(``OJS_HTTP_ACCESS``, else active staff users), hand the request over and write the answer. A
stream waits in the core with the GIL released, on the request's thread under WSGI and on a
thread of its own under ASGI (an async iterator, so Django never buffers it).
"""

from __future__ import annotations

import asyncio
import json
from concurrent.futures import ThreadPoolExecutor
from typing import Any, AsyncIterator, Iterator, Optional

from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse, StreamingHttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.csrf import csrf_exempt

from . import _native
from .facade import ojs
from .conf import ACCESS_SETTING, access_policy, invalid_setting

#: Seconds an idle stream waits before it writes a keep-alive comment (also how soon a stream
#: whose client went away notices it under WSGI, where only a write fails). A mount may set
#: another with ``include("ojs_adapter_django.urls"), {"keepalive": 5}``.
KEEPALIVE = 15.0

#: Under ASGI, the longest one wait in the core lasts, in milliseconds: how long the stream's
#: thread outlives a client that went away (Django cancels the response at once).
ASGI_WAIT_MS = 1000


def decision(request: HttpRequest) -> Any:
    """Who the caller is, as the app says: ``OJS_HTTP_ACCESS``'s answer when set (True: the
    operator; False or None: refused; a tenant id: that tenant's events only; the core
    refuses anything else, naming the setting), else whether the user is active staff."""
    policy = access_policy()
    if policy is not None:
        verdict = policy(request)
        try:
            json.dumps(verdict)
        except (TypeError, ValueError):
            raise invalid_setting(ACCESS_SETTING,
                                  f"{ACCESS_SETTING} returned a {type(verdict).__name__}; "
                                  "expected True, False, None or a tenant id") from None
        return verdict
    user = getattr(request, "user", None)
    if user is None:
        raise invalid_setting(ACCESS_SETTING,
                              "the default access of ojs_adapter_django.urls (staff only) "
                              "reads request.user: add django.contrib.auth.middleware."
                              f"AuthenticationMiddleware to MIDDLEWARE, or set "
                              f"{ACCESS_SETTING}")
    return bool(user.is_active and user.is_staff)


def _keepalive_ms(keepalive: Any) -> int:
    if isinstance(keepalive, bool) or not isinstance(keepalive, (int, float)) or keepalive <= 0:
        raise invalid_setting("keepalive", "keepalive (ojs_adapter_django.urls): expected a "
                                           f"number of seconds above 0, got {keepalive!r}")
    return max(1, int(keepalive * 1000))


def _serve(request: HttpRequest, path: str, using: Optional[str], keepalive: Any) -> HttpResponse:
    """One request under the core path ``path``: the caller, the core's answer, written."""
    keep_alive_ms = _keepalive_ms(keepalive)  # the mount's own option, checked first
    asked = {
        "method": request.method,
        "path": path,
        "query": request.META.get("QUERY_STRING", ""),
        "last_event_id": request.headers.get("Last-Event-ID") or None,
        "access": False if _native.Bridge.surface_is_open(path) else decision(request),
        "access_field": ACCESS_SETTING,
        "keep_alive_ms": keep_alive_ms,
        # A dashboard write needs it (the core's defence against cross-site requests).
        "write_header": request.headers.get("X-OJS-Dashboard"),
    }
    status, headers, body, stream = ojs.surface(asked, using)
    if stream is None:
        response = HttpResponse(body, status=status)
    elif isinstance(request, ASGIRequest):
        response = StreamingHttpResponse(_async_frames(stream), status=status)
    else:
        response = StreamingHttpResponse(_frames(stream), status=status)
    for name, value in headers:
        response[name] = value
    return response


def _frames(frames: _native.RelayFrames) -> Iterator[str]:
    """The frames for a WSGI server: each wait on the request's thread, the GIL released (the
    core writes a keep-alive comment when it is due)."""
    while True:
        frame = frames.next(ASGI_WAIT_MS)
        if frame is None:
            return
        if frame:
            yield frame


async def _async_frames(frames: _native.RelayFrames) -> AsyncIterator[str]:
    """The frames for an ASGI server: each wait on a thread of this stream's own, so the event
    loop never blocks; Django cancels this generator when the client goes."""
    loop = asyncio.get_running_loop()
    thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ojs-events-stream")
    try:
        while True:
            frame = await loop.run_in_executor(thread, frames.next, ASGI_WAIT_MS)
            if frame is None:
                return
            if frame:
                yield frame
    finally:
        thread.shutdown(wait=False)


# -- the views: each a path of the core's surface ------------------------------------------------

@never_cache
def events_stream(request: HttpRequest, using: Optional[str] = None,
                  keepalive: float = KEEPALIVE) -> HttpResponse:
    """``GET events/stream``: Server-Sent Events until the relay stops or the client goes."""
    return _serve(request, "/v1/events/stream", using, keepalive)


@never_cache
def metrics(request: HttpRequest, using: Optional[str] = None,
            keepalive: float = KEEPALIVE) -> HttpResponse:
    """``GET metrics``: this process's relay's metrics, or without one the table's figures."""
    return _serve(request, "/metrics", using, keepalive)


@never_cache
def healthz(request: HttpRequest, using: Optional[str] = None,
            keepalive: float = KEEPALIVE) -> HttpResponse:
    """``GET healthz``: the process answers (no access check: it tells nothing else)."""
    return _serve(request, "/healthz", using, keepalive)


@never_cache
def readyz(request: HttpRequest, using: Optional[str] = None,
           keepalive: float = KEEPALIVE) -> HttpResponse:
    """``GET readyz``: the core's verdict, ``{"ready", "database", "backend"}``; 200 when
    ready, else 503."""
    return _serve(request, "/readyz", using, keepalive)


@csrf_exempt
def dashboard(request: HttpRequest, rest: Optional[str] = None, using: Optional[str] = None,
              keepalive: float = KEEPALIVE) -> HttpResponse:
    """``dashboard`` and everything under ``dashboard/``: the core's page, assets and API, with
    their own cache headers (an asset is cached for a year, the rest never). Django's CSRF
    check is left to the core, which refuses a replay or purge without the ``X-OJS-Dashboard``
    header that a page of another site cannot send."""
    return _serve(request, "/dashboard" if rest is None else f"/dashboard/{rest}", using, keepalive)
