"""The conversation websocket: a thin pipe from doorbell events to rendered rows.

On connect it checks the user and the conversation, then (if the browser says what it last
saw, and what it shows) re-sends what changed since that the page would show; afterwards each
``step.changed`` / ``turn.changed`` event is rendered from the database with the same fragment templates the page uses, with the
teaching layer when the user had teaching mode on when the socket connected (docs/teaching.md §1):
switching it reloads the page, whose new socket follows the new setting. A
``step.partial`` event (a streamed reply so far, never stored) is passed on as it came, as plain
data for the page to show as text.

Access is asked again while the socket is open (``ConversationConsumer.still_admitted``): before
every catch-up, and before passing a doorbell on when the last answer is older than
``ACCESS_RECHECK_SECONDS``. A user who may no longer see the conversation (signed out, deactivated,
out of the team, the conversation no longer their team's) gets nothing more of it: the socket is
closed as ``connect`` would have refused it.

A class watching one conversation opens a socket each; every doorbell reaches all of them. The
consumers of a process render what one doorbell names once between them (``SharedRenders``),
in a thread of their own (``LIVE_RENDERS``): not in the server's one thread for synchronous work,
where every page of every user is rendered, so a class opening a long conversation's page at
once does not hold back the rows its sockets wait for, nor the rows the pages. A socket's
opening (its user, access, audit and preference reads) and its catch-up are read in threads of
their own too (``SOCKET_READS``, several: a class reconnecting at once waits on the database side
by side), so a class whose sockets reconnect while its pages load is not queued behind them.

Without Redis (the embedded default) the doorbells of another process never reach this one: the
sockets of a conversation share one watch of it (``ConversationWatches``), which reads whether it
changed once a tick and tells each of them.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import OrderedDict
from collections.abc import Callable, Coroutine, Hashable, Mapping
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, datetime
from importlib import import_module
from types import SimpleNamespace
from typing import Any, TypeVar, cast

from asgiref.sync import sync_to_async
from channels.consumer import get_handler_name
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from channels.layers import InMemoryChannelLayer
from django.conf import settings
from django.contrib import auth
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AnonymousUser
from django.http import HttpRequest

from conversations.models import Conversation
from conversations.record.audit import audit_read
from conversations.record.exchanges import release_connection
from conversations.selectors import conversation_changed_at, conversation_get, following
from inspector import live, memory
from inspector.fragments import (
    Message,
    page_view_from_json,
    render_catch_up,
    render_row,
    render_turn,
    timestamp_iso,
)
from inspector.live import StepChanged, StepPartial, TurnChanged
from inspector.preferences import preference_get

T = TypeVar("T")

logger = logging.getLogger(__name__)

CLOSE_UNAUTHENTICATED = 4401
CLOSE_NOT_FOUND = 4404
# An ISO-8601 timestamp with microseconds and an offset is 32 characters.
SINCE_MAX_CHARS = 64
# How long a socket's answer to "may its user still see the conversation?" holds for doorbells:
# a class's sockets hear many a second, and asking costs a socket two or three small reads (its
# session, often from the cache; its user; the conversation and the team). A catch-up always
# asks. So a doorbell rung after the access went may still be passed on for up to this long
# (and the render in flight when it went), never longer.
ACCESS_RECHECK_SECONDS = 5.0


class SharedRenders:
    """What one doorbell names, rendered (and made into the JSON text sent) once for every
    consumer of this process that hears it.

    A doorbell's ring is heard by each socket of the conversation's group; the first consumer to
    handle it starts the render, the others that heard the same ring wait for that render and
    send the same text. A render started once a ring has been heard reads the row at least as new
    as the commit that rang it, so it answers everyone who heard that ring, however long each
    waited in line; a later change rings again. The message depends on the conversation, the row,
    the teaching layer and whether the user follows it read-only (a viewer's rows have no buttons
    that act) alone (it is rendered without a request), all four in the key, and every consumer
    was let in to its conversation when it connected.

    A finished render is kept ``KEEP_SECONDS`` for consumers still in line, at most ``MOST`` of
    them and ``MOST_CHARS`` of their text in all (the oldest go first: one who hears its ring
    later renders it again); a failed one is forgotten at once (each consumer waiting on it fails
    as its own render would have, and one that hears the ring later tries again).
    """

    KEEP_SECONDS = 5.0
    MOST = 256
    MOST_CHARS = 32 * 1024 * 1024

    def __init__(self) -> None:
        self._renders: OrderedDict[Hashable, asyncio.Future[Any]] = OrderedDict()
        self._sizes: dict[Hashable, int] = {}
        self._chars = 0

    async def get(self, key: Hashable, render: Callable[[], Coroutine[Any, Any, T]]) -> T:
        loop = asyncio.get_running_loop()
        shared = self._renders.get(key)
        if shared is None or shared.get_loop() is not loop:
            self._drop(key)
            shared = loop.create_task(render())
            self._renders[key] = shared
            shared.add_done_callback(lambda done: self._done(key, done))
            self._bound()
        # A consumer that goes away while it waits must not cancel the others' render.
        result: T = await asyncio.shield(shared)
        return result

    def _done(self, key: Hashable, done: asyncio.Future[Any]) -> None:
        if self._renders.get(key) is not done:
            return  # dropped meanwhile: those waiting have it, nobody else will
        if done.cancelled() or done.exception() is not None:
            self._drop(key)
            return
        result = done.result()
        self._sizes[key] = len(result) if isinstance(result, str) else 0
        self._chars += self._sizes[key]
        self._bound()
        done.get_loop().call_later(self.KEEP_SECONDS, self._forget, key, done)

    def _bound(self) -> None:
        while len(self._renders) > self.MOST or self._chars > self.MOST_CHARS:
            self._drop(next(iter(self._renders)))

    def _forget(self, key: Hashable, done: asyncio.Future[Any]) -> None:
        if self._renders.get(key) is done:
            self._drop(key)

    def _drop(self, key: Hashable) -> None:
        self._renders.pop(key, None)
        self._chars -= self._sizes.pop(key, 0)

    def __len__(self) -> int:
        return len(self._renders)

    @property
    def chars(self) -> int:
        """The characters of the finished renders kept."""
        return self._chars


shared_renders = SharedRenders()

# The thread the doorbells' renders run in (one: renders of a process are shared, and one at a
# time they stay in the order they were heard). It borrows a pooled connection for each render.
LIVE_RENDERS = ThreadPoolExecutor(max_workers=1, thread_name_prefix="live-render")


# A socket's opening and catch-up: in a few threads of their own, not the server's one thread
# for synchronous work (where pages are rendered and would hold them back), several so that a
# class reconnecting at once waits on the database side by side. Each hands its pooled
# connection back after every read.
SOCKET_READS = ThreadPoolExecutor(max_workers=4, thread_name_prefix="socket-reads")


def _released(work: Callable[[], T]) -> T:
    """``work()``, then this thread's pooled connection handed back: a socket holds none while
    it waits for doorbells (channels would give it back only before the next message); and what
    a big render grew the process by given back too (``inspector.memory``: the rows it read are
    garbage now)."""
    try:
        return work()
    finally:
        release_connection()
        memory.release_if_grown()


async def _socket_read(work: Callable[[], T]) -> T:
    """``work()`` in ``SOCKET_READS``, its connection handed back."""
    return await sync_to_async(_released, thread_sensitive=False, executor=SOCKET_READS)(work)


# The longest a conversation's watch waits between reads while the database is away: after a
# failed read it waits twice as long as before, from ``LIVE_WATCH_SECONDS`` up to this.
WATCH_BACKOFF_MOST_SECONDS = 30.0
# Before a watch's first read succeeds nothing is known: its first stamp counts as a change.
_NOTHING_SEEN = datetime.min.replace(tzinfo=UTC)


class _Watch:
    """The watch of one conversation: its sockets and the task that reads for them."""

    def __init__(self, conversation: Conversation) -> None:
        self.conversation = conversation
        self.sockets: set[ConversationConsumer] = set()
        self.task = asyncio.get_running_loop().create_task(self._run())

    async def _changed_at(self) -> datetime | None:
        conversation = self.conversation
        return await _socket_read(lambda: conversation_changed_at(conversation=conversation))

    async def _run(self) -> None:
        """Read once, then every ``LIVE_WATCH_SECONDS``; a stamp newer than the last seen is told
        to every socket as ``changed``. A failed read (the database away, a lock held too long) is
        logged and tried again later, backing off; the first read after it compares with what was
        seen before, so a change made meanwhile is still told."""
        seen: datetime | None = None
        failures = 0
        first = True
        while True:
            if not first:
                interval = float(settings.LIVE_WATCH_SECONDS)
                await asyncio.sleep(min(interval * 2**failures, max(interval, WATCH_BACKOFF_MOST_SECONDS)))
            try:
                now = await self._changed_at()
            except Exception:  # the watch must outlive the database's absences
                failures = min(failures + 1, 16)
                if first:
                    seen, first = _NOTHING_SEEN, False
                logger.warning(
                    "could not read whether conversation %s changed (%d time(s) in a row)",
                    self.conversation.public_id,
                    failures,
                    exc_info=True,
                )
                continue
            failures = 0
            if first:
                seen, first = now, False
                continue
            if now is not None and (seen is None or now > seen):
                seen = now
                await self._tell({"type": "changed", "at": timestamp_iso(now)})

    async def _tell(self, message: dict[str, str]) -> None:
        """Tell every socket ``message``, side by side (each may first ask whether its user may
        still see the conversation: ``ConversationConsumer.tell``)."""

        async def tell(socket: ConversationConsumer) -> None:
            try:
                await socket.tell(message)
            except Exception:  # one socket gone wrong must not keep the news from the others
                logger.exception("could not tell a socket that its conversation changed")

        await asyncio.gather(*(tell(socket) for socket in list(self.sockets)))


class ConversationWatches:
    """The watches of this process's conversations, one per conversation however many sockets
    watch it: started with its first socket (``join``), stopped with its last (``leave``). A
    class of 30 sockets on one conversation makes one read a tick, not 30."""

    def __init__(self) -> None:
        self._watches: dict[int, _Watch] = {}

    def join(self, socket: ConversationConsumer) -> None:
        key = socket.conversation.pk
        watch = self._watches.get(key)
        if watch is None or watch.task.done() or watch.task.get_loop() is not asyncio.get_running_loop():
            if watch is not None:
                watch.task.cancel()
            watch = self._watches[key] = _Watch(socket.conversation)
        watch.sockets.add(socket)

    def leave(self, socket: ConversationConsumer) -> None:
        key = socket.conversation.pk
        watch = self._watches.get(key)
        if watch is None:
            return
        watch.sockets.discard(socket)
        if not watch.sockets:
            watch.task.cancel()
            del self._watches[key]

    def __len__(self) -> int:
        return len(self._watches)


watches = ConversationWatches()


class SocketAuthMiddleware:
    """Puts the user of the socket's session cookie in ``scope["user"]`` (Django's
    ``auth.get_user`` on the session ``SessionMiddleware`` opened, as channels' ``AuthMiddleware``
    would find them), read in ``SOCKET_READS`` rather than in the server's thread for pages. The
    pattern of channels' documented custom authentication middleware."""

    def __init__(self, app: Any) -> None:
        self.app = app

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> Any:
        if "session" not in scope:
            raise ValueError("SocketAuthMiddleware needs SessionMiddleware around it")
        # ``auth.get_user`` reads only the request's session (and flushes it when the user's
        # password changed since), so the socket's session stands in for the request.
        holder = cast(HttpRequest, SimpleNamespace(session=scope["session"]))
        user = await _socket_read(lambda: auth.get_user(holder))
        return await self.app(dict(scope, user=user), receive, send)


