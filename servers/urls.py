"""The workbench's URLs, included by the project at ``servers/``."""

from django.urls import path

from servers import app_views, config_views, views
from servers.hosts import views as host_views

urlpatterns = [
    path("", views.server_list, name="servers-list"),
    path("new", views.server_create, name="servers-create"),
    path("import", config_views.config_import, name="servers-config-import"),
    path("export.json", config_views.config_export, name="servers-config-export"),
    path("oauth/callback/", views.oauth_callback, name="servers-oauth-callback"),
    path("op/<uuid:public_id>/", views.operation_detail, name="servers-operation"),
    path("op/<uuid:public_id>/state", views.operation_state, name="servers-operation-state"),
    path("op/<uuid:public_id>/cancel", views.operation_cancel, name="servers-operation-cancel"),
    path("op/<uuid:public_id>/save", views.saved_call_create, name="servers-saved-call-create"),
    path(
        "op/<uuid:public_id>/questions/<int:question_id>",
        views.question_answer,
        name="servers-question-answer",
    ),
    path("op/<uuid:public_id>/app", app_views.app_open, name="servers-app-open"),
    path("op/<uuid:public_id>/app/view", app_views.app_view, name="servers-app-view"),
    path("op/<uuid:public_id>/app/call", app_views.app_tool_call, name="servers-app-call"),
    path("op/<uuid:public_id>/app/traffic", app_views.app_traffic, name="servers-app-traffic"),
    path("saved/<uuid:public_id>/run", views.saved_call_run, name="servers-saved-call-run"),
    path("saved/<uuid:public_id>/delete", views.saved_call_delete, name="servers-saved-call-delete"),
    path("<str:name>/", views.server_detail, name="servers-detail"),
    path("<str:name>/edit", views.server_edit, name="servers-edit"),
    path("<str:name>/hosts", host_views.server_hosts, name="servers-hosts"),
    path("<str:name>/toggle", views.server_toggle, name="servers-toggle"),
    path("<str:name>/connect", views.server_connect, name="servers-connect"),
    path("<str:name>/ping", views.server_ping, name="servers-ping"),
    path("<str:name>/oauth", views.server_oauth, name="servers-oauth"),
    path("<str:name>/oauth/client", views.server_oauth_client, name="servers-oauth-client"),
    path("<str:name>/oauth/share", views.server_oauth_share, name="servers-oauth-share"),
    path("<str:name>/list/<str:what>", views.server_refresh, name="servers-refresh"),
    path("<str:name>/log-level", views.server_log_level, name="servers-log-level"),
    path("<str:name>/tools/<str:tool>", views.tool_detail, name="servers-tool"),
    path("<str:name>/read", views.resource_read, name="servers-resource-read"),
    path("<str:name>/subscribe", views.resource_subscribe, name="servers-resource-subscribe"),
    path("<str:name>/prompt", views.prompt_get, name="servers-prompt-get"),
    path("<str:name>/complete", views.completion, name="servers-complete"),
    path("<str:name>/transcript", views.transcript, name="servers-transcript"),
    path("<str:name>/transcript.json", views.transcript_export, name="servers-transcript-export"),
]
