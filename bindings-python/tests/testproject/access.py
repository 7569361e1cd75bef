"""Access policies for the mount's tests (``OJS_HTTP_ACCESS``): bearer tokens that stand for
the operator or for one tenant, else the default rule (active staff)."""

#: token -> True (the operator) or a tenant id.
TOKENS = {"operator-token": True, "acme-token": "acme", "globex-token": "globex"}


def by_token(request):
    header = request.headers.get("Authorization", "")
    if header.startswith("Bearer "):
        return TOKENS.get(header[len("Bearer "):], False)
    user = request.user
    return bool(user.is_active and user.is_staff)


def answers_nonsense(request):
    return 42


NOT_CALLABLE = "a string, not a function"