def _admitted(user: Any, public_id: str) -> tuple[Conversation, bool] | None:
    """The conversation ``user`` may watch and their teaching preference; None: not theirs.
    The socket streams every row of the conversation, so its opening is a read, as a page's is."""
    try:
        conversation = conversation_get(user=user, public_id=public_id)
    except Conversation.DoesNotExist:
        return None
    audit_read(actor=user, conversation=conversation, via="websocket")
    # Asked here, once (it is cached on the conversation the socket keeps), not by the socket's
    # first doorbell: that is a new turn's status, just before its first row (P2).
    conversation.read_only  # noqa: B018
    return conversation, preference_get(user=user).teaching


def _user_now(scope: Mapping[str, Any]) -> Any:
    """The socket's user as a request made now would find them: from its session read afresh
    from the store (``auth.get_user``: none once signed out or the session expired, nor once the
    user is deactivated or changed password), anonymous if that is no longer the user the socket
    opened with. A scope without a session (put together by hand, without ``SessionMiddleware``,
    as tests do) has only its user: read again by id, anonymous if gone or deactivated."""
    user = scope["user"]
    session = scope.get("session")
    if session is None:
        found = get_user_model()._default_manager.filter(pk=user.pk, is_active=True).first()
        return found or AnonymousUser()
    if session.session_key is None:
        return AnonymousUser()
    store = import_module(settings.SESSION_ENGINE).SessionStore(session.session_key)
    fresh = auth.get_user(cast(HttpRequest, SimpleNamespace(session=store)))
    return fresh if fresh.is_authenticated and fresh.pk == user.pk else AnonymousUser()


