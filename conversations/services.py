"""Writes about conversations: start them, add turns, replay them, export and import them, set up
the demo profile, and the read-audit log."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import httpx2
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import transaction
from django.db.models import Model
from django.utils import timezone

from conversations import events
from conversations.chat_templates import DEMO_CHAT_TEMPLATE, DEMO_CHAT_TEMPLATE_SOURCE, DEMO_TOKENIZER
from conversations.execution import turn_dispatch
from conversations.lifecycle import turn_signal_local, turn_step_record
from conversations.loop.providers import PROVIDERS
from conversations.loop.splicing import LLAMA_CPP_SOURCE, probe_request, server_template
from conversations.models import AuditEvent, Comparison, Conversation, Exchange, ModelProfile, Turn
from conversations.proxy.sessions import TURN_PARADIGM
from conversations.record.audit import audit_record
from conversations.record.transcripts.export import ExportFormat, transcript_export_bytes
from conversations.record.transcripts.importing import IMPORTED_PROFILE_PREFIX
from conversations.record.transcripts.otel_import import conversation_files_import
from conversations.redaction import Redactor
from conversations.secret_sources import active_redactor
from conversations.typealias import JSONDict, JSONValue

DEMO_PROFILE_NAME = "demo"


class TurnInProgress(ValueError):
    """The conversation's last turn has not finished: a new question must wait for it (each
    turn's history is the previous turn's transcript). Cancel it, or wait."""


class TurnNotCancellable(ValueError):
    """The turn has already finished: there is nothing to cancel."""


def turn_start(
    *,
    conversation: Conversation,
    question: str,
    dispatch: bool = True,
    redact: Redactor | None = None,
    asked_by: AbstractBaseUser | None = None,
) -> Turn:
    """Queue a new turn; it is handed to the runner only once this transaction commits.

    A conversation whose last turn is done, failed, interrupted or cancelled takes the question;
    the check is made under the conversation's row lock, so two questions at once cannot both
    pass it. ``redact``: the redactor the caller built for this request (else one is built: it
    reads the secrets and rules every time). ``asked_by``: who asks (a team mate, in a shared
    conversation; None: the owner); the turn's servers are reached with their OAuth grants.

    Raises:
        ValueError: the conversation was imported and is read-only.
        TurnInProgress: the conversation's last turn is still queued or running.
    """
    if conversation.read_only:
        raise ValueError(
            "this conversation was recorded by a proxy and is read-only"
            if conversation.recorded_by_proxy
            else "this conversation was imported from a transcript and is read-only"
        )
    # Stored, shown and sent as redacted: a secret pasted into a question goes nowhere.
    question = (redact or active_redactor()).text(question)
    with transaction.atomic():
        # The conversation's row lock, then its last turn.
        # Unordered (the default ordering would sort the one row), by the column itself.
        list(
            Conversation.objects.select_for_update()
            .filter(pk=conversation.pk)
            .order_by()
            .values_list("pk", flat=True)
        )
        previous = (
            Turn.objects.filter(conversation_id=conversation.pk)
            .order_by("-seq")
            .values_list("seq", "status")
            .first()
        )
        last, status = previous if previous else (0, None)
        if status is not None and status not in Turn.FINISHED:
            raise TurnInProgress(
                f"the previous turn is still {status}: ask again when it has finished, or cancel it"
            )
        turn = Turn.objects.create(
            conversation=conversation,
            seq=last + 1,
            question=question,
            asked_by_id=asked_by.pk if asked_by is not None else conversation.owner_id,
            paradigm=conversation.paradigm,
            tool_choice=conversation.tool_choice,
            tool_choice_name=conversation.tool_choice_name,
            model_name=conversation.model_profile.model,
        )
        if dispatch:
            transaction.on_commit(lambda: turn_dispatch(turn.pk))
    return turn


def _title(question: str) -> str:
    return question.strip().splitlines()[0][:200] if question.strip() else "untitled"


def turn_cancel(*, turn: Turn, actor: AbstractBaseUser | None) -> Turn:
    """Stop a queued or running turn; it ends ``cancelled``, keeping what it recorded.

    A queued turn is cancelled at once (a task that picks it up later finds it not queued). For a
    running turn the request is written to the database, where the process running it (this one
    or a worker) sees it within ``TURN_CANCEL_POLL_SECONDS`` and abandons the model or tool call
    in flight; its last step then says who cancelled (``actor``, or "the command line" for
    None). Asking twice changes nothing. Access is the caller's to check
    (``selectors.turn_for_cancel``).

    Raises:
        TurnNotCancellable: the turn has already finished.
    """
    who = actor.get_username() if actor is not None else "the command line"
    now = timezone.now()
    text = f"cancelled by {who} before it started"
    with transaction.atomic():
        queued = Turn.objects.filter(pk=turn.pk, status=Turn.Status.QUEUED).update(
            status=Turn.Status.CANCELLED,
            cancel_requested_at=now,
            cancel_requested_by=who,
            error=text,
            finished_at=now,
            updated_at=now,
        )
        if queued:
            turn_step_record(turn_id=turn.pk, title=f"cancelled by {who}", error=text)
    requested = not queued and Turn.objects.filter(
        pk=turn.pk, status=Turn.Status.RUNNING, cancel_requested_at__isnull=True
    ).update(cancel_requested_at=now, cancel_requested_by=who, updated_at=now)
    if requested:
        turn_signal_local(turn_id=turn.pk, by=who)
        events.emit(events.TurnChanged(conversation_id=turn.conversation.public_id, turn_id=turn.pk))
    turn.refresh_from_db()
    if turn.status != Turn.Status.RUNNING and turn.cancel_requested_at is None:
        raise TurnNotCancellable(f"this turn has already finished ({turn.status})")
    return turn


def conversation_start(
    *,
    owner: AbstractBaseUser,
    model_profile: ModelProfile,
    question: str,
    servers: Iterable[Model],
    paradigm: str = "native",
    tool_choice: str = "auto",
    tool_choice_name: str = "",
    comparison: Comparison | None = None,
    dispatch: bool = True,
    redact: Redactor | None = None,
) -> tuple[Conversation, Turn]:
    """Create a conversation and queue its first turn; ``servers`` are ``servers.McpServer`` rows.
    ``redact``: as ``turn_start``'s (one redactor for the title and the question)."""
    redact = redact or active_redactor()
    with transaction.atomic():
        conversation = Conversation.objects.create(
            comparison=comparison,
            owner_id=owner.pk,
            title=_title(redact.text(question)),
            model_profile=model_profile,
            paradigm=paradigm,
            tool_choice=tool_choice,
            tool_choice_name=tool_choice_name if tool_choice == "named" else "",
        )
        conversation.servers.set([server.pk for server in servers])
        turn = turn_start(conversation=conversation, question=question, dispatch=dispatch, redact=redact)
    return conversation, turn


