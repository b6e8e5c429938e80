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


def compose_snapshot(sources: list[InstructionSource]) -> dict | None:
    blocks = []
    for source in sorted(sources, key=lambda s: s.connection_id):
        setting = parse_setting(source.setting)
        if setting is None or not setting.enabled or source.context is None:
            continue
        provenance: dict[str, Any] = {
            "connectionId": source.connection_id,
            "connectionName": source.connection_name,
            "grantId": source.grant_id,
            "connector": source.connector,
            "method": source.method,
        }
        if setting.template is not None:
            provenance["template"] = {"id": setting.template.id, "version": setting.template.version}
        provenance["context"] = source.context
        data = json.dumps(provenance, separators=(",", ":"), ensure_ascii=False)
        blocks.append(f"{BLOCK_PREFIX}{data}\n\n{setting.text}")
    if not blocks:
        return None
    text = f"{SNAPSHOT_HEADER}\n\n{SNAPSHOT_INTRO}\n\n" + BLOCK_SEPARATOR.join(blocks)
    return {"text": text, "digest": hashlib.sha256(text.encode("utf-8")).hexdigest()}
