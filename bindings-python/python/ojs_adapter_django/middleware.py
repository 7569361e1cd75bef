"""``RequestContextMiddleware`` (FA-R001): puts the request's headers the core reads (trace
context, request id, tenant, language), its user and its tenant into the request context that
every job staged during the request carries; the core maps the headers to the context's fields.

The user is ``request.user.pk`` when authenticated, and the tenant what the app's
``OJS_TENANT_RESOLVER`` returns for the request: both server-side, both read only when a job is
staged (a signup view that logs the new user in passes that user and its tenant). The client's
``X-OJS-Tenant`` header is passed on like the others, and the core lets it count only when
``OJS_CONFIG["trust_tenant_header"]`` is true; a resolved tenant wins over it.

Place it after ``AuthenticationMiddleware`` so ``request.user`` exists. Works in sync and async
stacks.
"""

from __future__ import annotations

from typing import Any, Callable, Optional

from asgiref.sync import iscoroutinefunction, markcoroutinefunction

from . import _native
from .conf import resolved_tenant, tenant_resolver
from .context import reset_request_context, set_request_context


def _user_id(request: Any) -> Optional[str]:
    user = getattr(request, "user", None)
    if user is None or not getattr(user, "is_authenticated", False):
        return None
    return str(user.pk)


#: The request headers the core reads for the context (``context_header_names``), lowercase.
HEADER_NAMES: tuple[str, ...] = tuple(_native.context_header_names())


def context_from_request(request: Any,
                         resolver: Optional[Callable[[Any], Optional[str]]] = None
                         ) -> Callable[[], dict]:
    """The context source of one request: the headers the core reads (it maps them: trimmed,
    the first Accept-Language tag, X-Request-Id, and X-OJS-Tenant where the app trusts it),
    now; the user and the tenant (``resolver``, the ``OJS_TENANT_RESOLVER`` callable) when a
    job is staged. A resolved tenant is the context's explicit ``tenant_id``, which wins over
    the header in the core."""
    found = request.headers
    headers = {name: found[name] for name in HEADER_NAMES if name in found}

    def build() -> dict:
        context: dict = {"headers": headers} if headers else {}
        user_id = _user_id(request)
        if user_id is not None:
            context["user_id"] = user_id
        if resolver is not None:
            tenant_id = resolved_tenant(resolver, request)
            if tenant_id is not None:
                context["tenant_id"] = tenant_id
        return context

    return build


class RequestContextMiddleware:
    sync_capable = True
    async_capable = True

    def __init__(self, get_response: Callable) -> None:
        self.get_response = get_response
        # Read once, when Django loads the middleware (a server's start): a setting that
        # names no callable stops the start with an InvalidConfigError naming it.
        self.tenant_resolver = tenant_resolver()
        self.is_async = iscoroutinefunction(get_response)
        if self.is_async:
            markcoroutinefunction(self)

    def __call__(self, request: Any) -> Any:
        if self.is_async:
            return self.__acall__(request)
        token = set_request_context(context_from_request(request, self.tenant_resolver))
        try:
            return self.get_response(request)
        finally:
            reset_request_context(token)

    async def __acall__(self, request: Any) -> Any:
        token = set_request_context(context_from_request(request, self.tenant_resolver))
        try:
            return await self.get_response(request)
        finally:
            reset_request_context(token)
