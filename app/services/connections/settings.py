"""A connection's settings: field validation, agent instructions, tool policies and updates."""

from __future__ import annotations

import enum
import hashlib
import json
import re
import uuid
from collections.abc import Iterable
from typing import Any, Final

from sqlalchemy import select

from app.catalog.loader import get_method
from app.catalog.schema import AppDefinition, ConfigField, Method
from app.core.errors import Forbidden, ServiceError, ValidationFailed
from app.extensions import db
from app.models import (
    ConnectionTool,
    Membership,
    ToolConnection,
    ToolPolicy,
)
from app.models.connections import CUSTOM_APP_SLUG, ToolAction
from app.services import notifications
from app.services.access.effective import CONFIGURE_FORBIDDEN, DEFAULT_TOOL_ACTION, can_configure
from app.services.activity import record_activity
from app.services.connections.audience import Audience, set_audience
from app.services.connections.instructions import InstructionsSetting


class Unset(enum.Enum):
    """An optional setting the caller did not send (distinct from None, which clears it)."""

    TOKEN = 0


UNSET: Final = Unset.TOKEN


def settings_digest(setting: dict | None) -> str | None:
    """A digest of a saved instruction setting for activity rows (the text itself is not copied there)."""
    if setting is None:
        return None
    return hashlib.sha256(json.dumps(setting, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def validate_instructions(value: Any) -> dict | None:
    if value is None:
        return None
    try:
        return InstructionsSetting.model_validate(value).to_json()
    except Exception as err:  # pydantic.ValidationError
        details = [
            {"loc": ["agentInstructions", *e["loc"]], "msg": e["msg"], "type": e["type"]}
            for e in err.errors(include_url=False, include_input=False)  # type: ignore[attr-defined]
        ]
        raise ValidationFailed(details) from None


def _field_error(key: str, message: str, group: str) -> dict:
    return {"loc": [group, key], "msg": message, "type": "value_error"}


def validate_fields(
    fields: Iterable[ConfigField], values: dict, *, group: str, partial: bool = False
) -> dict:
    """Check values against declared fields (required, pattern, length); unknown keys are refused."""
    values = values or {}
    known = {f.key: f for f in fields}
    errors = [_field_error(k, "Unknown field", group) for k in values if k not in known]
    cleaned: dict = {}
    for field in fields:
        if field.key not in values:
            if field.required and not partial:
                errors.append(_field_error(field.key, f"{field.label} is required", group))
            continue
        value = values[field.key]
        if field.type == "checkbox":
            if not isinstance(value, bool):
                errors.append(_field_error(field.key, f"{field.label} must be true or false", group))
                continue
            cleaned[field.key] = value
            continue
        if value is None:
            value = ""
        if not isinstance(value, str):
            errors.append(_field_error(field.key, f"{field.label} must be text", group))
            continue
        value = value.strip()
        if not value:
            if field.required:
                errors.append(_field_error(field.key, f"{field.label} is required", group))
            continue
        rules = field.validation
        if rules is not None and rules.maxLength is not None and len(value) > rules.maxLength:
            errors.append(
                _field_error(field.key, f"{field.label} is at most {rules.maxLength} characters", group)
            )
            continue
        if rules is not None and rules.pattern and not re.fullmatch(rules.pattern, value):
            errors.append(_field_error(field.key, f"{field.label} has an invalid format", group))
            continue
        if field.type == "url" and not re.match(r"^https?://[^\s/$.?#].[^\s]*$", value):
            errors.append(_field_error(field.key, f"{field.label} must be an http(s) URL", group))
            continue
        cleaned[field.key] = value
    if errors:
        raise ValidationFailed(errors)
    return cleaned


def public_fields(method: Method) -> list[ConfigField]:
    return [*method.tenantFields, *method.extensionFields]


def _require_configure(actor: Membership, connection: ToolConnection) -> None:
    if not can_configure(actor, connection):
        raise Forbidden(CONFIGURE_FORBIDDEN)


def _set_policy(
    connection: ToolConnection, tool_name: str, action: str | None, pinned: bool | None = None
) -> None:
    """Set the tool's action and/or whether it is pinned (None: unchanged; a new row starts at ask first)."""
    row = db.session.scalar(
        select(ToolPolicy).where(ToolPolicy.connection_id == connection.id, ToolPolicy.tool_name == tool_name)
    )
    if row is None:
        row = ToolPolicy(
            company_id=connection.company_id,
            connection_id=connection.id,
            tool_name=tool_name,
            action=DEFAULT_TOOL_ACTION,
            pinned=False,
        )
        db.session.add(row)
    if action is not None:
        row.action = action
    if pinned is not None:
        row.pinned = pinned


def update_connection(
    actor: Membership,
    connection: ToolConnection,
    app_definition: AppDefinition | None,
    *,
    name: str | None | Unset = UNSET,
    enabled: bool | Unset = UNSET,
    agent_instructions: dict | None | Unset = UNSET,
    method_config: dict | None | Unset = UNSET,
    audience: Audience | Unset = UNSET,
    tool_policies: dict[str, str] | Unset = UNSET,
    pinned_tools: dict[str, bool] | Unset = UNSET,
) -> ToolConnection:
    """Change saved settings. Instructions, configuration, audience and policies are independent of each other."""
    _require_configure(actor, connection)
    changed = [
        k
        for k, v in {
            "name": name,
            "enabled": enabled,
            "agentInstructions": agent_instructions,
            "methodConfig": method_config,
            "audience": audience,
            "toolPolicies": tool_policies,
            "pinnedTools": pinned_tools,
        }.items()
        if v is not UNSET
    ]
    if not changed:
        raise ServiceError("At least one tool connection field is required", 400)
    before = connection.agent_instructions
    if name is not UNSET:
        new_name = (name or "").strip()
        if not new_name or len(new_name) > 200:
            raise ValidationFailed(
                [{"loc": ["name"], "msg": "Name must be 1-200 characters", "type": "value_error"}]
            )
        if new_name != connection.name and new_name in set(
            db.session.scalars(
                select(ToolConnection.name).where(ToolConnection.company_id == connection.company_id)
            )
        ):
            raise ValidationFailed(
                [{"loc": ["name"], "msg": "Another connection already has this name", "type": "value_error"}]
            )
        connection.name = new_name
    if enabled is not UNSET:
        if connection.enabled != bool(enabled) and connection.status != "draft":
            notifications.connection_switched(connection, bool(enabled))
        connection.enabled = bool(enabled)
    if agent_instructions is not UNSET:
        connection.agent_instructions = validate_instructions(agent_instructions)
    if method_config is not UNSET:
        method = get_method(app_definition, connection.method_key) if app_definition else None
        fields = public_fields(method) if method else []
        merged = {**connection.method_config, **(method_config or {})}
        merged = {k: v for k, v in merged.items() if v is not None}
        cleaned = validate_fields(fields, merged, group="methodConfig", partial=True)
        connection.config = {**connection.config, "methodConfig": cleaned}
    if audience is not UNSET:
        set_audience(actor, connection, audience)
    if tool_policies is not UNSET or pinned_tools is not UNSET:
        policies = {} if isinstance(tool_policies, Unset) else tool_policies
        pins = {} if isinstance(pinned_tools, Unset) else pinned_tools
        known = set(
            db.session.scalars(
                select(ConnectionTool.name).where(
                    ConnectionTool.connection_id == connection.id, ConnectionTool.status == "active"
                )
            )
        )
        errors = [
            {"loc": ["toolPolicies", n], "msg": "Unknown tool or action", "type": "value_error"}
            for n, a in policies.items()
            if n not in known or a not in ToolAction.values()
        ] + [
            {"loc": ["pinnedTools", n], "msg": "Unknown tool", "type": "value_error"}
            for n, p in pins.items()
            if n not in known or not isinstance(p, bool)
        ]
        if errors:
            raise ValidationFailed(errors)
        for tool_name in {**policies, **pins}:
            _set_policy(connection, tool_name, policies.get(tool_name), pins.get(tool_name))
    record_activity(
        company_id=connection.company_id,
        actor_type="user",
        actor_id=actor.user_id,
        action="tool_connection.updated",
        entity_type="tool_connection",
        entity_id=connection.id,
        details={
            "fields": changed,
            "instructionsDigestBefore": settings_digest(before),
            "instructionsDigestAfter": settings_digest(connection.agent_instructions),
        },
    )
    return connection


def list_connections(company_id: uuid.UUID) -> list[ToolConnection]:
    return list(
        db.session.scalars(
            select(ToolConnection)
            .where(ToolConnection.company_id == company_id, ToolConnection.status != "archived")
            .order_by(ToolConnection.name)
        )
    )


def is_custom(connection: ToolConnection) -> bool:
    return connection.app_slug == CUSTOM_APP_SLUG
