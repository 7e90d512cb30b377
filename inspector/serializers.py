"""The shapes of the JSON API.

A conversation's transcript is the transcript document (``conversations.record.transcripts.document``,
the same as the ``json`` export and ``ask --json``), returned as built; ``TranscriptDocument``
only names it for the OpenAPI document, whose description is derived from the document's own
types (``conversations.record.transcripts.schema``), so the two cannot drift. The conversation summary
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
from conversations.record.transcripts.schema import transcript_components
from conversations.typealias import JSONDict
from inspector.evals.models import EvalCaseResult, EvalRun


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


# --- Evals (docs/evals.md) ----------------------------------------------------------------------
# The run results are built by ``evals.selectors.run_results`` (the shape ``eval run --json``
# prints); these serializers name that shape for the OpenAPI document.


class EvalSuiteInputSerializer(serializers.Serializer[Any]):
    text = serializers.CharField(
        help_text="The suite as YAML or JSON text (docs/evals.md); its name is taken from it.",
        trim_whitespace=False,
    )


class EvalSuiteSerializer(serializers.Serializer[Any]):
    id = serializers.UUIDField(source="public_id")
    name = serializers.CharField()
    definition = serializers.JSONField(help_text="The validated suite document.")
    text = serializers.CharField(source="source", help_text="The text as written (YAML or JSON).")
    source_format = serializers.ChoiceField(choices=["json", "yaml"])
    created_at = serializers.DateTimeField()
    updated_at = serializers.DateTimeField()


class EvalRunStartSerializer(serializers.Serializer[Any]):
    suite = serializers.UUIDField(help_text="The suite's id.")
    concurrency = serializers.IntegerField(
        min_value=1,
        max_value=64,
        required=False,
        help_text="Turns in flight at once (default: EVAL_CONCURRENCY).",
    )
    repeats = serializers.IntegerField(
        min_value=1,
        max_value=20,
        required=False,
        help_text="Runs of each case per cell (default: the suite's).",
    )


class EvalProgressSerializer(serializers.Serializer[Any]):
    status = serializers.ChoiceField(choices=EvalRun.Status.choices)
    total = serializers.IntegerField(help_text="Case runs in all (cells × cases × repeats).")
    finished = serializers.IntegerField()
    passed = serializers.IntegerField()
    running = serializers.IntegerField(help_text="Turns in flight now.")
    fraction = serializers.FloatField(help_text="finished / total, 0..1.")


class EvalRunSummarySerializer(serializers.Serializer[Any]):
    run = serializers.UUIDField()
    suite = serializers.CharField()
    suite_id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=EvalRun.Status.choices)
    created_at = serializers.DateTimeField()
    progress = EvalProgressSerializer()


class EvalFailureSerializer(serializers.Serializer[Any]):
    case = serializers.IntegerField(help_text="The case's index in the suite.")
    repeat = serializers.IntegerField()
    question = serializers.CharField()
    failure = serializers.CharField(help_text="The failure class.")
    reason = serializers.CharField()
    conversation = serializers.UUIDField(allow_null=True)


class EvalCaseRunSerializer(serializers.Serializer[Any]):
    case = serializers.IntegerField()
    repeat = serializers.IntegerField()
    status = serializers.ChoiceField(choices=EvalCaseResult.Status.choices)
    failure = serializers.CharField()
    conversation = serializers.UUIDField(allow_null=True)


class EvalCellSerializer(serializers.Serializer[Any]):
    model = serializers.CharField()
    paradigm = serializers.CharField()
    variant = serializers.CharField()
    cases = serializers.IntegerField(help_text="Case runs of the cell (cases × repeats).")
    finished = serializers.IntegerField()
    passed = serializers.IntegerField()
    accuracy = serializers.FloatField(allow_null=True, help_text="passed / finished, 0..1.")
    wrong_tool = serializers.IntegerField()
    wrong_arguments = serializers.IntegerField()
    no_call = serializers.IntegerField()
    extra_call = serializers.IntegerField()
    wrong_order = serializers.IntegerField()
    parse_failure = serializers.IntegerField()
    validation_failure = serializers.IntegerField()
    wrong_answer = serializers.IntegerField()
    error = serializers.IntegerField()
    input_tokens = serializers.IntegerField()
    output_tokens = serializers.IntegerField()
    definition_tokens = serializers.IntegerField(
        help_text="What the tool definitions weighed, every request counted."
    )
    definition_requests = serializers.IntegerField(help_text="Model requests that carried them.")
    definition_tokens_per_request = serializers.IntegerField(
        allow_null=True, help_text="One request's weight: compare variants on this."
    )
    definition_tokens_per_case = serializers.IntegerField(allow_null=True)
    definition_cost = serializers.CharField(
        allow_null=True,
        help_text="What the tool definitions cost as input, US dollars; null without a price.",
    )
    pass_rate = serializers.FloatField(allow_null=True)
    pass_rate_ci = serializers.ListField(
        child=serializers.FloatField(), allow_null=True, help_text="95% Wilson interval [low, high]."
    )
    k = serializers.IntegerField(help_text="Repeats per case.")
    pass_at_k = serializers.FloatField(
        allow_null=True, help_text="Chance that one of k runs of a case passes."
    )
    pass_hat_k = serializers.FloatField(allow_null=True, help_text="Chance that all k runs of a case pass.")
    latency_ms_mean = serializers.IntegerField(allow_null=True)
    latency_ms_p95 = serializers.IntegerField(allow_null=True)
    tokens_per_case = serializers.IntegerField(allow_null=True)
    cost_per_case = serializers.CharField(allow_null=True, help_text="US dollars; null without a price.")
    cost = serializers.CharField(allow_null=True, help_text="US dollars; null without a price.")
    latency_ms = serializers.IntegerField(allow_null=True, help_text="Mean per case run.")
    conversations = serializers.ListField(child=serializers.UUIDField())
    results = EvalCaseRunSerializer(many=True)
    failures = EvalFailureSerializer(many=True)
    previous_accuracy = serializers.FloatField(allow_null=True)
    regression = serializers.BooleanField(
        help_text="The pass rate is below the 95% interval of this cell's in the previous finished run "
        "(the rule of eval compare and --fail-on-regression)."
    )


class EvalResultsSerializer(serializers.Serializer[Any]):
    run = serializers.UUIDField()
    suite = serializers.CharField()
    suite_id = serializers.UUIDField()
    status = serializers.ChoiceField(choices=EvalRun.Status.choices)
    error = serializers.CharField()
    created_at = serializers.DateTimeField()
    started_at = serializers.DateTimeField(allow_null=True)
    finished_at = serializers.DateTimeField(allow_null=True)
    concurrency = serializers.IntegerField()
    repeats = serializers.IntegerField()
    progress = EvalProgressSerializer()
    previous_run = serializers.UUIDField(allow_null=True)
    regression = serializers.BooleanField(
        help_text="Some cell's pass rate is below the 95% interval of its pass rate in the previous finished run."
    )
    cells = EvalCellSerializer(many=True)
