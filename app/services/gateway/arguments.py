"""Managed arguments (set by the connection, hidden from the agent), projected schemas and redaction."""

from __future__ import annotations

import hashlib
import json
from typing import Any, Protocol

from app.catalog.loader import get_method
from app.catalog.schema import AppDefinition
from app.models import ToolConnection
from app.services.activity import SECRET_KEY_HINTS
from app.services.connections.tool_index import listed_schema

REDACTED = "[redacted]"


# --- managed arguments and schemas -------------------------------------------------------------------------------


def managed_arguments(
    connection: ToolConnection, app_definition: AppDefinition | None, input_schema: dict | None
) -> dict[str, Any]:
    """Arguments pinned by the connection's public configuration for a tool with this schema."""
    return managed_for_schema(pinned_arguments(connection, app_definition), input_schema)


class ConfiguredConnection(Protocol):
    """What pinned arguments read of a connection: a `ToolConnection` or a plain `ConnectionRow`."""

    @property
    def method_key(self) -> str | None: ...
    @property
    def method_config(self) -> dict: ...


def pinned_arguments(
    connection: ConfiguredConnection, app_definition: AppDefinition | None
) -> dict[str, Any]:
    """Every tool argument the connection's public configuration pins, whatever the tool (once per connection)."""
    if app_definition is None:
        return {}
    method = get_method(app_definition, connection.method_key)
    if method is None:
        return {}
    values = connection.method_config
    pinned: dict[str, Any] = {}
    for tenant_field in method.tenantFields:
        if not tenant_field.is_public:
            continue
        argument = tenant_field.toolArgument
        value = values.get(tenant_field.key)
        if isinstance(value, str):
            value = value.strip()
        if argument and value not in (None, ""):
            pinned[argument] = value
    return pinned


def managed_for_schema(pinned: dict[str, Any], input_schema: dict | None) -> dict[str, Any]:
    """The pinned arguments this tool's schema declares."""
    if not pinned:
        return {}
    properties = (input_schema or {}).get("properties") or {}
    return {argument: value for argument, value in pinned.items() if argument in properties}


def project_schema(input_schema: dict | None, managed: dict[str, Any]) -> dict:
    """The agent-visible schema: managed arguments removed from `properties` and `required`.

    Copies only the levels it changes (a listing projects thousands of schemas); nested values are shared with
    the stored schema and never modified. A schema with nothing to change is returned as it is.
    """
    schema = listed_schema(input_schema)
    if not managed:
        return schema
    schema = dict(schema)
    properties = schema.get("properties")
    if isinstance(properties, dict):
        schema["properties"] = {k: v for k, v in properties.items() if k not in managed}
    required = schema.get("required")
    if isinstance(required, list):
        schema["required"] = [r for r in required if r not in managed]
        if not schema["required"]:
            del schema["required"]
    return schema


def project_arguments(arguments: dict, managed: dict[str, Any]) -> dict:
    """The arguments the provider receives: the caller's, then the managed values on top."""
    return {**arguments, **managed}


def _looks_secret(key: str) -> bool:
    lowered = str(key).lower().replace("-", "_")
    return any(h in lowered for h in SECRET_KEY_HINTS) and not lowered.endswith(("_id", "_count"))


def secret_argument_names(input_schema: dict | None) -> set[str]:
    """Top-level arguments the schema marks secret (`format: password`, `writeOnly`) or whose names say so."""
    properties = (input_schema or {}).get("properties") or {}
    names = set()
    for key, prop in properties.items():
        prop = prop if isinstance(prop, dict) else {}
        if prop.get("format") == "password" or prop.get("writeOnly") is True or _looks_secret(key):
            names.add(key)
    return names


def redact_arguments(arguments: dict, input_schema: dict | None) -> dict:
    """A copy safe to show people: secret-marked values (and nested secret-named keys) replaced."""
    secret = secret_argument_names(input_schema)

    def walk(value: Any, key: str | None = None) -> Any:
        if key is not None and (key in secret or _looks_secret(key)):
            return REDACTED
        if isinstance(value, dict):
            return {k: walk(v, k) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return {k: walk(v, k) for k, v in arguments.items()}


def canonical_digest(value: Any) -> str:
    text = json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    return hashlib.sha256(text.encode()).hexdigest()