def comparison_start(
    *,
    owner: AbstractBaseUser,
    question: str,
    runs: Iterable[tuple[ModelProfile, str]],
    servers: Iterable[Model],
    tool_choice: str = "auto",
    tool_choice_name: str = "",
    dispatch: bool = True,
) -> tuple[Comparison, list[Turn]]:
    """One question under several (model profile, paradigm) runs: ordinary conversations, grouped.

    Raises:
        ValueError: fewer than two runs, or the same run twice.
    """
    runs = list(runs)
    if len(runs) < 2:
        raise ValueError("a comparison needs at least two runs")
    if len({(profile.pk, paradigm) for profile, paradigm in runs}) != len(runs):
        raise ValueError("each run must differ in model or paradigm")
    servers = list(servers)
    redact = active_redactor()
    with transaction.atomic():
        comparison = Comparison.objects.create(owner_id=owner.pk, question=redact.text(question))
        turns = [
            conversation_start(
                owner=owner,
                model_profile=profile,
                question=question,
                servers=servers,
                paradigm=paradigm,
                tool_choice=tool_choice,
                tool_choice_name=tool_choice_name,
                comparison=comparison,
                dispatch=dispatch,
                redact=redact,
            )[1]
            for profile, paradigm in runs
        ]
    return comparison, turns


def demo_format_profile_name(provider: str, *, stream: bool) -> str:
    """The name of the demo model's profile in ``provider``'s wire format, e.g. ``demo gemini streamed``."""
    return f"{DEMO_PROFILE_NAME} {provider}{' streamed' if stream else ''}"


def demo_format_profile_names() -> set[str]:
    """Every demo wire-format profile name, whole and streamed."""
    return {demo_format_profile_name(key, stream=stream) for key in PROVIDERS for stream in (False, True)}


def _demo_template(provider: str) -> dict[str, str]:
    """The chat template fields of a demo profile in ``provider``'s format: the demo's own template
    for Chat Completions (the format an open-weight engine such as vLLM serves, where the demo
    renders it and reads the text), none for the hosted formats (docs/chat-templates.md §6)."""
    if provider != "openai_chat":
        return {"chat_template": "", "chat_template_source": "", "tokenizer": ""}
    return {
        "chat_template": DEMO_CHAT_TEMPLATE,
        "chat_template_source": DEMO_CHAT_TEMPLATE_SOURCE,
        # Counted with the tokenizer of the template's family, as the demo counts what it reads.
        "tokenizer": DEMO_TOKENIZER,
    }


