"""Who may see what: the one access rule, and the lookups of one conversation or turn that apply it."""

from __future__ import annotations

from typing import TypeVar
from uuid import UUID

from django.contrib.auth import get_user_model
from django.contrib.auth.base_user import AbstractBaseUser
from django.contrib.auth.models import AnonymousUser
from django.db.models import (
    Count,
    Exists,
    Model,
    OuterRef,
    QuerySet,
    Subquery,
)
from django.db.models.functions import Coalesce

from conversations.models import Conversation, ProxySession, Turn
from conversations.selectors.lone_reads import lone_conversation

_Owned = TypeVar("_Owned", bound=Model)


def visible_to(
    rows: QuerySet[_Owned], *, user: AbstractBaseUser | AnonymousUser, owner: str
) -> QuerySet[_Owned]:
    """The one access rule, applied to ``rows`` whose user foreign key is at path ``owner``.

    A row is visible to the user it belongs to and to the members of any team that user belongs
    to; staff see all; anonymous users see none. A row that belongs to no one (made by a
    management command, or whose user was deleted) is visible to staff only. Conversations
    (``owner``), workbench operations (``user``), saved calls (``owner``) and the questions a
    server asked (``operation__user``) all go through here: every page, API call, export and
    websocket that shows one looks it up among these rows, so anyone else gets a 404.
    """
    if not user.is_authenticated:
        return rows.none()
    if getattr(user, "is_staff", False):
        return rows
    # One IN over a short list of users (the user and their team mates, read now), not an OR of
    # two conditions: the planner can then walk an (owner, ...) index per user.
    return rows.filter(**{f"{owner}__in": {user.pk, *_team_mates(user.pk)}})


def _team_mates(user_id: int) -> QuerySet[Model, int]:
    """The ids of the users who share a team with ``user_id`` (the user too, if in any team)."""
    return get_user_model().objects.filter(inspector_teams__members=user_id).values_list("pk", flat=True)


def _sees_owners(user: AbstractBaseUser, *, owner_id: int) -> bool:
    """``visible_to``'s rule for a member (not staff), for one row already read whose owner is
    ``owner_id``: the user's own row at no cost, a team mate's by one small membership query. The
    tests hold the two forms to the same answers."""
    return owner_id == user.pk or _team_mates(user.pk).filter(pk=owner_id).exists()


def conversation_list(*, user: AbstractBaseUser | AnonymousUser) -> QuerySet[Conversation]:
    """The conversations ``user`` may see (``visible_to``), newest first."""
    return _listed(visible_to(Conversation.objects.all(), user=user, owner="owner")).order_by("-created_at")


def _listed(conversations: QuerySet[Conversation]) -> QuerySet[Conversation]:
    """What a listed conversation carries: its profile and owner, ``turn_count`` and ``proxied``
    (a proxy session's: ``Conversation.recorded_by_proxy`` without a query per row).

    A subquery, not Count("turns"): a join and GROUP BY would make every count and every page
    aggregate all visible conversations; this is computed for the rows shown only.
    """
    turn_count = (
        Turn.objects.filter(conversation=OuterRef("pk"))
        .order_by()
        .values("conversation")
        .annotate(n=Count("pk"))
        .values("n")
    )
    return conversations.select_related("model_profile", "owner").annotate(
        turn_count=Coalesce(Subquery(turn_count), 0),
        proxied=Exists(ProxySession.objects.filter(conversation=OuterRef("pk"))),
    )


def conversation_query(*, public_id: UUID | str, with_owner: bool = True) -> QuerySet[Conversation]:
    """The conversation with ``public_id``, with its model profile and (``with_owner``) its
    owner: what ``conversation_get`` reads (as ``lone_conversation``), before access is decided."""
    # Unordered, as ``get`` reads: one row at most (the public id is unique).
    return (
        Conversation.objects.filter(public_id=public_id)
        .select_related("model_profile", *(("owner",) if with_owner else ()))
        .order_by()
    )


def conversation_get(
    *, user: AbstractBaseUser | AnonymousUser, public_id: UUID | str, with_owner: bool = True
) -> Conversation:
    """One conversation ``user`` may see.

    Not ``conversation_list``'s query: every page, API call and websocket of a conversation
    starts here, and needs nothing a list carries besides (the turn count's subquery, the
    order). The row is read by its public id alone and the rule decided on its owner
    (``_sees_owners``): building the rule into the query cost more CPU than the owner's read
    itself, and a team mate's costs one small query more. ``with_owner=False``: the owner is not
    joined (read if asked for), for callers that need the owner's id alone (the question's POST:
    the owner's columns cost about 6% of that request's CPU).

    Raises:
        Conversation.DoesNotExist: no such conversation, or not this user's (the same answer).
    """
    if not user.is_authenticated:
        raise Conversation.DoesNotExist("no such conversation")
    # The read of every page, question and socket (P2): one statement written once
    # (``lone_conversation``), the same row as ``conversation_query`` (a test holds the two equal).
    found = lone_conversation(public_id=public_id, with_owner=with_owner)
    if found is None:
        raise Conversation.DoesNotExist("no such conversation")
    if not (getattr(user, "is_staff", False) or _sees_owners(user, owner_id=found.owner_id)):
        raise Conversation.DoesNotExist("no such conversation")
    return found


def turn_for_reading(*, user: AbstractBaseUser | AnonymousUser, turn_id: int) -> Turn | None:
    """A turn of a conversation ``user`` may see (``visible_to``); None otherwise (a missing
    turn and another user's answer the same)."""
    if not user.is_authenticated:
        return None
    visible = visible_to(Conversation.objects.all(), user=user, owner="owner")
    return Turn.objects.filter(pk=turn_id, conversation__in=visible).defer("transcript", "seal_steps").first()


def turn_for_cancel(*, user: AbstractBaseUser | AnonymousUser, turn_id: int) -> Turn | None:
    """The turn ``user`` may cancel: one of their own conversations', or any for staff; None
    otherwise (a missing turn and another user's answer the same)."""
    if not user.is_authenticated:
        return None
    turns = Turn.objects.select_related("conversation").filter(pk=turn_id)
    if not getattr(user, "is_staff", False):
        turns = turns.filter(conversation__owner_id=user.pk)
    return turns.first()
