"""Which proxy session, and which of its turns, a key's traffic is recorded into.

A session is a conversation. With a hint (``X-Inspector-Session``, ``--session``) a key's traffic
under that hint always goes to the same one; without, it goes to the key's latest hint-less
session unless that has been quiet for ``PROXY_SESSION_GAP_SECONDS``, when a new one begins.

A session's turns follow the host's questions: a model call whose last user text differs from
the question of the turn current when the call began begins a new turn (the model calls that
carry tool results back carry the same question, so a whole agent run is one turn, as in the
loop). MCP traffic goes to the turn current when it began; before any model call, to a turn
without a question. "When" is the record's own start time, not the order records are stored
in (``turn_for``).
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Max

from conversations.models import Conversation, ModelProfile, Turn
from conversations.proxy.models import ProxyKey, ProxySession

# The paradigm a proxy conversation is shown under: a host's model calls carry native tool
# definitions as far as the proxy can tell (it does not build the requests). Its turns say what
# they are: recorded by proxy, run by the host under no paradigm of this app's (and no
# tool_choice of its own: each request shows the one it sent).
PROXY_PARADIGM = "native"
TURN_PARADIGM = "proxy"
# The placeholder profile of a key without one: never run, offered in no picker (as an
# import's: ``imported_by`` its user).
PLACEHOLDER_PREFIX = "recorded by proxy: "
NOT_KNOWN_MODEL = "as the host sent it"


def session_for(key: ProxyKey, *, hint: str | None, now: datetime, fmt: str) -> ProxySession:
    """The session ``key``'s traffic under ``hint`` goes to now, locked for this transaction
    (a new one if there is none, or the last one without a hint is past the gap). Inside a
    transaction."""
    hint = (hint or "")[:200]
    found = _locked(key, hint, now)
    if found is not None:
        return found
    # Lock the key, then look again: two first calls of a session at once make one session.
    ProxyKey.objects.select_for_update().filter(pk=key.pk).first()
    found = _locked(key, hint, now)
    if found is not None:
        return found
    conversation = Conversation.objects.create(
        owner_id=key.user_id,
        title=_title(key, hint),
        model_profile=_profile(key, fmt),
        paradigm=PROXY_PARADIGM,
        created_at=now,
    )
    return ProxySession.objects.create(
        key=key, hint=hint, conversation=conversation, created_at=now, last_activity_at=now
    )


def _locked(key: ProxyKey, hint: str, now: datetime) -> ProxySession | None:
    rows = ProxySession.objects.select_for_update().filter(key=key, hint=hint)
    if not hint:
        rows = rows.filter(last_activity_at__gte=now - timedelta(seconds=settings.PROXY_SESSION_GAP_SECONDS))
    found = rows.order_by("-last_activity_at", "-pk").first()
    if found is not None:
        # Read after the lock: the row as the last writer left it.
        found.refresh_from_db()
    return found


def _title(key: ProxyKey, hint: str) -> str:
    """The conversation's title: the key's name and the session's, cut to the column (a hint
    is up to 200 characters, as long as the whole title)."""
    name = key.name or key.prefix
    title = f"proxy · {name}" + (f" · {hint}" if hint else "")
    limit = Conversation._meta.get_field("title").max_length or len(title)
    return title if len(title) <= limit else title[: limit - 1] + "…"


def _profile(key: ProxyKey, fmt: str) -> ModelProfile:
    if key.profile_id is not None and key.profile is not None:
        return key.profile
    provider = fmt if fmt else "openai_chat"
    name = f"{PLACEHOLDER_PREFIX}{provider} · {key.user_id}"[:80]
    profile, _ = ModelProfile.objects.get_or_create(
        name=name,
        defaults={"provider": provider, "model": NOT_KNOWN_MODEL, "imported_by_id": key.user_id},
    )
    return profile


def turn_for(
    session: ProxySession,
    *,
    question: str | None,
    model: str,
    now: datetime,
    started_at: datetime | None = None,
) -> Turn:
    """The turn a record goes into, chosen by when the record was made (``started_at``; ``now``
    when not known), not by when it is stored: records are stored in another order than they
    were made (the LLM proxy's recorder threads, the stdio proxy's batches). That is the turn
    current when the record began — the session's latest one, or for a late record the latest
    one begun by then — or a new one when a model call asks a different question (``question``
    None: MCP traffic, never a new question)."""
    when = started_at or now
    current = session.turn
    if current is not None and _begun(current) > when:
        current = _at(session, when) or current
    if current is not None and (question is None or question == current.question):
        if model and not current.model_name:
            current.model_name = model[:120]
        return current
    if current is not None and not current.question and question is not None and not _has_model_call(current):
        # MCP traffic before the first model call (initialize, tools/list) belongs to it.
        current.question = question
        current.model_name = model[:120]
        return current
    if current is not None and current.pk != session.turn_id and question is not None:
        # A late call that asks a question of its own: the turn begun after it that asks the
        # same (its first call was stored first), begun from now on at this call.
        after = (
            session.conversation.turns.filter(seq__gt=current.seq, question=question).order_by("seq").first()
        )
        if (
            after is not None
            and not session.conversation.turns.filter(seq__gt=current.seq, seq__lt=after.seq).exists()
        ):
            after.started_at = min(_begun(after), when)
            return after
    seq = (session.conversation.turns.aggregate(last=Max("seq"))["last"] or 0) + 1
    turn = Turn.objects.create(
        conversation=session.conversation,
        seq=seq,
        question=question or "",
        status=Turn.Status.DONE,
        paradigm=TURN_PARADIGM,
        tool_choice="",
        model_name=model[:120],
        created_at=now,
        started_at=when,
        finished_at=when,
    )
    if session.turn is None or _begun(session.turn) <= when:
        # A late call's new turn is not the one the session's traffic goes to now.
        session.turn = turn
    return turn


def _begun(turn: Turn) -> datetime:
    return turn.started_at or turn.created_at


def _at(session: ProxySession, when: datetime) -> Turn | None:
    """The session's latest turn begun by ``when``; its first turn when all began later."""
    turns = session.conversation.turns
    begun = turns.filter(started_at__lte=when).order_by("-started_at", "-seq").first()
    return begun or turns.order_by("seq").first()


def _has_model_call(turn: Turn) -> bool:
    return turn.steps.filter(kind__in=("decide", "error"), exchanges__channel="llm").exists()
