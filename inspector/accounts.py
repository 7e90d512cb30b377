"""Signing in (throttled) and the signed-in user's API token: when it expires, and revoking it."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.contrib.admin.forms import AdminAuthenticationForm
from django.contrib.auth import views as auth_views
from django.contrib.auth.forms import AuthenticationForm
from django.contrib.auth.models import User
from django.core.exceptions import ValidationError
from django.http import HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.views.decorators.http import require_GET, require_POST

from inspector.throttle import LoginThrottled, client_address, login_failure_record, login_throttle_check
from inspector.tokens import token_expires_at, token_get, token_is_expired, token_revoke


class LoginView(auth_views.LoginView):
    """Django's login page, refusing with 429 and ``Retry-After`` once attempts are throttled."""

    def post(self, request: HttpRequest, *args: Any, **kwargs: Any) -> HttpResponse:
        try:
            login_throttle_check(
                username=request.POST.get("username", ""), address=client_address(request.META)
            )
        except LoginThrottled as exc:
            context = self.get_context_data(form=self.get_form_class()(request), throttled=str(exc))
            response = self.render_to_response(context, status=429)
            response["Retry-After"] = str(exc.retry_after)
            return response
        return super().post(request, *args, **kwargs)

    def form_invalid(self, form: AuthenticationForm) -> HttpResponse:
        login_failure_record(
            username=form.data.get("username", ""), address=client_address(self.request.META)
        )
        return super().form_invalid(form)


class ThrottledAdminAuthenticationForm(AdminAuthenticationForm):
    """The admin site's login form, counting and refusing attempts with the same counters (the
    admin's own view answers 200 with the form's error; it has no hook for a status)."""

    def clean(self) -> dict[str, Any]:
        username = str(self.data.get("username", ""))
        address = client_address(self.request.META) if self.request is not None else "unknown"
        try:
            login_throttle_check(username=username, address=address)
        except LoginThrottled as exc:
            raise ValidationError(str(exc), code="throttled") from None
        try:
            return super().clean()
        except ValidationError:
            login_failure_record(username=username, address=address)
            raise


def _user(request: HttpRequest) -> User:
    assert isinstance(request.user, User)  # LoginRequiredMiddleware
    return request.user


@require_GET
def token_detail(request: HttpRequest) -> HttpResponse:
    token = token_get(user=_user(request))
    return render(
        request,
        "registration/token.html",
        {
            "token": token,
            "expires_at": token_expires_at(token) if token is not None else None,
            "expired": token is not None and token_is_expired(token),
        },
    )


@require_POST
def token_revoke_view(request: HttpRequest) -> HttpResponse:
    if token_revoke(user=_user(request)):
        messages.success(request, "Your API token is revoked: scripts using it now get 401.")
    return redirect("inspector-token")
