"""The transcript document's JSON Schema, derived from its types (``transcripts.fields``), so
the import's validation and the API's OpenAPI description cannot drift from what is written.

Each ``TypedDict`` becomes an object schema named after it (``TurnDoc`` → ``Turn``) whose
properties are its keys, all required but the ``NotRequired`` ones, no others allowed; a field's
``Limits`` add their keywords. ``JSONValue`` fields (recorded JSON) accept anything.
"""

from __future__ import annotations

import types
from collections.abc import Mapping, Sequence
from typing import Annotated, Any, NotRequired, Union, get_args, get_origin, get_type_hints

from conversations.loop.paradigms import PARADIGMS
from conversations.loop.providers import PROVIDERS
from conversations.record.transcripts.fields import Limits, TranscriptDoc
from conversations.typealias import JSONDict, JSONValue

_SCALARS: dict[object, str] = {str: "string", int: "integer", float: "number", bool: "boolean"}
# The registries ``Limits.choices_of`` names that this package can reach; the transports are
# passed in by the caller (``servers`` is above ``conversations``).
_REGISTRIES: dict[str, Sequence[str]] = {"provider": list(PROVIDERS), "paradigm": list(PARADIGMS)}


def component_name(doc_type: type) -> str:
    """The schema's name for a document type: ``TurnDoc`` → ``Turn``."""
    return doc_type.__name__.removesuffix("Doc")


class _Builder:
    def __init__(self, *, openapi: bool, choices: Mapping[str, Sequence[str]], ref_prefix: str) -> None:
        self.openapi = openapi
        self.choices = {**_REGISTRIES, **choices}
        self.ref_prefix = ref_prefix
        self.definitions: dict[str, JSONDict] = {}

    def object(self, doc_type: type) -> JSONDict:
        """A ``$ref`` to ``doc_type``'s definition, made on first use."""
        name = component_name(doc_type)
        if name not in self.definitions:
            properties: JSONDict = {}
            required: list[JSONValue] = []
            for key, hint in get_type_hints(doc_type, include_extras=True).items():
                if get_origin(hint) is NotRequired:
                    hint = get_args(hint)[0]
                else:
                    required.append(key)
                properties[key] = self.value(hint)
            schema: JSONDict = {
                "type": "object",
                "properties": properties,
                "required": required,
                "additionalProperties": False,
            }
            if doc_type.__doc__:
                schema["description"] = " ".join(doc_type.__doc__.split())
            self.definitions[name] = schema
        return {"$ref": self.ref_prefix + name}

    def value(self, hint: Any) -> JSONDict:
        limits: list[Limits] = []
        if get_origin(hint) is Annotated:
            hint, *extras = get_args(hint)
            limits = [extra for extra in extras if isinstance(extra, Limits)]
        nullable = False
        if get_origin(hint) in (Union, types.UnionType):
            members = [member for member in get_args(hint) if member is not type(None)]
            if len(members) > 1:  # JSONValue: recorded JSON, anything
                return {}
            nullable = len(members) < len(get_args(hint))
            hint = members[0]
        schema: JSONDict
        if get_origin(hint) is dict:  # JSONDict
            schema = {"type": "object"}
        elif get_origin(hint) is list:
            schema = {"type": "array", "items": self.value(get_args(hint)[0])}
        elif isinstance(hint, type) and hint in _SCALARS:
            schema = {"type": _SCALARS[hint]}
        elif isinstance(hint, type) and hasattr(hint, "__required_keys__"):
            schema = self.object(hint)
        else:
            raise TypeError(f"no JSON Schema for {hint!r}")
        for limit in limits:
            schema.update(self.limits(limit))
        if nullable:
            if self.openapi:
                schema["nullable"] = True
            else:
                schema["type"] = [schema["type"], "null"]
        return schema

    def limits(self, limit: Limits) -> JSONDict:
        keywords: dict[str, JSONValue] = {
            "maxLength": limit.max_length,
            "minLength": limit.min_length,
            "pattern": limit.pattern,
            "minimum": limit.minimum,
            "maximum": limit.maximum,
        }
        found: JSONDict = {key: value for key, value in keywords.items() if value is not None}
        if limit.choices:
            found["enum"] = list(limit.choices)
        elif limit.choices_of in self.choices:
            found["enum"] = list(self.choices[limit.choices_of])
        return found


def transcript_schema(*, choices: Mapping[str, Sequence[str]] | None = None) -> JSONDict:
    """The JSON Schema (draft 2020-12) of a transcript document; ``choices`` fills in the
    registries this package cannot import (``{"transport": [...]}``), else they are any string."""
    builder = _Builder(openapi=False, choices=choices or {}, ref_prefix="#/$defs/")
    builder.object(TranscriptDoc)
    root = builder.definitions.pop(component_name(TranscriptDoc))
    defs: JSONDict = dict(builder.definitions)
    return {"$schema": "https://json-schema.org/draft/2020-12/schema", **root, "$defs": defs}


def transcript_components(
    *, ref_prefix: str, choices: Mapping[str, Sequence[str]] | None = None
) -> dict[str, JSONDict]:
    """The document's types as OpenAPI 3.0 schema components, by name (``Transcript`` is the
    whole document), referring to each other under ``ref_prefix``."""
    builder = _Builder(openapi=True, choices=choices or {}, ref_prefix=ref_prefix)
    builder.object(TranscriptDoc)
    return builder.definitions