def demo_format_profiles_ensure(*, stream: bool) -> list[ModelProfile]:
    """One demo model profile per provider wire format (served in-process, each in its format),
    streamed or not, created on first use; in registry order. The Chat Completions one carries
    the demo's chat template."""
    profiles = []
    for key in PROVIDERS:
        profile, _ = ModelProfile.objects.update_or_create(
            name=demo_format_profile_name(key, stream=stream),
            defaults={
                "provider": key,
                "model": "demo",
                "api_key_env": "DEMO_MODEL_API_KEY",
                "is_demo": True,
                "stream": stream,
                **_demo_template(key),
            },
        )
        profiles.append(profile)
    return profiles


def comparison_providers_start(
    *, owner: AbstractBaseUser, question: str, stream: bool, servers: Iterable[Model], dispatch: bool = True
) -> tuple[Comparison, list[Turn]]:
    """The question under the demo model in every provider wire format (native tool calling, with
    ``servers``: the compare view's are the demo MCP server): the same call, once per format, for
    the compare view's wire-format section."""
    return comparison_start(
        owner=owner,
        question=question,
        runs=[(profile, "native") for profile in demo_format_profiles_ensure(stream=stream)],
        servers=servers,
        dispatch=dispatch,
    )


def profile_probe(*, profile: ModelProfile, client: httpx2.Client | None = None) -> list[str]:
    """Ask the profile's engine for its chat template and tool support, and keep what it says.

    llama.cpp (``GET /props``: ``chat_template`` and ``chat_template_tool_use``, both kept) and Ollama
    (``POST /api/show``: ``template``, ``capabilities``) describe themselves; hosted APIs do not,
    and nothing is changed for them. Returns notes for the user.
    """
    if profile.is_demo and not profile.base_url:
        return ["the demo model is served by this app: there is no engine to ask"]
    if not profile.base_url:
        return ["no base URL: hosted APIs do not publish their chat template"]
    seen: dict[str, JSONDict] = {}
    http = client or httpx2.Client(timeout=5)

    def get_json(url: str) -> JSONDict | None:
        method, target, body = probe_request(url)
        try:
            response = http.request(method, target, json=body)
            data = response.json() if response.is_success else None
        except (httpx2.HTTPError, ValueError):
            return None
        if isinstance(data, dict):
            seen[target] = data
            return data
        return None

    notes: list[str] = []
    found = server_template(profile.base_url, profile.model, get_json)
    if found is not None:
        profile.chat_template = found.template
        profile.chat_templates = dict(found.named)
        profile.chat_template_source = found.source
        profile.special_tokens = dict(found.special_tokens)
        if found.source == LLAMA_CPP_SOURCE:
            keys = ["chat_template", *(["chat_template_tool_use"] if found.named else [])]
            notes.append(f"chat template read from {found.source} ({', '.join(keys)})")
        else:
            notes.append(f"chat template read from {found.source}")
    else:
        notes.append("the engine published no chat template (not llama.cpp or Ollama?)")
    for url, data in seen.items():
        capabilities = data.get("capabilities")
        if url.endswith("/api/show") and isinstance(capabilities, list):
            supports = "tools" in capabilities
            profile.native_tools = "yes" if supports else "no"
            notes.append(f"Ollama says the model {'supports' if supports else 'does not support'} tools")
        if url.endswith("/props") and "chat_template" in data:
            supports = bool(data.get("chat_template_tool_use")) or "tools" in str(
                data.get("chat_template", "")
            )
            profile.native_tools = "yes" if supports else "unknown"
            notes.append(
                "llama.cpp " + ("has a tool-use template" if supports else "shows no tool-use template")
            )
    profile.save()
    return notes


def demo_profile_ensure() -> ModelProfile:
    """The demo model profile, created on first use (served in-process by this app), with the
    demo's chat template: its prompts are the exact text the demo reads."""
    profile, _ = ModelProfile.objects.update_or_create(
        name=DEMO_PROFILE_NAME,
        defaults={
            "provider": "openai_chat",
            "model": "demo",
            "api_key_env": "DEMO_MODEL_API_KEY",
            "is_demo": True,
            "native_tools": "yes",
            "structured_output": "yes",
            "parallel_calls": "yes",
            **_demo_template("openai_chat"),
        },
    )
    return profile


