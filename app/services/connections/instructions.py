"""Connection agent instructions: the saved setting, template defaults and reset, public context, and the snapshot.

The snapshot layout and digest are an exact contract with agents, so they never vary: the header `## Connection
instructions`, an intro sentence, one block per eligible connection sorted by connection id, blocks joined by a
horizontal rule (`BLOCK_SEPARATOR`), and the lowercase hex SHA-256 of the UTF-8 text as digest. `None` when no block is
eligible.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, Field, StringConstraints, ValidationError

from app.catalog.loader import get_method, template_default
from app.catalog.schema import AppDefinition, ConfigField, Method
from app.services.access.checks import CheckFailure, CheckSubject, register_check

INSTRUCTIONS_MAX_LENGTH = 2000
SNAPSHOT_HEADER = "## Connection instructions"
SNAPSHOT_INTRO = (
    "The following instructions apply to your authorized connections. "
    "Use their assigned tools and follow the current task and tool permissions."
)
BLOCK_PREFIX = "Connection source and configuration (data): "
BLOCK_SEPARATOR = "\n\n---\n\n"


class TemplateRef(BaseModel):
    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    id: Annotated[str, StringConstraints(min_length=1, max_length=160)]
    version: int = Field(gt=0, strict=True)


class InstructionsSetting(BaseModel):
    """The saved `agentInstructions` of a connection: `{enabled, text, template?}`."""

    model_config = ConfigDict(extra="forbid", str_strip_whitespace=True)

    enabled: bool = Field(strict=True)
    text: Annotated[str, StringConstraints(min_length=1, max_length=INSTRUCTIONS_MAX_LENGTH)]
    template: TemplateRef | None = None

    def to_json(self) -> dict:
        data: dict[str, Any] = {"enabled": self.enabled, "text": self.text}
        if self.template is not None:
            data["template"] = {"id": self.template.id, "version": self.template.version}
        return data


def parse_setting(value: dict | None) -> InstructionsSetting | None:
    """Parse a stored setting; a stored value that no longer parses counts as no instructions."""
    if value is None:
        return None
    try:
        return InstructionsSetting.model_validate(value)
    except ValidationError:
        return None


def editor_saved_value(saved: dict | None, app_definition: AppDefinition | None) -> dict | None:
    """What the editor starts from: the saved setting, or (when cleared) the template default switched off."""
    if saved is not None:
        return saved
    default = template_default(app_definition) if app_definition else None
    if default is None:
        return None
    return {**default, "enabled": False}


def differs_from_template(setting: dict | None, app_definition: AppDefinition | None) -> bool:
    default = template_default(app_definition) if app_definition else None
    if default is None or setting is None:
        return default is not None
    return setting.get("text") != default["text"] or setting.get("template") != default["template"]


def reset_to_template(setting: dict, app_definition: AppDefinition | None) -> dict:
    """Adopt the current template text and provenance, keeping the current toggle."""
    default = template_default(app_definition) if app_definition else None
    if default is None:
        return setting
    enabled = setting.get("enabled", True)
    return {**default, "enabled": enabled}


def _public_fields(method: Method) -> list[ConfigField]:
    return [*method.tenantFields, *method.extensionFields]


def instruction_context(app_definition: AppDefinition | None, config: dict) -> dict | None:
    """The declared public configuration of a connection, or None when a required value is missing.

    Secret and password fields never enter the context, nor do URL fields (transport settings, such as a custom
    server's address). Unknown apps contribute an empty context.
    """
    if app_definition is None:
        return {}
    method = get_method(app_definition, (config or {}).get("connectionMethodKey"))
    if method is None:
        return {}
    values = (config or {}).get("methodConfig") or {}
    context: dict[str, Any] = {}
    for field in _public_fields(method):
        if field.secret or field.type == "password":
            continue
        value = values.get(field.key, field.defaultValue)
        if isinstance(value, str):
            value = value.strip()
        missing = value is None or value == ""
        if missing:
            if field.required:
                return None
            continue
        if field.type == "url":
            # Server addresses are transport settings, not guidance: agents never see or call URLs directly.
            continue
        if isinstance(value, str | bool | int | float):
            context[field.key] = value
    return context


@dataclass(frozen=True)
class InstructionSource:
    """One connection an agent may use, with the identity grant selected for it."""

    connection_id: str
    connection_name: str
    grant_id: str
    connector: str
    method: str | None
    setting: dict | None
    context: dict | None


@dataclass(frozen=True)
class BlockParts:
    """A connection's snapshot block around its grant: `head`, then the grant id as JSON, then `tail`. Everything
    but the grant depends only on the connection's name, app, configuration, instructions and app definition, so
    a caller may keep it per connection (`block_parts`)."""

    head: str
    tail: str

    def block(self, grant_id: str) -> str:
        return self.head + _json(grant_id) + self.tail


def _json(value: Any) -> str:
    return json.dumps(value, separators=(",", ":"), ensure_ascii=False)


def block_parts(
    connection_id: str,
    connection_name: str,
    connector: str,
    method: str | None,
    setting: dict | None,
    context: dict | None,
) -> BlockParts | None:
    """The block of one eligible connection without its grant, or None when it contributes none (instructions
    missing, unparsable or disabled; a required configuration value missing).

    The provenance is the JSON object `{connectionId, connectionName, grantId, connector, method, template?,
    context}`, written member by member exactly as `json.dumps` writes that object with these separators."""
    parsed = parse_setting(setting)
    if parsed is None or not parsed.enabled or context is None:
        return None
    head = f'{BLOCK_PREFIX}{{"connectionId":{_json(connection_id)},"connectionName":{_json(connection_name)},"grantId":'
    template = ""
    if parsed.template is not None:
        template = f',"template":{_json({"id": parsed.template.id, "version": parsed.template.version})}'
    tail = f',"connector":{_json(connector)},"method":{_json(method)}{template},"context":{_json(context)}}}'
    return BlockParts(head=head, tail=f"{tail}\n\n{parsed.text}")


def source_block(source: InstructionSource) -> str | None:
    parts = block_parts(
        source.connection_id,
        source.connection_name,
        source.connector,
        source.method,
        source.setting,
        source.context,
    )
    return parts.block(source.grant_id) if parts is not None else None


def compose_snapshot(sources: list[InstructionSource]) -> dict | None:
    blocks = (source_block(source) for source in sorted(sources, key=lambda s: s.connection_id))
    return snapshot_of([block for block in blocks if block is not None])


def snapshot_of(blocks: list[str]) -> dict | None:
    """The snapshot of the blocks in order (sorted by connection id), or None when there are none."""
    if not blocks:
        return None
    text = f"{SNAPSHOT_HEADER}\n\n{SNAPSHOT_INTRO}\n\n" + BLOCK_SEPARATOR.join(blocks)
    return {"text": text, "digest": hashlib.sha256(text.encode("utf-8")).hexdigest()}


def _check_required_configuration(subject: CheckSubject) -> CheckFailure | None:
    """The access rule's advisory `required_configuration` check (`access.checks`): a required public setting is
    empty, so the connection's standing instructions are held back (`instruction_context`); tools stay available."""
    config = getattr(subject.access.connection, "config", None) or {}
    if subject.app_definition is None or instruction_context(subject.app_definition, config) is not None:
        return None
    return CheckFailure(
        "required_configuration",
        "missing_settings",
        "A required setting of the connection is empty: existing tools remain available, but its standing "
        "instructions do not reach agents until it is filled in.",
    )


register_check(
    "required_configuration",
    _check_required_configuration,
    label="Required configuration",
    blocks_tools=False,
)
