"""The app's URLs plus the demo model's routes, for tests that run before
``inspector/urls.py`` includes ``conversations.demo.urls`` at ``demo-model/``
(harmless after: the first match wins)."""

from django.urls import include, path

from inspector.urls import urlpatterns as app_urlpatterns

urlpatterns = [*app_urlpatterns, path("demo-model/", include("conversations.demo.urls"))]
