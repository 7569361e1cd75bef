"""Who may read the relay's HTTP surface (``OJS_HTTP_ACCESS``): a caller presenting the token
of ``EXAMPLE_OJS_TOKEN`` as ``Authorization: Bearer``, the operator. This example has no login;
a project with one would also let its staff in (docs/django.md, "Who may read")."""

import hmac
import os


def bearer_token(request):
    expected = os.environ.get("EXAMPLE_OJS_TOKEN", "")
    given = request.headers.get("Authorization", "").removeprefix("Bearer ")
    return bool(expected) and hmac.compare_digest(given, expected)
