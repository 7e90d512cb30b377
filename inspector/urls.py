from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.contrib.auth.decorators import login_not_required
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView

from conversations.demo import urls as demo_urls
from inspector import accounts, api, api_errors, evals_views, paging_views, proxy_views, views

# The admin's own login page counts and refuses password guesses like the site's login.
admin.site.login_form = accounts.ThrottledAdminAuthenticationForm

# Under /api/ every error is JSON; elsewhere the site's own pages (inspector.api_errors).
handler400 = api_errors.bad_request
handler403 = api_errors.permission_denied
handler404 = api_errors.page_not_found
handler500 = api_errors.server_error

urlpatterns = [
    # Browsers ask for /favicon.ico whatever the page links: the icon, for anyone, signed in or not.
    path(
        "favicon.ico",
        login_not_required(RedirectView.as_view(url=static("img/favicon.svg"), permanent=True)),
        name="inspector-favicon",
    ),
    path("", views.conversation_list, name="inspector-conversations"),
    path("conversations/new", views.conversation_create, name="inspector-conversation-create"),
    path("conversations/import", views.conversation_import, name="inspector-conversation-import"),
    path("c/<uuid:public_id>/", views.conversation_detail, name="inspector-conversation"),
    path("c/<uuid:public_id>/ask", views.turn_create, name="inspector-turn-create"),
    path("c/<uuid:public_id>/rows", views.conversation_rows, name="inspector-conversation-rows"),
    path("c/<uuid:public_id>/export", views.conversation_export, name="inspector-conversation-export"),
    path(
        "c/<uuid:public_id>/exchanges/<int:exchange_id>/body",
        views.exchange_body,
        name="inspector-exchange-body",
    ),
    path(
        "c/<uuid:public_id>/steps/<int:step_id>/prompt",
        views.step_prompt,
        name="inspector-step-prompt",
    ),
    path(
        "c/<uuid:public_id>/steps/<int:step_id>/prompt-diff",
        views.step_prompt_diff,
        name="inspector-step-prompt-diff",
    ),
    path("c/<uuid:public_id>/chain", views.conversation_chain, name="inspector-conversation-chain"),
    path("c/<uuid:public_id>/turns/earlier", views.turns_earlier, name="inspector-turns-earlier"),
    path("c/<uuid:public_id>/turns/<int:turn_id>/", views.turn_detail, name="inspector-turn"),
    path(
        "c/<uuid:public_id>/turns/<int:turn_id>/steps", paging_views.turn_steps, name="inspector-turn-steps"
    ),
    path("c/<uuid:public_id>/turns/<int:turn_id>/replay", views.turn_replay, name="inspector-turn-replay"),
    path("c/<uuid:public_id>/turns/<int:turn_id>/cancel", views.turn_cancel, name="inspector-turn-cancel"),
    path("c/<uuid:public_id>/turns/<int:turn_id>/walk", views.turn_walk, name="inspector-turn-walk"),
    path(
        "c/<uuid:public_id>/steps/<int:step_id>/calls", paging_views.step_calls, name="inspector-step-calls"
    ),
    path("c/<uuid:public_id>/steps/<int:step_id>/app", views.step_app, name="inspector-step-app"),
    path("servers/", include("servers.urls")),
    path("proxy/<str:key>/", include("servers.proxy.urls")),
    path("compare/", views.comparison_list, name="inspector-comparisons"),
    path("compare/new", views.comparison_create, name="inspector-comparison-create"),
    path("compare/providers", views.comparison_providers_create, name="inspector-comparison-providers"),
    path("compare/<uuid:public_id>/", views.comparison_detail, name="inspector-comparison"),
    path("compare/<uuid:public_id>/summary", views.comparison_summary, name="inspector-comparison-summary"),
    path("evals/", evals_views.suite_list, name="inspector-evals"),
    path("evals/new", evals_views.suite_create, name="inspector-eval-suite-create"),
    path("evals/upload", evals_views.suite_upload, name="inspector-eval-suite-upload"),
    path("evals/<uuid:public_id>/", evals_views.suite_detail, name="inspector-eval-suite"),
    path("evals/<uuid:public_id>/edit", evals_views.suite_update, name="inspector-eval-suite-update"),
    path("evals/<uuid:public_id>/delete", evals_views.suite_delete, name="inspector-eval-suite-delete"),
    path("evals/<uuid:public_id>/run", evals_views.run_create, name="inspector-eval-run-create"),
    path("evals/runs/<uuid:public_id>/", evals_views.run_detail, name="inspector-eval-run"),
    path(
        "evals/runs/<uuid:public_id>/progress", evals_views.run_progress, name="inspector-eval-run-progress"
    ),
    path("evals/runs/<uuid:public_id>/results", evals_views.run_results, name="inspector-eval-run-results"),
    path("evals/runs/<uuid:public_id>/cancel", evals_views.run_cancel, name="inspector-eval-run-cancel"),
    path("evals/runs/<uuid:public_id>/compare", evals_views.run_compare, name="inspector-eval-run-compare"),
    path("accounts/login/", accounts.LoginView.as_view(), name="login"),
    path("accounts/token", accounts.token_detail, name="inspector-token"),
    path("accounts/preferences", views.preferences_update, name="inspector-preferences"),
    path("profiles/", views.profile_list, name="inspector-profiles"),
    path("proxy-keys/", proxy_views.proxy_key_list, name="inspector-proxy-keys"),
    path("proxy-keys/new", proxy_views.proxy_key_create, name="inspector-proxy-key-create"),
    path("proxy-keys/<str:prefix>/revoke", proxy_views.proxy_key_revoke, name="inspector-proxy-key-revoke"),
    path("profiles/reset", views.profile_reset, name="inspector-profile-reset"),
    path("profiles/price", views.profile_price, name="inspector-profile-price"),
    path("accounts/token/revoke", accounts.token_revoke_view, name="inspector-token-revoke"),
    path("accounts/logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("admin/", admin.site.urls),
    path("api/openapi.json", api.OpenApiView.as_view(), name="api-openapi"),
    path("api/token", api.token_obtain_or_revoke, name="api-token"),
    path("api/conversations", api.ConversationListView.as_view(), name="api-conversations"),
    path(
        "api/conversations/<uuid:public_id>",
        api.ConversationTranscriptView.as_view(),
        name="api-conversation",
    ),
    path("api/turns/<int:turn_id>/steps", api.TurnStepsView.as_view(), name="api-turn-steps"),
    path("api/turns/<int:turn_id>/cancel", api.TurnCancelView.as_view(), name="api-turn-cancel"),
    path("api/evals/suites", api.EvalSuiteListView.as_view(), name="api-eval-suites"),
    path("api/evals/suites/<uuid:public_id>", api.EvalSuiteDetailView.as_view(), name="api-eval-suite"),
    path("api/evals/runs", api.EvalRunListView.as_view(), name="api-eval-runs"),
    path("api/evals/runs/<uuid:public_id>", api.EvalRunDetailView.as_view(), name="api-eval-run"),
    path(
        "api/evals/runs/<uuid:public_id>/cancel", api.EvalRunCancelView.as_view(), name="api-eval-run-cancel"
    ),
    path(demo_urls.MOUNT, include(demo_urls)),
    path("proxy/<str:key>/", include("conversations.proxy.urls")),
]
