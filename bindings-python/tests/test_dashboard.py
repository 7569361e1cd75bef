"""Issue 29, the Django binding: the dashboard under ``include("ojs_adapter_django.urls")``. The
page, its assets and its JSON API are the core's (the browser test runs in the Express suite);
this checks what the Django mount adds: every dashboard path routed, the core's cache headers
kept (no ``never_cache`` on a hashed asset), writes guarded by the core's header instead of
Django's CSRF cookie, the caller from ``OJS_HTTP_ACCESS`` (staff by default; a tenant sees its
own rows only; ``{"read_only": True}`` reads and never writes). Real Django, SQLite and
PostgreSQL, the real devserver."""

from __future__ import annotations

import re

import pytest
from django.contrib.auth.models import User
from django.db import transaction
from django.test import Client

from ojs_adapter_django import ojs
from support import WAIT, wait_until

DB = pytest.mark.django_db(transaction=True, databases=["default", "pg", "my"])
MOUNT = {"default": "/ojs", "pg": "/ojs-pg", "my": "/ojs-my"}


def login(is_staff: bool, **client_options) -> Client:
    name = f"{'staff' if is_staff else 'someone'}-{User.objects.count()}"
    user = User.objects.create_user(name, password="pw", is_staff=is_staff)
    client = Client(**client_options)
    client.force_login(user)
    return client


def poll(read, what):
    """``read()`` again until it answers something truthy; that answer."""
    answer = []
    wait_until(lambda: answer.append(read()) or answer[-1], WAIT, what)
    return answer[-1]


def stage(alias, tenant):
    with transaction.atomic(using=alias):
        return ojs.enqueue_after_commit("email.welcome", ["ada@example.com"], using=alias,
                                        meta={"tenant_id": tenant})


@DB
def test_the_page_its_asset_and_the_api_through_the_django_mount(backend, alias):
    staff = login(True)
    mount = MOUNT[alias]
    redirect = staff.get(f"{mount}/dashboard")
    assert redirect.status_code == 308
    assert redirect["Location"] == "dashboard/"
    page = staff.get(f"{mount}/dashboard/")
    assert page.status_code == 200
    assert "script-src 'self'" in page["Content-Security-Policy"]
    assert page["Cache-Control"] == "no-store"
    asset = re.search(r'src="(assets/app-[0-9a-f]+\.js)"', page.content.decode()).group(1)
    script = staff.get(f"{mount}/dashboard/{asset}")
    assert script.status_code == 200
    assert script["Cache-Control"] == "private, max-age=31536000, immutable"
    assert script["Content-Type"].startswith("text/javascript")

    job_id = stage(alias, "acme")
    wait_until(lambda: backend.job(job_id) is not None, WAIT, "the job delivered")
    rows = poll(lambda: [row for row in
                         staff.get(f"{mount}/dashboard/api/rows?job_id={job_id}").json()["rows"]
                         if row["status"] == "sent"], "the sent row listed")
    assert rows[0]["status"] == "sent" and rows[0]["tenant_id"] == "acme"
    detail = staff.get(f"{mount}/dashboard/api/rows/{job_id}").json()["row"]
    assert detail["args"] == ["ada@example.com"]
    overview = staff.get(f"{mount}/dashboard/api/overview").json()
    assert overview["viewer"] == {"tenant": None, "writes": True, "decodes": True}
    assert overview["health"]["ready"] is True


@DB
def test_writes_need_the_cores_header_not_djangos_csrf_cookie(backend):
    staff = login(True, enforce_csrf_checks=True)
    nobody = "/ojs/dashboard/api/dead/replay?job_id=01890a5d-ac96-774b-bcce-b302099a8057"
    refused = staff.post(nobody)
    assert refused.status_code == 403
    assert "X-OJS-Dashboard" in refused.json()["error"]["message"]
    replayed = staff.post(nobody, headers={"X-OJS-Dashboard": "1"})
    assert replayed.status_code == 200, replayed.content
    assert replayed.json() == {"replayed": 0}


@DB
def test_only_staff_by_default_a_tenant_its_own_rows_a_viewer_no_writes(backend, settings):
    assert login(False).get("/ojs/dashboard/").status_code == 403
    assert Client().get("/ojs/dashboard/api/overview").status_code == 403

    settings.OJS_HTTP_ACCESS = "testproject.access.by_token"
    acme_job, globex_job = stage("default", "acme"), stage("default", "globex")
    acme = Client(headers={"Authorization": "Bearer acme-token"})
    listed = poll(lambda: [row for row in acme.get("/ojs/dashboard/api/rows").json()["rows"]
                           if row["job_id"] == acme_job] and
                  acme.get("/ojs/dashboard/api/rows").json()["rows"], "acme's row")
    # Rows of earlier tests may be there too: acme's, and never another tenant's.
    assert {row["tenant_id"] for row in listed} == {"acme"}
    assert globex_job not in {row["job_id"] for row in listed}
    assert acme.get(f"/ojs/dashboard/api/rows/{globex_job}").status_code == 404
    assert acme.get("/ojs/dashboard/api/rows?tenant=globex").status_code == 400
    assert acme.get("/ojs/dashboard/api/overview").json()["health"] is None

    settings.OJS_HTTP_ACCESS = "testproject.access.read_only"
    viewer = login(False)
    assert viewer.get("/ojs/dashboard/api/overview").json()["viewer"]["writes"] is False
    write = viewer.post("/ojs/dashboard/api/dead/purge?job_id=" + globex_job,
                        headers={"X-OJS-Dashboard": "1"})
    assert write.status_code == 403
