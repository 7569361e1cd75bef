"""The relay's HTTP surface inside the project (issue 15; docs/events.md, docs/operations.md),
the views of ``ojs_adapter_django.urls``:

- ``events/stream``: this process's relay events as Server-Sent Events (query parameters
  ``types``, ``queues``, ``job_types``, ``tenant``, ``since``; header ``Last-Event-ID``);
- ``metrics``: the Prometheus text exposition of this process's relay;
- ``healthz``: the process answers; ``readyz``: database, outbox table and backend reachable.

The core makes the frames, the metrics text and the readiness verdict
(``Bridge.relay_events``, ``metrics_text``, ``readiness_json``); these views decide who may
read them (``OJS_HTTP_ACCESS``, else staff only), pass the request on and serve what comes
back. A stream waits in the core with the GIL released, on the request's thread under WSGI
and on a thread of its own under ASGI (an async iterator, so Django never buffers it).
"""

from __future__ import annotations

import asyncio
from concurrent.futures import ThreadPoolExecutor
from typing import Any, AsyncIterator, Iterator, Optional

from django.core.handlers.asgi import ASGIRequest
from django.http import HttpRequest, HttpResponse, JsonResponse, StreamingHttpResponse
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_safe

from . import _native
from .client import ojs
from .conf import ACCESS_SETTING, access_policy, invalid_setting
from .errors import OJSError, RelayShutDownError

#: Seconds an idle stream waits before it writes a keep-alive comment (also how soon a stream
#: whose client went away notices it under WSGI, where only a write fails). A mount may set
#: another with ``include("ojs_adapter_django.urls"), {"keepalive": 5}``.
KEEPALIVE = 15.0

#: An SSE comment line: clients ignore it. Written first too, so that the response's headers
#: leave at once (a WSGI server sends them with the first chunk).
KEEPALIVE_FRAME = ": keep-alive\n\n"

#: Under ASGI, the longest one wait in the core lasts, in milliseconds: how long the stream's
#: thread outlives a client that went away (Django cancels the response at once).
ASGI_WAIT_MS = 1000


# -- who may read ------------------------------------------------------------------------------

def caller(request: HttpRequest) -> tuple[bool, Optional[str]]:
    """``(allowed, tenant)``: whether the request may read the mount, and the tenant it is
    scoped to (None: every tenant, the operator). ``OJS_HTTP_ACCESS`` decides when set: its
    callable answers True (the operator), False or None (refused), or a tenant id (a caller who
    sees only that tenant's events). Without it: active staff users."""
    policy = access_policy()
    if policy is None:
        user = getattr(request, "user", None)
        if user is None:
            raise invalid_setting(ACCESS_SETTING,
                                  "the default access of ojs_adapter_django.urls (staff only) "
                                  "reads request.user: add django.contrib.auth.middleware."
                                  f"AuthenticationMiddleware to MIDDLEWARE, or set "
                                  f"{ACCESS_SETTING}")
        return bool(user.is_active and user.is_staff), None
    verdict = policy(request)
    if verdict is True:
        return True, None
    if verdict is False or verdict is None:
        return False, None
    if isinstance(verdict, str) and verdict:
        return True, verdict
    raise invalid_setting(ACCESS_SETTING,
                          f"{ACCESS_SETTING} returned {verdict!r}; expected True, False, None "
                          "or a tenant id (a non-empty string)")


def _refused(message: str) -> JsonResponse:
    return JsonResponse({"error": {"code": "forbidden", "message": message}}, status=403)


def _operator_only(request: HttpRequest) -> Optional[JsonResponse]:
    """The refusal of a caller who is not the operator, if it is not."""
    allowed, tenant = caller(request)
    if not allowed:
        return _refused("not allowed (staff only, or as OJS_HTTP_ACCESS decides)")
    if tenant is not None:
        return _refused("a tenant-scoped caller reads only events/stream")
    return None


def _error(error: OJSError, status: int) -> JsonResponse:
    return JsonResponse({"error": {"code": error.code, "field": error.field,
                                   "message": str(error)}}, status=status)


def _keepalive_ms(keepalive: Any) -> int:
    if isinstance(keepalive, bool) or not isinstance(keepalive, (int, float)) or keepalive <= 0:
        raise invalid_setting("keepalive", "keepalive (ojs_adapter_django.urls): expected a "
                                           f"number of seconds above 0, got {keepalive!r}")
    return max(1, int(keepalive * 1000))


