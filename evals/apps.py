from django.apps import AppConfig


class EvalsConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "evals"
    verbose_name = "Evals"

    def ready(self) -> None:
        """Fill the seam ``conversations`` leaves for tool-definition overrides (it never imports
        this app): an eval conversation offers its tools with its variant's descriptions."""
        # Here, not at the top: the models can be imported only once the apps are loaded.
        from conversations.tool_overrides import override_source_register
        from evals.selectors import conversation_overrides

        override_source_register(conversation_overrides)
