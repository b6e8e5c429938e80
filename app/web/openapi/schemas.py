"""The JSON Schema of request bodies: pydantic's, plus the rules every door applies to text, so that a body the
document calls valid is one the door reads (and the other way round).

The rules (`app.web.json_body`, `app.web.api.validation.StrictBody`) say:

- text anywhere in a body, keys included, holds no NUL character and no lone UTF-16 surrogate (400 otherwise): each
  string and each object key carries `pattern` (`STORABLE_TEXT`), and a free-form value is a `JsonValue`. The
  patterns state the NUL rule only: a lone surrogate is not something a pattern can name portably (an ECMA-262
  engine sees every character beyond U+FFFF as two surrogates, and generators skip such ranges), so the surrogate
  rule is said in words (`JsonValue`, the 400 answers);
- a `StrictBody` trims its strings (and the keys of its maps) before checking their length: such a string's length
  limits are stated on the trimmed text, in its pattern (a pattern of blanks around the text the limits count).

Only request bodies (the `validation` mode) get these rules; responses are described as pydantic serializes them.
"""

from __future__ import annotations

import re
from typing import Any

from pydantic.json_schema import GenerateJsonSchema, JsonSchemaValue
from pydantic_core import core_schema

# The character PostgreSQL text cannot store that a pattern can name (see the module docstring), as a class body.
_UNSTORABLE = r"\u0000"
# What trimming removes: Unicode White_Space (pydantic-core trims with Rust's `str::trim`).
_BLANK = r"\t-\r \x85\xa0\u1680\u2000-\u200a\u2028\u2029\u202f\u205f\u3000"
_CHAR = f"[^{_UNSTORABLE}]"
_NOT_BLANK = f"[^{_UNSTORABLE}{_BLANK}]"
STORABLE_TEXT = f"^{_CHAR}*$"
JSON_VALUE = "JsonValue"
JSON_VALUE_REF = {"$ref": f"#/components/schemas/{JSON_VALUE}"}
# What the generator writes for a free-form value (pydantic resolves every `$ref` it meets against its own models);
# `with_json_values` turns it into the reference to `JsonValue`.
_JSON_VALUE_MARK = "x-switchboard-json-value"


def json_value_schema() -> dict:
    """Any JSON value whose text (strings and keys, at any depth) the doors accept."""
    return {
        "description": "Any JSON value without a NUL character or a lone UTF-16 surrogate in its text (keys "
        "included)",
        "anyOf": [
            {"type": "null"},
            {"type": "boolean"},
            {"type": "number"},
            {"type": "string", "pattern": STORABLE_TEXT},
            {"type": "array", "items": JSON_VALUE_REF},
            {
                "type": "object",
                "propertyNames": {"pattern": STORABLE_TEXT},
                "additionalProperties": JSON_VALUE_REF,
            },
        ],
    }


# Text that starts or ends with a blank (what trimming would change), in Python's and ECMA-262's notation.
BLANK_AT_AN_END = re.compile(f"^[{_BLANK}]|[{_BLANK}]$")


def exact_text_pattern(min_length: int = 0, max_length: int | None = None) -> str:
    """Text of `min_length` to `max_length` characters, without blanks at either end."""
    return trimmed_text_pattern(min_length, max_length, blanks_around=False)


def trimmed_text_pattern(
    min_length: int = 0, max_length: int | None = None, *, blanks_around: bool = True
) -> str:
    """Text that, once trimmed, is `min_length` to `max_length` characters long (blanks around it are allowed)."""
    kept = []  # the trimmed text: empty, one character, or two non-blank ends around any characters
    if min_length == 0:
        kept.append("")
    if min_length <= 1 and (max_length is None or max_length >= 1):
        kept.append(_NOT_BLANK)
    if max_length is None or max_length >= 2:
        inner_max = "" if max_length is None else str(max_length - 2)
        kept.append(f"{_NOT_BLANK}{_CHAR}{{{max(min_length - 2, 0)},{inner_max}}}{_NOT_BLANK}")
    blanks = f"[{_BLANK}]*" if blanks_around else ""
    return f"^{blanks}(?:{'|'.join(kept)}){blanks}$"


class RequestBodySchema(GenerateJsonSchema):
    """pydantic's JSON Schema, with the doors' text rules in request bodies (see the module docstring)."""

    def str_schema(self, schema: core_schema.StringSchema) -> JsonSchemaValue:
        json_schema = super().str_schema(schema)
        if self.mode != "validation" or "pattern" in json_schema or "format" in json_schema:
            return json_schema
        trimmed = schema.get("strip_whitespace", self._config.str_strip_whitespace)
        if trimmed and ("minLength" in json_schema or "maxLength" in json_schema):
            low = json_schema.pop("minLength", 0)
            high = json_schema.pop("maxLength", None)
            json_schema["pattern"] = trimmed_text_pattern(low, high)
        else:
            json_schema["pattern"] = STORABLE_TEXT
        return json_schema

    def any_schema(self, schema: core_schema.AnySchema) -> JsonSchemaValue:
        return {_JSON_VALUE_MARK: True} if self.mode == "validation" else super().any_schema(schema)

    def dict_schema(self, schema: core_schema.DictSchema) -> JsonSchemaValue:
        json_schema = super().dict_schema(schema)
        if self.mode == "validation":
            _keys_as_property_names(json_schema)
        return json_schema

    def model_schema(self, schema: core_schema.ModelSchema) -> JsonSchemaValue:
        json_schema = super().model_schema(schema)
        if self.mode == "validation":
            _keys_as_property_names(json_schema)
        return json_schema


def _keys_as_property_names(json_schema: dict[str, Any]) -> None:
    """A map's key rule as `propertyNames` (pydantic says `patternProperties`, which lets other keys through), and
    any value of a map or of a model's extra keys as a `JsonValue`."""
    patterned = json_schema.pop("patternProperties", None)
    if patterned:
        ((pattern, values),) = patterned.items()
        json_schema["additionalProperties"] = values
        json_schema["propertyNames"] = {**json_schema.get("propertyNames", {}), "pattern": pattern}
    extra = json_schema.get("additionalProperties")
    if extra is True or extra == {}:
        json_schema["additionalProperties"] = {_JSON_VALUE_MARK: True}
        json_schema.setdefault("propertyNames", {"pattern": STORABLE_TEXT})


def with_json_values(value: Any) -> Any:
    """`value` (generated schemas) with each free-form value written as a reference to `JsonValue`."""
    if isinstance(value, dict):
        resolved = {key: with_json_values(item) for key, item in value.items() if key != _JSON_VALUE_MARK}
        return {**JSON_VALUE_REF, **resolved} if _JSON_VALUE_MARK in value else resolved
    if isinstance(value, list):
        return [with_json_values(item) for item in value]
    return value
