"""The proxy keys page: a user's own keys, listed, made (the key shown once) and revoked.

Everyone sees and manages only their own keys here, staff included: a key is a credential, and
what it recorded is reached through its conversations, where the access rule already lets
team mates and staff in. A key that is not the user's answers 404.
"""

from __future__ import annotations

from django.contrib import messages
from django.contrib.auth.models import User
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.cache import never_cache
from django.views.decorators.http import require_POST

from conversations.proxy.keys import create_key, revoke
from conversations.proxy.models import ProxyKey
from inspector.forms import ProxyKeyForm

STATUS_BAD_REQUEST = 400


def _user(request: HttpRequest) -> User:
    assert isinstance(request.user, User)  # LoginRequiredMiddleware
    return request.user


def _page(request: HttpRequest, form: ProxyKeyForm, *, raw_key: str = "", status: int = 200) -> HttpResponse:
    keys = ProxyKey.objects.filter(user=_user(request)).select_related("profile").order_by("-created_at")
    base = request.build_absolute_uri("/").rstrip("/")
    return render(
        request,
        "inspector/proxy_keys.html",
        {"keys": keys, "form": form, "raw_key": raw_key, "base": base},
        status=status,
    )


@never_cache
def proxy_key_list(request: HttpRequest) -> HttpResponse:
    return _page(request, ProxyKeyForm())


@never_cache
@require_POST
def proxy_key_create(request: HttpRequest) -> HttpResponse:
    form = ProxyKeyForm(request.POST)
    if not form.is_valid():
        return _page(request, form, status=STATUS_BAD_REQUEST)
    data = form.cleaned_data
    key, raw = create_key(
        _user(request),
        name=data["name"],
        openai_upstream=data["openai_upstream"],
        anthropic_upstream=data["anthropic_upstream"],
        gemini_upstream=data["gemini_upstream"],
    )
    if data["profile"] is not None:
        key.profile = data["profile"]
        key.save(update_fields=["profile"])
    # Shown in this answer only (never stored, never in a redirect or a message).
    return _page(request, ProxyKeyForm(), raw_key=raw)


@require_POST
def proxy_key_revoke(request: HttpRequest, prefix: str) -> HttpResponse:
    key = ProxyKey.objects.filter(user=_user(request), prefix=prefix).first()
    if key is None:
        raise Http404("no such key of yours")
    revoke(key)
    messages.success(request, f"The key {key.prefix}… is revoked: its hosts now get 401.")
    return redirect("inspector-proxy-keys")
