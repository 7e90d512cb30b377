from django.apps import AppConfig


class EvalsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "inspector.evals"
    label = "evals"
    verbose_name = "Evals"

    def ready(self) -> None:
        """Fill the seams ``conversations`` leaves (it never imports this app): an eval
        conversation offers its tools with its variant's descriptions, and the stale-work check
        of every serving process also takes over eval runs whose driver is gone."""
        # Here, not at the top: the models can be imported only once the apps are loaded.
        from conversations.lifecycle import stale_check_register
        from conversations.loop.tool_overrides import override_source_register
        from inspector.evals.execution import runs_resume_stale
        from inspector.evals.selectors import conversation_overrides

        override_source_register(conversation_overrides)
        # A run whose driver died (the web process restarted, a worker lost) is driven on.
        stale_check_register(runs_resume_stale)
