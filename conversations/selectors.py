"""Reads about conversations: what a user may see, and the transcript shapes the UI, API and CLI share."""

from __future__ import annotations

import json
from datetime import datetime
from uuid import UUID

from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.db.models import Count, Prefetch, QuerySet

from conversations.models import Conversation, Exchange, ModelProfile, Step, Turn
from inspector.typealias import JSONDict, JSONValue
from servers.models import McpServer


def conversation_list(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Conversation]:
    """The conversations ``user`` may see, newest first: their own."""
    if not user.is_authenticated:
        return Conversation.objects.none()
    return (
        Conversation.objects.filter(owner_id=user.pk)
        .select_related("model_profile")
        .annotate(turn_count=Count("turns"))
        .order_by("-created_at")
    )


def conversation_get(*, user: AbstractBaseUser | AnonymousUser, public_id: UUID | str) -> Conversation:
    """One conversation ``user`` may see.

    Raises:
        Conversation.DoesNotExist: no such conversation, or not this user's (the same answer).
    """
    return conversation_list(user=user).get(public_id=public_id)


def _exchanges() -> Prefetch[str, QuerySet[Exchange], str]:
    return Prefetch("exchanges", queryset=Exchange.objects.select_related("server").order_by("seq", "id"))


def _rows() -> QuerySet[Step]:
    children = Step.objects.select_related("server").prefetch_related(_exchanges()).order_by("seq")
    return (
        Step.objects.filter(parent__isnull=True)
        .select_related("server")
        .prefetch_related(_exchanges(), Prefetch("children", queryset=children))
        .order_by("seq")
    )


def turn_rows(*, turn: Turn) -> list[Step]:
    """The top-level steps of a turn (the page's rows), children and exchanges loaded."""
    return list(_rows().filter(turn=turn))


def step_row(*, conversation: Conversation, step_id: int) -> Step | None:
    """One row of a conversation, loaded for rendering; None if it is not this conversation's."""
    return _rows().filter(turn__conversation=conversation, pk=step_id).first()


def rows_changed_since(*, conversation: Conversation, since: datetime) -> list[Step]:
    """Rows touched at or after ``since`` (inclusive: a re-sent row replaces itself)."""
    return list(_rows().filter(turn__conversation=conversation, updated_at__gte=since))


def conversation_turns(*, conversation: Conversation) -> list[Turn]:
    return list(conversation.turns.order_by("seq"))


def turn_get(*, conversation: Conversation, turn_id: int) -> Turn | None:
    return conversation.turns.filter(pk=turn_id).first()


def profiles_for_form() -> QuerySet[ModelProfile]:
    return ModelProfile.objects.order_by("-is_demo", "name")


def servers_for_form() -> QuerySet[McpServer]:
    return McpServer.objects.filter(enabled=True).order_by("-is_demo", "name")


def _body(text: str) -> JSONValue:
    """A raw body as stored (the exact text), for the transcript."""
    return text


def exchange_json(exchange: Exchange) -> JSONDict:
    return {
        "id": exchange.pk,
        "seq": exchange.seq,
        "channel": exchange.channel,
        "direction": exchange.direction,
        "label": exchange.label,
        "server": exchange.server.name if exchange.server else None,
        "jsonrpc_id": exchange.jsonrpc_id or None,
        "status": exchange.status,
        "error": exchange.error,
        "started_at": exchange.started_at.isoformat(),
        "duration_ms": exchange.duration_ms,
        "request_headers": exchange.request_headers,
        "request_body": _body(exchange.request_body),
        "response_headers": exchange.response_headers,
        "response_body": _body(exchange.response_body),
    }


def step_json(step: Step) -> JSONDict:
    return {
        "id": step.pk,
        "seq": step.seq,
        "parent": step.parent_id,
        "kind": step.kind,
        "status": step.status,
        "title": step.title,
        "prompt": step.prompt,
        "prompt_exact": step.prompt_exact,
        "text": step.text,
        "calls": step.calls,
        "diagnostics": step.diagnostics,
        "server": step.server.name if step.server else None,
        "tool_name": step.tool_name,
        "arguments": step.arguments,
        "result": step.result,
        "is_error": step.is_error,
        "error": step.error,
        "started_at": step.started_at.isoformat(),
        "finished_at": step.finished_at.isoformat() if step.finished_at else None,
        "duration_ms": step.duration_ms,
        "exchanges": [exchange_json(e) for e in step.exchanges.all()],
    }


def turn_json(turn: Turn) -> JSONDict:
    steps = (
        Step.objects.filter(turn=turn).select_related("server").prefetch_related(_exchanges()).order_by("seq")
    )
    return {
        "id": turn.pk,
        "seq": turn.seq,
        "question": turn.question,
        "status": turn.status,
        "answer": turn.answer,
        "error": turn.error,
        "paradigm": turn.paradigm,
        "tool_choice": turn.tool_choice,
        "tool_choice_name": turn.tool_choice_name or None,
        "model": turn.model_name,
        "tools": turn.tools,
        "created_at": turn.created_at.isoformat(),
        "started_at": turn.started_at.isoformat() if turn.started_at else None,
        "finished_at": turn.finished_at.isoformat() if turn.finished_at else None,
        "steps": [step_json(s) for s in steps],
    }


def conversation_transcript(*, conversation: Conversation) -> JSONDict:
    """The whole conversation as JSON: every turn, step and raw exchange (API and ``ask --json``)."""
    return {
        "id": str(conversation.public_id),
        "title": conversation.title,
        "owner": conversation.owner.get_username(),
        "model_profile": {
            "name": conversation.model_profile.name,
            "provider": conversation.model_profile.provider,
            "model": conversation.model_profile.model,
            "demo": conversation.model_profile.is_demo,
        },
        "paradigm": conversation.paradigm,
        "tool_choice": conversation.tool_choice,
        "servers": [s.name for s in conversation.servers.order_by("name")],
        "created_at": conversation.created_at.isoformat(),
        "turns": [turn_json(t) for t in conversation.turns.order_by("seq")],
    }


def pretty_json(text: str) -> tuple[str, bool]:
    """``text`` pretty-printed if it is JSON; returns (text, was_json)."""
    try:
        return json.dumps(json.loads(text), indent=2, ensure_ascii=False), True
    except (ValueError, TypeError):
        return text, False
