"""Access policies for the mount's tests (``OJS_HTTP_ACCESS``): bearer tokens that stand for
the operator or for one tenant, else the default rule (active staff)."""

import hmac

#: token -> True (the operator) or a tenant id.
TOKENS = {"operator-token": True, "acme-token": "acme", "globex-token": "globex"}


def by_token(request):
    header = request.headers.get("Authorization", "")
    if header.startswith("Bearer "):
        given = header[len("Bearer "):].encode()
        # As an application compares secrets: in constant time, against every known token
        # (a dict lookup would hash the guess and compare it with a short-circuiting ==).
        verdict = False
        for token, grants in TOKENS.items():
            if hmac.compare_digest(given, token.encode()):
                verdict = grants
        return verdict
    user = request.user
    return bool(user.is_active and user.is_staff)


def answers_nonsense(request):
    return 42


def answers_a_user(request):
    return request.user


NOT_CALLABLE = "a string, not a function"


def read_only(request):
    """Everyone who is logged in reads the dashboard; nobody writes."""
    return {"read_only": True} if request.user.is_authenticated else False
