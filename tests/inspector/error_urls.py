"""The app's URLs plus one that fails, for the test of the site's own 500 page."""

from django.http import HttpRequest, HttpResponse
from django.urls import path

from inspector.urls import urlpatterns as app_urlpatterns


def _broken(request: HttpRequest) -> HttpResponse:
    raise RuntimeError("a view that fails, on purpose")


urlpatterns = [*app_urlpatterns, path("broken/", _broken)]