def conversation_export(
    *, conversation: Conversation, fmt: ExportFormat, actor: AbstractBaseUser | None, via: str
) -> bytes:
    """The conversation as a file in ``fmt`` (``transcripts.transcript_export_bytes``), audited "exported"."""
    data = transcript_export_bytes(conversation=conversation, fmt=fmt)
    audit_record(
        actor=actor,
        action=AuditEvent.Action.EXPORTED,
        conversation=conversation,
        detail={"format": fmt, "via": via, "bytes": len(data)},
    )
    return data


def conversation_import(*, data: str | bytes, actor: AbstractBaseUser, source: str) -> Conversation:
    """Import an exported ``json`` transcript, or OTLP traces (``otel_import``), as a read-only
    conversation of ``actor``, audited.

    ``source`` says where the data came from (a file name) for the audit log.

    Raises:
        TranscriptError: the data is not an importable transcript (nothing is stored then).
    """
    conversations = conversation_files_import(data=data, owner=actor)  # OTLP may hold several
    for conversation in conversations:
        meta = conversation.imported_meta or {}
        audit_record(
            actor=actor,
            action=AuditEvent.Action.IMPORTED,
            conversation=conversation,
            detail={
                "original_id": meta.get("original_id"),
                "from": source,
                "owner": actor.get_username(),
                "claimed_owner": meta.get("owner"),
                "verification": meta.get("verification"),
                "turns": conversation.turns.count(),
                "exchanges": Exchange.objects.filter(turn__conversation=conversation).count(),
            },
        )
    return conversations[0]


class ReplayError(ValueError):
    """A turn that cannot be replayed here; the message says why, for the user."""


def _imported_server_names(conversation: Conversation) -> list[str]:
    servers: JSONValue = (conversation.imported_meta or {}).get("servers")
    return [
        str(server["name"])
        for server in (servers if isinstance(servers, list) else [])
        if isinstance(server, dict) and server.get("name")
    ]


def _replay_servers(conversation: Conversation) -> Sequence[Model]:
    """The servers a replay runs against: the conversation's own as they are configured today;
    for an imported conversation, this installation's servers of the recorded names.

    Raises:
        ReplayError: an imported conversation names a server or a model profile not set up here.
    """
    if not conversation.read_only:
        return list(conversation.servers.order_by("name"))
    if conversation.model_profile.name.startswith(IMPORTED_PROFILE_PREFIX):
        raise ReplayError(
            f"this conversation was imported and its model profile "
            f"“{conversation.model_profile.name.removeprefix(IMPORTED_PROFILE_PREFIX)}” is not set up "
            "here: there is no model to replay it against"
        )
    names = _imported_server_names(conversation)
    # This installation's servers, reached through the relation's model (``servers.McpServer``).
    servers = list(conversation.servers.model.objects.filter(name__in=names, enabled=True).order_by("name"))
    missing = sorted(set(names) - {server.name for server in servers})
    if missing:
        raise ReplayError(
            "this conversation was imported and these MCP servers are not set up (or not enabled) "
            f"here: {', '.join(missing)}"
        )
    return servers


def turn_replay(*, turn: Turn, actor: AbstractBaseUser, dispatch: bool = True) -> tuple[Conversation, Turn]:
    """Ask a recorded turn's question again in a new conversation, to see what changed since.

    The replay conversation belongs to ``actor`` and has ``replay_of=turn``; it runs against
    the original conversation's model profile and servers as they are configured *today*, with
    the paradigm and tool_choice the turn ran with. Only the question is asked again: the
    history of earlier turns is not replayed (a follow-up turn is replayed as if it opened the
    conversation). An imported conversation replays against this installation's servers of the
    recorded names, if they and its model profile exist here.

    Raises:
        ReplayError: the turn has not finished, or what it ran against is not available here.
    """
    if not turn.is_finished:
        raise ReplayError("this turn has not finished yet: replay it once it has")
    if turn.paradigm == TURN_PARADIGM:
        raise ReplayError(
            "this turn was recorded by a proxy: the host ran it, there is nothing here to run it with"
        )
    original = turn.conversation
    servers = _replay_servers(original)
    title = f"Replay of “{original.title}”" + (f" · turn {turn.seq}" if turn.seq > 1 else "")
    with transaction.atomic():
        conversation = Conversation.objects.create(
            owner_id=actor.pk,
            title=title[:200],
            model_profile=original.model_profile,
            paradigm=turn.paradigm,
            tool_choice=turn.tool_choice,
            tool_choice_name=turn.tool_choice_name,
            replay_of=turn,
        )
        conversation.servers.set([server.pk for server in servers])
        replay = turn_start(conversation=conversation, question=turn.question, dispatch=dispatch)
    return conversation, replay
