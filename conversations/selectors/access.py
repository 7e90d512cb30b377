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
    Q,
    QuerySet,
    Subquery,
)
from django.db.models.functions import Coalesce

from conversations.models import Conversation, ProxySession, Turn
from conversations.selectors.lone_reads import lone_conversation

_Owned = TypeVar("_Owned", bound=Model)

# The attribute ``conversation_get`` sets on the row it returns: True when the user sees it as
# a viewer of a team its owner is a member of, and so may not act on it (``following``).
FOLLOWING = "followed_read_only"


def visible_to(
    rows: QuerySet[_Owned],
    *,
    user: AbstractBaseUser | AnonymousUser,
    owner: str,
    acting: bool = False,
) -> QuerySet[_Owned]:
    """The one access rule, applied to ``rows`` whose user foreign key is at path ``owner``.

    A row is seen by the user it belongs to, by the members of any team that user is a member
    of, and by that team's viewers; it is acted on (``acting=True``: a question asked into it, a
    turn cancelled or replayed, a server's question answered, a saved call run or deleted, an
    MCP App driven) by its user and those team mates only, never by a viewer. A viewer's own rows
    are seen by no one of the team they view (only through teams they are a member of). Staff see
    and act on all; anonymous users on none. A row that belongs to no one (made by a management
    command, or whose user was deleted) is for staff only. Conversations (``owner``), workbench
    operations (``user``), saved calls (``owner``) and the questions a server asked
    (``operation__user``) all go through here: every page, API call, export and websocket that
    shows one looks it up among these rows, so anyone else gets a 404; a viewer who tries to act
    on one they see gets a 403 (``may_act``).
    """
    if not user.is_authenticated:
        return rows.none()
    if getattr(user, "is_staff", False):
        return rows
    # One IN over a short list of users (the user and the owners they may see or act for, read
    # now), not an OR of conditions: the planner can then walk an (owner, ...) index per user.
    return rows.filter(**{f"{owner}__in": {user.pk, *_owners(user.pk, acting=acting)}})


def _owners(user_id: int, *, acting: bool) -> QuerySet[Model, int]:
    """The ids of the users whose rows ``user_id`` sees (``acting=False``: the members of the
    teams ``user_id`` is a member or a viewer of) or acts on (``acting=True``: a member of)."""
    teams = Q(inspector_teams__members=user_id)
    if not acting:
        teams |= Q(inspector_teams__viewers=user_id)
    return get_user_model().objects.filter(teams).values_list("pk", flat=True)


def may_act(user: AbstractBaseUser | AnonymousUser, owner_id: int | None) -> bool:
    """``visible_to(..., acting=True)``'s rule for one row already read (and seen) whose owner is
    ``owner_id``: staff, the owner, or a member of a team the owner is a member of. False for a
    viewer, who may see the row but not act on it (a 403, not a 404: the row is no secret to
    them). The tests hold the two forms to the same answers."""
    if not user.is_authenticated:
        return False
    if getattr(user, "is_staff", False) or (owner_id is not None and owner_id == user.pk):
        return True
    return owner_id is not None and _owners(user.pk, acting=True).filter(pk=owner_id).exists()


def _sight(user: AbstractBaseUser, *, owner_id: int) -> bool | None:
    """``visible_to``'s rule for a member or viewer (not staff), for one row already read whose
    owner is ``owner_id``: None if ``user`` may not see it, else whether they may act on it. The
    user's own row at no cost, a team mate's by one small membership query, a followed member's
    by a second."""
    if owner_id == user.pk or _owners(user.pk, acting=True).filter(pk=owner_id).exists():
        return True
    return False if _owners(user.pk, acting=False).filter(pk=owner_id).exists() else None


def following(conversation: Conversation) -> bool:
    """Whether ``conversation`` (from ``conversation_get``) is followed read-only by the user it
    was read for: a viewer of a team its owner is a member of. Its page shows no question form
    and no buttons that act; each such request gets a 403."""
    return bool(getattr(conversation, FOLLOWING, False))


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
    (``_sight``): building the rule into the query cost more CPU than the owner's read
    itself, and a team mate's costs one small query more (a followed member's, two). The row
    carries whether the user follows it read-only (``following``). ``with_owner=False``: the owner is not
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
    acting = True if getattr(user, "is_staff", False) else _sight(user, owner_id=found.owner_id)
    if acting is None:
        raise Conversation.DoesNotExist("no such conversation")
    # Read by the page's fragments (the question form and the buttons that act are left out)
    # and by every view that acts, without asking the teams again.
    setattr(found, FOLLOWING, not acting)
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
