"""Issue 29, the Django binding's side of tracing: with ``opentelemetry-api`` installed, a job
staged inside the app's current span carries that span's trace context (the core's ``create``
span is made its child), also outside a request; an explicit ``request_context(traceparent=)``
wins; with no span current the request's header is used as before. Real Django, SQLite and
PostgreSQL, the real devserver (the job's ``meta`` as the backend received it)."""

from __future__ import annotations

import pytest
from django.db import transaction
from opentelemetry import trace
from opentelemetry.sdk.trace import TracerProvider

from ojs_adapter_django import ojs, request_context
from support import WAIT, wait_until

DB = pytest.mark.django_db(transaction=True, databases=["default", "pg", "my"])
TRACER = TracerProvider().get_tracer("ojs-test")


def delivered_meta(backend, alias, **context):
    with request_context(**context) if context else _nothing():
        with transaction.atomic(using=alias):
            job_id = ojs.enqueue_after_commit("email.welcome", ["ada@example.com"], using=alias)
    wait_until(lambda: backend.job(job_id) is not None, WAIT, "the job delivered")
    return backend.job(job_id)["meta"]


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


@DB
def test_a_job_staged_in_a_span_continues_that_span(backend, alias):
    with TRACER.start_as_current_span("POST /signup") as span:
        meta = delivered_meta(backend, alias)
    context = span.get_span_context()
    trace_id, span_id = f"{context.trace_id:032x}", f"{context.span_id:016x}"
    assert meta["traceparent"].split("-")[1] == trace_id, meta
    assert meta["traceparent"].split("-")[2] == span_id, meta


@DB
def test_an_explicit_traceparent_wins_and_none_without_a_span(backend, alias):
    given = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
    with TRACER.start_as_current_span("work"):
        meta = delivered_meta(backend, alias, traceparent=given)
    assert meta["traceparent"] == given
    assert trace.get_current_span().get_span_context().is_valid is False
    assert "traceparent" not in delivered_meta(backend, alias)
