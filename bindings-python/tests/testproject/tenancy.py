"""Tenant resolvers for the tests (``OJS_TENANT_RESOLVER``): the tenant comes from the
logged-in user, as an application would take it from its own account model; here the part of
the username after ``@`` (``ada@acme`` is in tenant ``acme``)."""


def tenant_of_user(request):
    user = request.user
    if not user.is_authenticated:
        return None
    return user.username.partition("@")[2] or None


def answers_a_number(request):
    return 42


def answers_an_empty_string(request):
    return ""


NOT_CALLABLE = "a string, not a function"
