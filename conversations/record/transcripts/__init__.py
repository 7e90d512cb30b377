"""Transcripts out and in: ``document`` (the typed document, its JSON and JSON Lines texts),
``otel`` (OTLP/JSON traces), ``export`` (the formats and the text of a conversation in each) and
``importing`` (validation, and a new conversation from a ``json`` export)."""