# -- the views ---------------------------------------------------------------------------------

@never_cache
@require_safe
def events_stream(request: HttpRequest, using: Optional[str] = None,
                  keepalive: float = KEEPALIVE) -> HttpResponse:
    """``GET events/stream``: Server-Sent Events until the relay stops or the client goes."""
    keepalive_ms = _keepalive_ms(keepalive)
    allowed, own_tenant = caller(request)
    if not allowed:
        return _refused("not allowed (staff only, or as OJS_HTTP_ACCESS decides)")
    asked = request.GET.get("tenant")
    if own_tenant is not None and asked is not None and asked != own_tenant:
        return _refused("this caller reads only its own tenant's events")
    ojs.bridge(using)  # a bad configuration raises here, as anywhere else
    try:
        frames = ojs.relay_events(
            types=request.GET.get("types"),
            queues=request.GET.get("queues"),
            job_types=request.GET.get("job_types"),
            tenant=own_tenant if own_tenant is not None else asked,
            since=request.GET.get("since"),
            last_event_id=request.headers.get("Last-Event-ID") or None,
            using=using,
        )
    except RelayShutDownError as error:
        return _error(error, 503)
    except OJSError as error:  # the request's own parameters (since)
        return _error(error, 400)
    if isinstance(request, ASGIRequest):
        content: Any = _async_frames(frames, keepalive_ms)
    else:
        content = _frames(frames, keepalive_ms)
    response = StreamingHttpResponse(content, content_type="text/event-stream")
    response["X-Accel-Buffering"] = "no"  # proxies (nginx) pass each frame on at once
    return response


def _frames(frames: _native.RelayFrames, keepalive_ms: int) -> Iterator[str]:
    """The frames for a WSGI server: each wait on the request's thread, the GIL released."""
    yield KEEPALIVE_FRAME
    while True:
        frame = frames.next(keepalive_ms)
        if frame is None:
            return
        yield frame or KEEPALIVE_FRAME


async def _async_frames(frames: _native.RelayFrames, keepalive_ms: int) -> AsyncIterator[str]:
    """The frames for an ASGI server: each wait on a thread of this stream's own, so the event
    loop never blocks; Django cancels this generator when the client goes."""
    loop = asyncio.get_running_loop()
    thread = ThreadPoolExecutor(max_workers=1, thread_name_prefix="ojs-events-stream")
    wait_ms = min(ASGI_WAIT_MS, keepalive_ms)
    try:
        yield KEEPALIVE_FRAME
        idle_ms = 0
        while True:
            frame = await loop.run_in_executor(thread, frames.next, wait_ms)
            if frame is None:
                return
            if frame:
                idle_ms = 0
                yield frame
                continue
            idle_ms += wait_ms
            if idle_ms >= keepalive_ms:
                idle_ms = 0
                yield KEEPALIVE_FRAME
    finally:
        thread.shutdown(wait=False)


@never_cache
@require_safe
def metrics(request: HttpRequest, using: Optional[str] = None,
            keepalive: float = KEEPALIVE) -> HttpResponse:
    """``GET metrics``: the Prometheus exposition of this process's relay, or without one the
    table's figures alone; 503 when neither can be read."""
    refusal = _operator_only(request)
    if refusal is not None:
        return refusal
    text = ojs.metrics_text(using)
    if text is None:
        return HttpResponse("neither a relay in this process nor the outbox table could be read: see /readyz\n", status=503,
                            content_type="text/plain; charset=utf-8")
    return HttpResponse(text, content_type="text/plain; version=0.0.4; charset=utf-8")


@never_cache
@require_safe
def healthz(request: HttpRequest, using: Optional[str] = None,
            keepalive: float = KEEPALIVE) -> HttpResponse:
    """``GET healthz``: the process answers (no access check: it tells nothing else)."""
    return HttpResponse("ok\n", content_type="text/plain; charset=utf-8")


@never_cache
@require_safe
def readyz(request: HttpRequest, using: Optional[str] = None,
           keepalive: float = KEEPALIVE) -> HttpResponse:
    """``GET readyz``: the core's verdict, ``{"ready", "database", "backend"}``; 200 when
    ready, else 503."""
    refusal = _operator_only(request)
    if refusal is not None:
        return refusal
    try:
        state = ojs.readiness(using)
    except OJSError as error:
        return _error(error, 503)
    return JsonResponse(state, status=200 if state.get("ready") else 503)
