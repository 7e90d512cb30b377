"""The app's URLs and error handlers, plus an API view and a plain view under ``/api/`` that
fail, for the tests of the API's JSON errors."""

from django.contrib.auth.decorators import login_not_required
from django.http import HttpRequest, HttpResponse
from django.urls import path
from django.utils.decorators import method_decorator
from rest_framework.request import Request
from rest_framework.response import Response
from rest_framework.views import APIView

from inspector.api import API_AUTHENTICATION, API_PERMISSIONS
from inspector.urls import handler400, handler403, handler404, handler500
from inspector.urls import urlpatterns as app_urlpatterns

__all__ = ["handler400", "handler403", "handler404", "handler500", "urlpatterns"]

SECRET_DETAIL = "internal state: sk-do-not-show"


@method_decorator(login_not_required, name="dispatch")
class _BrokenAPIView(APIView):
    authentication_classes = API_AUTHENTICATION
    permission_classes = API_PERMISSIONS

    def get(self, request: Request) -> Response:
        raise RuntimeError(SECRET_DETAIL)


def _broken(request: HttpRequest) -> HttpResponse:
    raise RuntimeError(SECRET_DETAIL)


urlpatterns = [
    *app_urlpatterns,
    path("api/broken", _BrokenAPIView.as_view()),
    path("api/broken-plain", _broken),
]