def _refused(*, scope: Mapping[str, Any], public_id: str) -> int | None:
    """The code to close a socket with whose user may no longer see the conversation
    ``public_id`` (the one ``connect`` would refuse it with now: ``CLOSE_UNAUTHENTICATED`` for a
    user signed out or deactivated, ``CLOSE_NOT_FOUND`` for a conversation gone or no longer
    theirs or their team's); None while they still may. Read afresh, as a page's request would:
    the user in the scope is the one read when the socket opened."""
    user = _user_now(scope)
    if not user.is_authenticated:
        return CLOSE_UNAUTHENTICATED
    try:
        conversation_get(user=user, public_id=public_id, with_owner=False)
    except Conversation.DoesNotExist:
        return CLOSE_NOT_FOUND
    return None


class ConversationConsumer(AsyncJsonWebsocketConsumer):
    conversation: Conversation
    group: str
    teaching: bool = False
    watching: bool = False
    # When the access was last found still granted (``time.monotonic``), and the code the socket
    # was closed with once it was not.
    admitted_at: float = 0.0
    refused: int | None = None
    asking: asyncio.Lock

    async def dispatch(self, message: dict[str, Any]) -> None:
        """Channels first tidies the database connections of the server's thread for synchronous
        work before every message a consumer handles: a hop there per message and socket, behind
        every page being rendered. This consumer reads nothing in that thread (doorbells are
        rendered in ``LIVE_RENDERS``, openings and catch-ups read in ``SOCKET_READS``, each
        handing its connection back), so it skips the hop."""
        handler = getattr(self, get_handler_name(message), None)
        if handler is None:
            raise ValueError(f"no handler for message type {message['type']}")
        await handler(message)

    async def connect(self) -> None:
        user = self.scope.get("user")
        if user is None or not user.is_authenticated:
            await self.close(code=CLOSE_UNAUTHENTICATED)
            return
        public_id = self.scope["url_route"]["kwargs"]["public_id"]
        asked = time.monotonic()
        admitted = await _socket_read(lambda: _admitted(user, public_id))
        if admitted is None:
            await self.close(code=CLOSE_NOT_FOUND)
            return
        # Teaching is read once: the rows this socket sends are for the page that opened it,
        # rendered with the preference that page was rendered with.
        self.conversation, self.teaching = admitted
        self.admitted_at, self.asking = asked, asyncio.Lock()
        live.bind_server_loop(asyncio.get_running_loop())
        self.group = live.conversation_group(self.conversation.public_id)
        await self.channel_layer.group_add(self.group, self.channel_name)
        await self.accept()
        if isinstance(self.channel_layer, InMemoryChannelLayer):
            # Without Redis the doorbells stay in their process: a row another process stores (a
            # ``manage.py proxy stdio`` beside the embedded server, an ``ask``) rings nothing here.
            # The conversation's watch tells the page to catch up (``changed``) instead.
            self.watching = True
            watches.join(self)

    async def still_admitted(self, *, now: bool) -> bool:
        """Whether this socket's user may still see its conversation; if not, the socket is
        closed (once) with the code ``connect`` would refuse it with now, and sends nothing more.

        Asked afresh (``_refused``) when ``now`` (a catch-up: it would send the whole
        conversation) or when the last answer is older than ``ACCESS_RECHECK_SECONDS`` (a
        doorbell: hundreds of sockets may hear many a second, a read each would be a query per
        doorbell per socket). A read that fails (the database away) fails the message, as its
        render would. The lock: the watch tells a socket ``changed`` beside its own messages,
        and one read answers both."""
        async with self.asking:
            if self.refused is not None:
                return False
            asked = time.monotonic()
            if not now and asked - self.admitted_at < ACCESS_RECHECK_SECONDS:
                return True
            scope, public_id = self.scope, str(self.conversation.public_id)
            refused = await _socket_read(lambda: _refused(scope=scope, public_id=public_id))
            if refused is None:
                self.admitted_at = asked
                return True
            self.refused = refused
        await self.close(code=refused)
        return False

    async def tell(self, message: dict[str, str]) -> None:
        """Send the watch's ``message`` (the conversation changed) if the user may still see it."""
        if await self.still_admitted(now=False):
            await self.send_json(message)

    async def disconnect(self, code: int) -> None:
        if self.watching:
            watches.leave(self)
        if hasattr(self, "group"):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive(
        self, text_data: str | None = None, bytes_data: bytes | None = None, **kwargs: Any
    ) -> None:
        """A frame that is not JSON text (binary, malformed, nested past the parser's depth) gets
        an error message; the socket stays open."""
        if text_data is None:
            await self.send_json({"type": "error", "message": "frames must be JSON text"})
            return
        try:
            content = await self.decode_json(text_data)
        except (ValueError, RecursionError):
            await self.send_json({"type": "error", "message": "a frame was not JSON"})
            return
        await self.receive_json(content, **kwargs)

    async def receive_json(self, content: Any, **kwargs: Any) -> None:
        """``{"type": "catch_up", "since": ISO-8601, "view": {...}}``: re-send rows and turns
        changed since then; with the page's ``view`` (``fragments.page_view_from_json``), only
        those the page would apply. A view that is refused gets an error message and the whole
        catch-up: the view only saves work. A user who may no longer see the conversation gets
        nothing of it: the socket is closed (``still_admitted``)."""
        if not isinstance(content, dict) or content.get("type") != "catch_up":
            return
        if not await self.still_admitted(now=True):
            return
        raw_since = content.get("since")
        try:
            if not isinstance(raw_since, str) or len(raw_since) > SINCE_MAX_CHARS:
                raise ValueError(raw_since)
            since = datetime.fromisoformat(raw_since)
        except ValueError:
            await self.send_json({"type": "error", "message": "catch_up needs an ISO-8601 'since'"})
            return
        view = None
        if content.get("view") is not None:
            try:
                view = page_view_from_json(content["view"])
            except ValueError as exc:
                await self.send_json({"type": "error", "message": f"catch_up: {exc}; sending everything"})
        conversation, teaching = self.conversation, self.teaching
        messages = await _socket_read(
            lambda: render_catch_up(conversation=conversation, since=since, teaching=teaching, view=view)
        )
        for message in messages:
            await self.send_json(message)
        rows = sum(1 for message in messages if message["type"] == "row")
        await self.send_json({"type": "caught_up", "turns": len(messages) - rows, "rows": rows})

    async def step_changed(self, event: StepChanged) -> None:
        step_id = event["step_id"]
        await self._send_rendered(
            event,
            ("row", step_id),
            lambda: render_row(conversation=self.conversation, step_id=step_id, teaching=self.teaching),
        )

    async def turn_changed(self, event: TurnChanged) -> None:
        turn_id = event["turn_id"]
        await self._send_rendered(
            event,
            ("turn", turn_id),
            lambda: render_turn(conversation=self.conversation, turn_id=turn_id, teaching=self.teaching),
        )

    async def _send_rendered(
        self, event: StepChanged | TurnChanged, what: tuple[str, int], render: Callable[[], Message | None]
    ) -> None:
        """Send the message ``render`` makes from the database (nothing for None), as JSON text
        made once for every consumer of this process that heard the same ring; a doorbell without
        a ring (from an older sender) is rendered for this consumer alone. Nothing once the user
        may no longer see the conversation (``still_admitted``)."""
        if not await self.still_admitted(now=False):
            return

        async def text() -> str | None:
            message = await sync_to_async(_released, thread_sensitive=False, executor=LIVE_RENDERS)(render)
            return None if message is None else str(await self.encode_json(message))

        ring = event.get("ring")
        if isinstance(ring, str):
            key = (ring, *what, self.conversation.pk, self.teaching, following(self.conversation))
            made = await shared_renders.get(key, text)
        else:
            made = await text()
        if made is not None:
            await self.send(text_data=made)

    async def step_partial(self, event: StepPartial) -> None:
        if not await self.still_admitted(now=False):
            return
        await self.send_json(
            {
                "type": "partial",
                "turn_id": event["turn_id"],
                "step_id": event["step_id"],
                "text": event["text"],
                "calls": event["calls"],
            }
        )
