"""Records the OTLP JSON one OpenAI instrumentation writes for a tool-calling turn on the demo model.

Not a test: run by hand in an environment of its own with ``openai``, ``opentelemetry-sdk``,
``opentelemetry-exporter-otlp-proto-common`` and the instrumentation installed, against a running
app (``make run``) whose ``DEMO_MODEL_API_KEY`` is set in the environment::

    python record.py openllmetry|openinference OUT.json [BASE_URL]
"""

import base64
import json
import os
import sys
from importlib import import_module

from google.protobuf.json_format import MessageToDict
from opentelemetry import trace
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.sdk.trace import TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

INSTRUMENTORS = {
    "openllmetry": "opentelemetry.instrumentation.openai",
    "openinference": "openinference.instrumentation.openai",
}
TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "get_weather_forecast",
            "description": "Get the weather forecast for a city and day.",
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string"}, "day": {"type": "string"}},
                "required": ["city"],
            },
        },
    }
]


def main(which: str, out: str, base_url: str) -> None:
    exporter = InMemorySpanExporter()
    provider = TracerProvider()
    provider.add_span_processor(SimpleSpanProcessor(exporter))
    trace.set_tracer_provider(provider)
    import_module(INSTRUMENTORS[which]).OpenAIInstrumentor().instrument(tracer_provider=provider)
    openai = import_module("openai")  # after instrumenting, as both instrumentations' docs do

    client = openai.OpenAI(base_url=base_url, api_key=os.environ["DEMO_MODEL_API_KEY"])
    messages = [{"role": "user", "content": "What will the weather be like in Beijing tomorrow?"}]
    with trace.get_tracer("recorder").start_as_current_span("turn"):
        first = client.chat.completions.create(model="demo", messages=messages, tools=TOOLS)
        call = first.choices[0].message.tool_calls[0]
        messages.append(first.choices[0].message.model_dump(exclude_none=True))
        messages.append(
            {"role": "tool", "tool_call_id": call.id, "content": '{"summary": "fog, -1 to 9 °C"}'}
        )
        client.chat.completions.create(model="demo", messages=messages, tools=TOOLS)
    document = MessageToDict(encode_spans(exporter.get_finished_spans()))
    # Protobuf's JSON mapping writes bytes as base64; OTLP/JSON writes trace and span ids as hex.
    for resource in document["resourceSpans"]:
        for scope in resource["scopeSpans"]:
            for span in scope["spans"]:
                for key in ("traceId", "spanId", "parentSpanId"):
                    if span.get(key):
                        span[key] = base64.b64decode(span[key]).hex()
    with open(out, "w", encoding="utf-8") as file:
        json.dump(document, file, indent=1, ensure_ascii=False)


if __name__ == "__main__":
    main(
        sys.argv[1], sys.argv[2], sys.argv[3] if len(sys.argv) > 3 else "http://127.0.0.1:8000/demo-model/v1"
    )
