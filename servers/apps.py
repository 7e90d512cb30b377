from django.apps import AppConfig


class ServersConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "servers"
    verbose_name = "MCP servers"

    def ready(self) -> None:
        """Fill the seams ``conversations`` leaves for the MCP side (it never imports this app):
        the turn's servers and tool host, the servers' secret values for the redactor, and the
        stale check's ending of operations nothing runs any more."""
        # Here, not at the top: the models can be imported only once the apps are loaded.
        from conversations.lifecycle import stale_check_register
        from conversations.loop.toolhost import server_source_register
        from conversations.secret_sources import secret_source_register
        from servers.models import McpServer
        from servers.operations import operations_end_stale
        from servers.selectors import server_secret_values
        from servers.toolhost import conversation_servers

        server_source_register(conversation_servers)
        secret_source_register(server_secret_values, watched={McpServer._meta.db_table: ("env", "headers")})
        stale_check_register(operations_end_stale)
