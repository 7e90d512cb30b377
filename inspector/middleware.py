"""Django's middleware chain in one thread under ASGI: every view here is synchronous. Once a
page is delivered, memory it grew the process by goes back (``inspector.memory``).

Under daphne Django runs each middleware that can be asynchronous in async mode when the handler
inside it is asynchronous, and Django's own (``MiddlewareMixin``) then hand every
``process_request`` and ``process_response`` to the request's thread and back to the event loop:
about twenty thread switches for one page, a few milliseconds of a request here
(tests/inspector/test_middleware.py counts them). A synchronous-only middleware innermost makes
every middleware outside it run synchronously, one after the other in that one thread; only the
view middleware and the view itself are still handed over (Django's own request handling).
"""

from __future__ import annotations

from collections.abc import Callable

from django.core.signals import request_finished
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponseBase

from inspector import memory


class OneThreadChain:
    """Last in ``MIDDLEWARE``: passes the request on unchanged; exists for its mode alone."""

    sync_capable = True
    async_capable = False

    def __init__(self, get_response: Callable[[HttpRequest], HttpResponseBase]) -> None:
        self.get_response = get_response

    def __call__(self, request: HttpRequest) -> HttpResponseBase:
        return self.get_response(request)


@receiver(request_finished)
def _page_delivered(**_: object) -> None:
    """Once a response has been delivered, what a big page read goes back (inspector.memory)."""
    memory.release_if_grown()
