from django.apps import AppConfig
from django.core.handlers.asgi import ASGIHandler
from django.core.signals import request_started

from conversations import events
from inspector import live, memory


class InspectorConfig(AppConfig):
    default_auto_field = "django.db.models.BigAutoField"
    name = "inspector"

    def ready(self) -> None:
        # Django's place for wiring that needs the models loaded.
        from conversations.execution import serving_start  # noqa: PLC0415
        from conversations.proxy import llm  # noqa: PLC0415

        # Only requests served over ASGI (daphne: the web process) start it; the test client's
        # and the in-process demo model's (WSGI) do not.
        request_started.connect(serving_start, sender=ASGIHandler, dispatch_uid="inspector-serving-start")
        # The recorder's events ring the live view's doorbells (conversations knows no UI).
        events.subscribe(live.on_event)
        # A turn that ends may have grown the process (inspector.memory): checked at each change.
        events.subscribe(_release_after_turn)
        # And so may a proxied model call's record, stored or not.
        if memory.release_if_grown not in llm.AFTER_RECORD:
            llm.AFTER_RECORD.append(memory.release_if_grown)


def _release_after_turn(event: events.Event) -> None:
    if isinstance(event, events.TurnChanged):
        memory.release_if_grown()
