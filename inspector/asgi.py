import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "inspector.settings")
# Django must be set up before consumers (and through them, models) are imported.
django_asgi_app = get_asgi_application()

from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.sessions import CookieMiddleware, SessionMiddleware  # noqa: E402

from conversations import warm_start  # noqa: E402
from inspector import memory  # noqa: E402
from inspector.access_log import with_access_log  # noqa: E402
from inspector.consumers import SocketAuthMiddleware  # noqa: E402
from inspector.proxy_front import with_llm_proxy  # noqa: E402
from inspector.routing import websocket_urlpatterns  # noqa: E402
from inspector.security import WebsocketOriginValidator  # noqa: E402

application = ProtocolTypeRouter(
    {
        # The LLM proxy's routes are answered ahead of Django's middleware (inspector.proxy_front);
        # every request gets a line in the access log, redacted (inspector.access_log).
        "http": with_access_log(with_llm_proxy(django_asgi_app)),
        # Channels' ``AuthMiddlewareStack``, its user read outside the thread pages are rendered in.
        "websocket": WebsocketOriginValidator(
            CookieMiddleware(SessionMiddleware(SocketAuthMiddleware(URLRouter(websocket_urlpatterns))))
        ),
    }
)

# What the process holds once set up is kept for its life: no full collection walks it again
# (inspector.memory; the warm start freezes what it loads too).
memory.freeze_what_started()
# The web process is what imports this module (daphne, uvicorn): it loads what its first turn
# would load on its way (tokenizers, chat templates) in the background (WARM_START).
warm_start.start_in_background("web")
