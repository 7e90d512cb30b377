"""The shapes of the JSON API.

A conversation's transcript is the transcript document (``conversations.transcripts.document``,
the same as the ``json`` export and ``ask --json``), returned as built; ``TranscriptDocument``
only names it for the OpenAPI document, whose description is derived from the document's own
types (``conversations.transcripts.schema``), so the two cannot drift. The conversation summary
serializer is used for output.
"""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from drf_spectacular.extensions import OpenApiSerializerExtension
from drf_spectacular.openapi import AutoSchema
from drf_spectacular.plumbing import ResolvedComponent
from rest_framework import serializers

from conversations.models import Conversation, Turn
from conversations.transcripts.schema import transcript_components
from conversations.typealias import JSONDict


class TranscriptDocument(serializers.Serializer[Any]):
    """A whole conversation: every turn, step and raw exchange (described by ``TranscriptDocumentSchema``)."""


class TranscriptDocumentSchema(OpenApiSerializerExtension):  # type: ignore[no-untyped-call]  # its registering hook
    """The OpenAPI description of ``TranscriptDocument``: the document's types as components
    (``Transcript``, ``Conversation``, ``Turn``, ``Step``, ``Exchange``, ...)."""

    target_class = TranscriptDocument

    def get_name(self, auto_schema: AutoSchema, direction: str) -> str:
        return "Transcript"

    def map_serializer(self, auto_schema: AutoSchema, direction: str) -> JSONDict:
        components = transcript_components(ref_prefix="#/components/schemas/")
        root = components.pop("Transcript")
        for name, schema in components.items():
            auto_schema.registry.register_on_missing(
                ResolvedComponent(name=name, type=ResolvedComponent.SCHEMA, schema=schema, object=name)  # type: ignore[no-untyped-call]
            )
        return root


class ConversationSummarySerializer(serializers.Serializer[Conversation]):
    """A row of the conversation list.

    Expects ``turn_count`` and ``last_turn_status`` annotations on the instance.
    """

    id = serializers.UUIDField(source="public_id")
    title = serializers.CharField()
    created_at = serializers.DateTimeField()
    paradigm = serializers.CharField()
    model = serializers.CharField(source="model_profile.name", help_text="The model profile's name.")
    last_turn_status = serializers.ChoiceField(choices=Turn.Status.choices, allow_null=True)
    turn_count = serializers.IntegerField()
    url = serializers.SerializerMethodField(help_text="The transcript's API URL.")

    def get_url(self, conversation: Conversation) -> str:
        path = reverse("api-conversation", kwargs={"public_id": conversation.public_id})
        request = self.context.get("request")
        return request.build_absolute_uri(path) if request is not None else path
