"""Issue 25: where a job's tenant and user come from in Django. The tenant is the app's
(``OJS_TENANT_RESOLVER``, given the request); the client's ``X-OJS-Tenant`` header counts only
when the app trusts it (``OJS_CONFIG["trust_tenant_header"]``, behind a gateway that sets it),
and a resolved tenant wins over it. The user is ``request.user.pk``, never a header. Real
Django (sync and async stacks), SQLite and PostgreSQL, the real devserver: each test reads the
outbox row the request staged and the job the backend received."""

from __future__ import annotations

import asyncio

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import SystemCheckError
from django.db import connections
from django.test import AsyncClient, Client

from ojs_adapter_django import InvalidConfigError
from support import job_id_text

DB = pytest.mark.django_db(transaction=True, databases=["default", "pg", "my"])
TABLE = "py_outbox"
RESOLVER = "testproject.tenancy.tenant_of_user"
#: A client's headers that try to choose the tenant and the user, next to ones that count.
CLIENT_HEADERS = {"X-OJS-Tenant": "tenant-a", "X-Request-ID": "req-25",
                  "X-OJS-User-Id": "1", "X-User-Id": "1"}


def row_tenant(alias: str, job_id: str):
    """The ``tenant_id`` column of the job's outbox row (what ``dead --tenant`` and the
    tenant-scoped event streams go by)."""
    with connections[alias].cursor() as cursor:
        cursor.execute(f"SELECT tenant_id FROM {TABLE} WHERE {job_id_text(alias)} = %s", [job_id])
        (tenant,) = cursor.fetchone()
    return tenant


def signup(client, alias, path="/signup", **query) -> str:
    response = client.get(path, {"using": alias, **query}, headers=CLIENT_HEADERS)
    assert response.status_code == 201, response.content
    return response.json()["job_id"]


def delivered_meta(backend, job_id: str) -> dict:
    (job,) = backend.wait_for([job_id])
    return job.get("meta") or {}


def trust_the_header(settings):
    settings.OJS_CONFIG = {**settings.OJS_CONFIG, "trust_tenant_header": True}


@DB
def test_an_anonymous_clients_tenant_header_decides_nothing(alias, backend):
    """Before the core change the header was the job's tenant: this row had tenant-a."""
    job_id = signup(Client(), alias)
    meta = delivered_meta(backend, job_id)
    assert row_tenant(alias, job_id) is None
    assert "tenant_id" not in meta
    # Nor does any header make a user: the user is request.user, and there is none.
    assert "ojs.context.user_id" not in meta
    # The other headers still count.
    assert meta["ojs.context.request_id"] == "req-25"


@DB
def test_the_resolver_gives_the_tenant_and_the_user_is_request_user(alias, backend, settings):
    settings.OJS_TENANT_RESOLVER = RESOLVER
    user = User.objects.create_user("ada@acme")
    client = Client()
    client.force_login(user)
    job_id = signup(client, alias)
    meta = delivered_meta(backend, job_id)
    assert row_tenant(alias, job_id) == "acme"
    assert meta["tenant_id"] == "acme"
    assert meta["ojs.context.user_id"] == str(user.pk)
    # A resolver that answers None (no one logged in): no tenant, the header still ignored.
    anonymous = signup(Client(), alias)
    assert row_tenant(alias, anonymous) is None
    assert "tenant_id" not in delivered_meta(backend, anonymous)


@DB
def test_the_resolver_is_asked_when_the_job_is_staged(alias, backend, settings):
    """A view that creates and logs in a user, then stages: the job has that user and its
    tenant, not the anonymous request's (nothing)."""
    settings.OJS_TENANT_RESOLVER = RESOLVER
    response = Client().get("/signup-and-login", {"using": alias, "username": "grace@globex"},
                            headers=CLIENT_HEADERS)
    assert response.status_code == 201, response.content
    job_id = response.json()["job_id"]
    meta = delivered_meta(backend, job_id)
    assert row_tenant(alias, job_id) == "globex"
    assert meta["ojs.context.user_id"] == str(response.json()["user_id"])


