from django.apps import AppConfig


class ServersConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "servers"
    verbose_name = "MCP servers"

    def ready(self) -> None:
        """Fill the seams ``conversations`` leaves for the MCP side (it never imports this app):
        the turn's servers and tool host, and the servers' secret values for the redactor."""
        # Here, not at the top: the models can be imported only once the apps are loaded.
        from conversations.secret_sources import secret_source_register
        from conversations.toolhost import server_source_register
        from servers.selectors import server_secret_values
        from servers.toolhost import conversation_servers

        server_source_register(conversation_servers)
        secret_source_register(server_secret_values)
