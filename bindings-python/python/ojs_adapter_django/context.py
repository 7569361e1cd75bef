"""Request context (FA-R001): what the current request contributes to every job's ``meta``.

The context lives in a ``contextvars.ContextVar``, so it follows threads, asyncio tasks and
``sync_to_async`` hops. ``RequestContextMiddleware`` sets it per request; code outside a
request (a management command, a Celery-style worker) may set it with ``request_context()``.
The core validates the keys and merges them into ``meta`` (explicit ``meta`` keys win).
"""

from __future__ import annotations

import contextlib
import json
from contextvars import ContextVar
from typing import Any, Callable, Iterator, Optional, Union

#: Either a plain dict of context fields, or a callable building it when a job is staged
#: (the middleware's, so that ``request.user`` is read only when a job needs it). The fields
#: are the core's keys, and optionally ``"headers"``: the HTTP request headers the core maps
#: to them (the middleware's; a key given explicitly wins).
ContextSource = Union[dict, Callable[[], dict]]

_current: ContextVar[Optional[ContextSource]] = ContextVar("ojs_request_context", default=None)


def get_request_context() -> Optional[dict]:
    """The current context fields, or None."""
    source = _current.get()
    if source is None:
        return None
    fields = source() if callable(source) else source
    return {key: value for key, value in fields.items() if value is not None}


def set_request_context(source: Optional[ContextSource]) -> Any:
    """Sets the context for the current task/thread; returns a token for ``reset_request_context``."""
    return _current.set(source)


def reset_request_context(token: Any) -> None:
    _current.reset(token)


def clear_request_context() -> None:
    _current.set(None)


@contextlib.contextmanager
def request_context(**fields: Optional[str]) -> Iterator[None]:
    """``with request_context(request_id="r1", tenant_id="acme"): ...`` — keys as the core takes
    them: request_id, traceparent, tracestate, user_id, tenant_id, locale."""
    token = _current.set(dict(fields))
    try:
        yield
    finally:
        _current.reset(token)


def context_json() -> Optional[str]:
    """The context as the core's ``stage``/``enqueue_now`` take it: the request's, and the
    app's current OpenTelemetry span as ``span`` (the core decides which trace context wins)."""
    fields = get_request_context() or {}
    span = current_span_context()
    if span:
        fields["span"] = span
    if not fields:
        return None
    return json.dumps(fields, default=str)


_propagator: Any = None


def _trace_propagator() -> Any:
    """``opentelemetry-api``'s W3C trace-context propagator, or False without the API."""
    global _propagator
    if _propagator is None:
        try:
            from opentelemetry.trace.propagation.tracecontext import (
                TraceContextTextMapPropagator,
            )
            _propagator = TraceContextTextMapPropagator()
        except ImportError:
            _propagator = False
    return _propagator


def attach_trace(traceparent: Optional[str], tracestate: Optional[str]) -> Any:
    """Makes a job's trace context (the worker loop's ``process`` span when tracing is on, else
    the context that staged the job) the current OpenTelemetry context while its task runs, so
    the task's own spans continue it; returns the token for ``detach_trace``, or None without
    the API or a ``traceparent``."""
    propagator = _trace_propagator()
    if not propagator or not traceparent:
        return None
    from opentelemetry import context as otel_context

    carrier = {"traceparent": traceparent}
    if tracestate:
        carrier["tracestate"] = tracestate
    return otel_context.attach(propagator.extract(carrier))


def detach_trace(token: Any) -> None:
    if token is not None:
        from opentelemetry import context as otel_context

        otel_context.detach(token)


def current_span_context() -> dict:
    """``traceparent`` (and ``tracestate``) of the app's current OpenTelemetry span, written by
    ``opentelemetry-api``'s own W3C propagator, when the API is installed and a span is
    current: a job then continues the span that staged it (its ``create`` span a child of it),
    not the request's incoming header. Empty without the API or a current span."""
    propagator = _trace_propagator()
    if not propagator:
        return {}
    carrier: dict = {}
    propagator.inject(carrier)  # nothing when no valid span is current
    return {key: carrier[key] for key in ("traceparent", "tracestate") if carrier.get(key)}