@DB
def test_a_trusted_tenant_header_counts(alias, backend, settings):
    trust_the_header(settings)
    job_id = signup(Client(), alias)
    assert row_tenant(alias, job_id) == "tenant-a"
    meta = delivered_meta(backend, job_id)
    assert meta["tenant_id"] == "tenant-a"
    assert "ojs.context.user_id" not in meta


@DB
def test_the_resolver_wins_over_a_trusted_header(alias, backend, settings):
    trust_the_header(settings)
    settings.OJS_TENANT_RESOLVER = RESOLVER
    client = Client()
    client.force_login(User.objects.create_user("ada@acme"))
    job_id = signup(client, alias)
    assert row_tenant(alias, job_id) == "acme"
    assert delivered_meta(backend, job_id)["tenant_id"] == "acme"
    # Where the resolver has no answer (None), the trusted header gives the tenant.
    anonymous = signup(Client(), alias)
    assert row_tenant(alias, anonymous) == "tenant-a"


@DB
def test_the_resolver_in_an_async_stack(backend, settings):
    settings.OJS_TENANT_RESOLVER = RESOLVER
    user = User.objects.create_user("ada@acme")

    async def request():
        client = AsyncClient()
        await client.aforce_login(user)
        return await client.get("/signup-async", headers=CLIENT_HEADERS)

    response = asyncio.run(request())
    assert response.status_code == 201, response.content
    job_id = response.json()["job_id"]
    assert row_tenant("default", job_id) == "acme"
    assert delivered_meta(backend, job_id)["ojs.context.user_id"] == str(user.pk)


# -- a bad resolver ----------------------------------------------------------------------------

@DB
@pytest.mark.parametrize("resolver", ["testproject.tenancy.answers_a_number",
                                      "testproject.tenancy.answers_an_empty_string"])
def test_a_resolver_that_returns_no_tenant_id_is_a_typed_error(backend, settings, resolver):
    settings.OJS_TENANT_RESOLVER = resolver
    with pytest.raises(InvalidConfigError) as raised:
        Client().get("/signup")
    assert raised.value.code == "INVALID_CONFIG"
    assert raised.value.field == "OJS_TENANT_RESOLVER"
    assert "OJS_TENANT_RESOLVER returned" in str(raised.value)
    assert "expected a tenant id (a non-empty string) or None" in str(raised.value)
    assert backend.jobs() == []


@DB
@pytest.mark.parametrize("value", ["testproject.tenancy.missing", "testproject.nowhere.resolve",
                                   "testproject.tenancy.NOT_CALLABLE", 42])
def test_a_resolver_setting_that_names_no_callable_fails_at_start(backend, settings, value):
    """Django loads the middleware when a server starts (its first request here): a setting
    that names no callable stops it there, and ``manage.py check`` reports it."""
    settings.OJS_TENANT_RESOLVER = value
    with pytest.raises(InvalidConfigError) as raised:
        Client().get("/signup")
    assert raised.value.field == "OJS_TENANT_RESOLVER"
    assert str(raised.value).startswith("OJS_TENANT_RESOLVER: ")
    with pytest.raises(SystemCheckError, match=r"ojs_adapter_django\.E002.*OJS_TENANT_RESOLVER"):
        call_command("check")
    assert backend.jobs() == []


def test_a_misspelled_resolver_setting_is_a_check_error_naming_the_right_one(settings):
    settings.OJS_TENANT_RESOLVR = RESOLVER
    with pytest.raises(SystemCheckError) as raised:
        call_command("check")
    assert "ojs_adapter_django.E002" in str(raised.value)
    assert "OJS_TENANT_RESOLVR" in str(raised.value)
    assert '"OJS_TENANT_RESOLVER"' in str(raised.value)


def test_a_resolver_without_the_middleware_is_a_check_error(settings):
    settings.OJS_TENANT_RESOLVER = RESOLVER
    call_command("check")  # with the middleware: nothing to report
    settings.MIDDLEWARE = [entry for entry in settings.MIDDLEWARE
                           if not entry.endswith("RequestContextMiddleware")]
    with pytest.raises(SystemCheckError, match=r"ojs_adapter_django\.E003.*RequestContextMiddleware"):
        call_command("check")
