"""The shapes of the JSON API.

The transcript serializers *describe* ``conversations.selectors.conversation_transcript`` for
the OpenAPI document; the API returns that selector's dict as is, so the API, ``ask --json``
and the schema cannot drift apart silently (a test compares them). The conversation summary
serializer is used for output.
"""

from __future__ import annotations

from typing import Any

from django.urls import reverse
from rest_framework import serializers

from conversations.models import Conversation, Exchange, Step, Turn


class ExchangeSerializer(serializers.Serializer[Any]):
    """One raw pair on the wire. Bodies are the exact text sent and received, not parsed JSON."""

    id = serializers.IntegerField()
    seq = serializers.IntegerField()
    channel = serializers.ChoiceField(choices=Exchange.Channel.choices)
    direction = serializers.ChoiceField(choices=Exchange.Direction.choices)
    # ``label`` and ``parent`` shadow Field attributes in the stubs only: DRF pops declared fields.
    label = serializers.CharField(help_text="e.g. `POST /chat/completions`, `tools/call`")  # type: ignore[assignment]
    server = serializers.CharField(allow_null=True, help_text="The MCP server's name (mcp exchanges).")
    jsonrpc_id = serializers.CharField(allow_null=True)
    status = serializers.CharField(help_text="HTTP status, or ok / error / timeout.")
    error = serializers.CharField(allow_blank=True)
    started_at = serializers.DateTimeField()
    duration_ms = serializers.FloatField(allow_null=True)
    request_headers = serializers.DictField(child=serializers.CharField())
    request_body = serializers.CharField(allow_blank=True)
    response_headers = serializers.DictField(child=serializers.CharField())
    response_body = serializers.CharField(allow_blank=True)


class StepSerializer(serializers.Serializer[Any]):
    """One thing the agent did. A ``tool`` step names its ``decide`` step as ``parent``."""

    id = serializers.IntegerField()
    seq = serializers.IntegerField()
    parent = serializers.IntegerField(allow_null=True)  # type: ignore[assignment]
    kind = serializers.ChoiceField(choices=Step.Kind.choices)
    status = serializers.ChoiceField(choices=Step.Status.choices)
    title = serializers.CharField(allow_blank=True)
    prompt = serializers.CharField(
        allow_blank=True, help_text="The text the model reads, when it can be shown."
    )
    prompt_exact = serializers.BooleanField(help_text="False: the prompt is an illustrative rendering.")
    text = serializers.CharField(allow_blank=True)
    calls = serializers.ListField(child=serializers.JSONField(), help_text="The calls the paradigm parsed.")
    diagnostics = serializers.ListField(child=serializers.JSONField())
    server = serializers.CharField(allow_null=True)
    tool_name = serializers.CharField(allow_blank=True)
    arguments = serializers.JSONField(allow_null=True)
    result = serializers.JSONField(allow_null=True)
    is_error = serializers.BooleanField()
    error = serializers.CharField(allow_blank=True)
    started_at = serializers.DateTimeField()
    finished_at = serializers.DateTimeField(allow_null=True)
    duration_ms = serializers.IntegerField(allow_null=True)
    exchanges = ExchangeSerializer(many=True)


class TurnSerializer(serializers.Serializer[Any]):
    """One question and the agent run that answered it, with the tool list it was offered."""

    id = serializers.IntegerField()
    seq = serializers.IntegerField()
    question = serializers.CharField()
    status = serializers.ChoiceField(choices=Turn.Status.choices)
    answer = serializers.CharField(allow_blank=True)
    error = serializers.CharField(allow_blank=True)
    paradigm = serializers.CharField()
    tool_choice = serializers.CharField()
    tool_choice_name = serializers.CharField(
        allow_null=True, help_text="With tool_choice named: server/tool."
    )
    model = serializers.CharField(allow_blank=True, help_text="The model name sent on the wire.")
    tools = serializers.ListField(child=serializers.JSONField())
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    steps = StepSerializer(many=True)


class ModelProfileSummarySerializer(serializers.Serializer[Any]):
    name = serializers.CharField()
    provider = serializers.CharField()
    model = serializers.CharField()
    demo = serializers.BooleanField()


class TranscriptSerializer(serializers.Serializer[Any]):
    """A whole conversation: every turn, step and raw exchange (the same JSON as ``ask --json``)."""

    id = serializers.UUIDField()
    title = serializers.CharField()
    owner = serializers.CharField()
    model_profile = ModelProfileSummarySerializer()
    paradigm = serializers.CharField()
    tool_choice = serializers.CharField()
    servers = serializers.ListField(child=serializers.CharField())
    created_at = serializers.DateTimeField()
    turns = TurnSerializer(many=True)


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
