"""Tool connections: the shared setup flow (start a draft, verify and finish), reconnect, and configuration changes.

The setup flow is host-agnostic: the full-page Apps connect route and the task-card dialog both call these functions.
Provider specifics come from the app definition (methods, fields, key placement), never from the slug.
"""

from __future__ import annotations

import hashlib
import json
import re
import uuid
from dataclasses import dataclass

from flask import current_app
from sqlalchemy import delete, select

from app.catalog.loader import get_method, template_default
from app.core.errors import Forbidden, ProviderRefused, ServiceError, Unprocessable, ValidationFailed
from app.core.net_guard import check_outbound_url, outbound_allowed_hosts
from app.extensions import db
from app.models import (
    Agent,
    ConnectionGrant,
    ConnectionInstall,
    ConnectionTool,
    GrantSecret,
    Membership,
    ToolConnection,
    ToolPolicy,
)
from app.models.base import utcnow
from app.models.connections import CUSTOM_APP_SLUG, TOOL_ACTIONS
from app.services import card_binding, provider_mcp
from app.services.access.effective import CONFIGURE_FORBIDDEN, can_configure, can_manage_connections
from app.services.activity import record_activity
from app.services.instructions import InstructionsSetting
from app.services.secrets_box import decrypt, encrypt

UNSET = object()
SEARCH_WORD = re.compile(r"[^\W_]+")
# Secret keys under which OAuth grants keep their tokens (encrypted like every credential).
OAUTH_ACCESS_TOKEN_KEY = "oauth_access_token"  # noqa: S105 (a key name, not a secret)
OAUTH_REFRESH_TOKEN_KEY = "oauth_refresh_token"  # noqa: S105 (a key name, not a secret)
IDENTITY_KINDS = {"organization": "organization", "user": "user"}
ORGANIZATION_FORBIDDEN = "Only connection managers can connect an app for the whole organization"


@dataclass(frozen=True)
class Audience:
    all_agents: bool
    agent_ids: tuple[uuid.UUID, ...] = ()

    def to_json(self) -> dict:
        return {"allAgents": self.all_agents, "agentIds": [str(a) for a in self.agent_ids]}


def settings_digest(setting: dict | None) -> str | None:
    """A digest of a saved instruction setting for activity rows (the text itself is not copied there)."""
    if setting is None:
        return None
    return hashlib.sha256(json.dumps(setting, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def validate_instructions(value) -> dict | None:
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


def validate_fields(fields, values: dict, *, group: str, partial: bool = False) -> dict:
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


def public_fields(method) -> list:
    return [*method.tenantFields, *method.extensionFields]


def _unique_name(company_id: uuid.UUID, base: str) -> str:
    taken = set(
        db.session.scalars(select(ToolConnection.name).where(ToolConnection.company_id == company_id))
    )
    if base not in taken:
        return base
    n = 2
    while f"{base} {n}" in taken:
        n += 1
    return f"{base} {n}"


def _require_configure(actor: Membership, connection: ToolConnection) -> None:
    if not can_configure(actor, connection):
        raise Forbidden(CONFIGURE_FORBIDDEN)


def start_connection(
    actor: Membership,
    app_definition,
    *,
    method_key: str | None,
    identity: str,
    name: str | None = None,
    method_config: dict | None = None,
    audience: Audience | None = None,
    agent_instructions=UNSET,
) -> ToolConnection:
    """Create a draft connection with its public configuration, identity and chosen audience (grants nothing yet)."""
    if not actor.has_write_access:
        raise Forbidden("You have read-only access to this company")
    method = get_method(app_definition, method_key)
    if method is None or (method_key and method.key != method_key):
        raise ValidationFailed(
            [{"loc": ["methodKey"], "msg": "Unknown connection method", "type": "value_error"}]
        )
    if identity not in IDENTITY_KINDS or identity not in method.grantKinds:
        raise ValidationFailed(
            [
                {
                    "loc": ["identity"],
                    "msg": "This method does not support that identity",
                    "type": "value_error",
                }
            ]
        )
    if identity == "organization" and not can_manage_connections(actor):
        raise Forbidden(ORGANIZATION_FORBIDDEN)
    cleaned_config = validate_fields(public_fields(method), method_config or {}, group="methodConfig")
    audience = audience or Audience(all_agents=True)
    _check_audience(actor, audience)
    instructions = template_default(app_definition) if agent_instructions is UNSET else agent_instructions
    instructions = validate_instructions(instructions)
    connection = ToolConnection(
        company_id=actor.company_id,
        app_slug=app_definition.slug,
        name=_unique_name(actor.company_id, (name or "").strip() or app_definition.name),
        status="draft",
        enabled=False,
        auth_kind=method.auth,
        config={
            "connectionMethodKey": method.key,
            "methodConfig": cleaned_config,
            "identity": identity,
            "draftAudience": audience.to_json(),
        },
        agent_instructions=instructions,
        created_by_user_id=actor.user_id,
    )
    db.session.add(connection)
    db.session.flush()
    grant_for_identity(connection, identity, actor)
    record_activity(
        company_id=actor.company_id,
        actor_type="user",
        actor_id=actor.user_id,
        action="tool_app.connected",
        entity_type="tool_connection",
        entity_id=connection.id,
        details={
            "app": app_definition.slug,
            "method": method.key,
            "identity": identity,
            "instructionsDigest": settings_digest(instructions),
        },
    )
    return connection


def grant_for_identity(connection: ToolConnection, identity: str, actor: Membership) -> ConnectionGrant:
    """The grant that holds this actor's credentials for the chosen identity (created on first use)."""
    if identity == "organization":
        grant = db.session.scalar(
            select(ConnectionGrant).where(
                ConnectionGrant.connection_id == connection.id,
                ConnectionGrant.kind == "organization",
                ConnectionGrant.is_default.is_(True),
            )
        )
        if grant is None:
            grant = ConnectionGrant(
                company_id=connection.company_id,
                connection_id=connection.id,
                kind="organization",
                is_default=True,
                created_by_user_id=actor.user_id,
            )
            db.session.add(grant)
    else:
        grant = db.session.scalar(
            select(ConnectionGrant).where(
                ConnectionGrant.connection_id == connection.id,
                ConnectionGrant.subject_user_id == actor.user_id,
            )
        )
        if grant is None:
            grant = ConnectionGrant(
                company_id=connection.company_id,
                connection_id=connection.id,
                kind="user",
                subject_user_id=actor.user_id,
                created_by_user_id=actor.user_id,
            )
            db.session.add(grant)
    db.session.flush()
    return grant


def _member_server_url(connection: ToolConnection, method, secrets: dict[str, str] | None) -> str | None:
    """The server address a member typed into the field the definition marks as the server URL (a tenant field is
    in the connection's `methodConfig`, a credential field in the grant's `secrets`), when it is the one used: an
    operator override wins."""
    overrides = current_app.config.get("PROVIDER_SERVER_URLS") or {}
    field = method.server_url_field if method is not None else None
    if field is None or overrides.get(connection.app_slug):
        return None
    if any(field is f for f in method.credentialFields):
        return (secrets or {}).get(field.key) or None
    return connection.method_config.get(field.key) or None


def provider_guard(
    connection: ToolConnection, method, secrets: dict[str, str] | None = None
) -> frozenset[str] | None:
    """For a member-typed server URL, the outbound guard's allowed hosts: its MCP client then connects only to
    addresses checked at connect time. None for operator-configured URLs, which are trusted."""
    return outbound_allowed_hosts() if _member_server_url(connection, method, secrets) else None


def server_url_for(
    connection: ToolConnection, app_definition, method, secrets: dict[str, str] | None = None
) -> str:
    """The provider MCP endpoint: an operator override, the member's value of the field the definition marks as the
    server URL (`secrets` are the grant's credentials, for a credential field), or the method's default."""
    overrides = current_app.config.get("PROVIDER_SERVER_URLS") or {}
    url = overrides.get(connection.app_slug)
    member_url = _member_server_url(connection, method, secrets)
    if not url and member_url:
        # A URL typed by a member reaches our network only through the outbound guard.
        url = check_outbound_url(member_url)
    if not url and method.defaults is not None:
        url = method.defaults.serverUrl
    if not url:
        raise ProviderRefused("This connection has no MCP server URL configured.")
    return str(url)


def stored_secrets(grant: ConnectionGrant) -> dict[str, str]:
    rows = db.session.scalars(select(GrantSecret).where(GrantSecret.grant_id == grant.id))
    return {row.key: decrypt(row.ciphertext) for row in rows}


def provider_headers(method, secrets: dict[str, str]) -> tuple[dict, dict]:
    """Headers and query parameters that carry the credential as the definition places it."""
    if method.auth == "oauth":
        token = secrets.get(OAUTH_ACCESS_TOKEN_KEY)
        return ({"Authorization": f"Bearer {token}"} if token else {}), {}
    if method.auth != "api_key" or method.keyPlacement is None:
        return {}, {}
    secret_fields = [f for f in method.credentialFields if f.secret]
    key_field = secret_fields[0] if secret_fields else None
    value = secrets.get(key_field.key) if key_field else None
    if not value:
        return {}, {}
    return provider_mcp.headers_for_key(method.keyPlacement.model_dump(), value)


def connection_endpoint(
    connection: ToolConnection, app_definition, grant: ConnectionGrant
) -> tuple[str, dict]:
    """URL (with any query credential) and headers to reach the provider as this grant. Used by the gateway too."""
    method = get_method(app_definition, connection.method_key)
    secrets = stored_secrets(grant)
    headers, query = provider_headers(method, secrets)
    url = server_url_for(connection, app_definition, method, secrets)
    if query:
        url = provider_mcp.url_with_query(url, query)
    return url, headers


def finish_connection(
    actor: Membership,
    connection: ToolConnection,
    app_definition,
    *,
    credentials: dict | None = None,
    method_config=UNSET,
    audience=UNSET,
    agent_instructions=UNSET,
) -> ToolConnection:
    """Verify the credentials against the provider, store them encrypted, index tools, and activate.

    Also the reconnect (key rotation) path: the same connection id, grants, instructions and policies are kept. A
    refused key raises ProviderRefused before anything is stored, so a draft stays a draft and an active connection
    keeps its previous, working key.
    """
    _require_configure(actor, connection)
    method = get_method(app_definition, connection.method_key)
    identity = connection.config.get("identity", "organization")
    if identity == "organization" and not can_manage_connections(actor):
        raise Forbidden(ORGANIZATION_FORBIDDEN)
    if method_config is not UNSET:
        cleaned = validate_fields(public_fields(method), method_config or {}, group="methodConfig")
        connection.config = {**connection.config, "methodConfig": cleaned}
    before_instructions = connection.agent_instructions
    if agent_instructions is not UNSET:
        connection.agent_instructions = validate_instructions(agent_instructions)
    grant = grant_for_identity(connection, identity, actor)
    credentials = {k: v for k, v in (credentials or {}).items() if isinstance(v, str) and v.strip()}
    secrets = {
        **stored_secrets(grant),
        **validate_fields(method.credentialFields, credentials, group="credentials", partial=True),
    }
    if method.auth == "api_key":
        missing = [f for f in method.credentialFields if f.required and not secrets.get(f.key)]
        if missing:
            raise ValidationFailed(
                [_field_error(f.key, f"{f.label} is required", "credentials") for f in missing]
            )
    elif method.auth == "oauth":
        raise Unprocessable("Sign in with the provider to finish this connection.")
    tools = verify_and_list_tools(connection, app_definition, method, secrets)
    first_activation = activate_connection(actor, connection, grant, secrets, tools, audience=audience)
    record_setup_finished(actor, connection, grant, tools, before_instructions, first_activation)
    return connection
    return connection


def activate_connection(
    actor: Membership,
    connection: ToolConnection,
    grant: ConnectionGrant,
    secrets: dict[str, str],
    tools,
    *,
    audience=UNSET,
) -> bool:
    """The shared tail of every successful setup (API key or OAuth): store the verified credentials encrypted,
    index tools, apply the audience, and mark the connection live. Returns True on first activation."""
    for key, value in secrets.items():
        _store_secret(grant, key, value)
    grant.status = "active"
    first_activation = connection.status != "active"
    index_tools(connection, tools, first_index=first_activation)
    draft_audience = connection.config.get("draftAudience") or {"allAgents": True, "agentIds": []}
    # Activate before applying the audience: installs exist only for live connections.
    connection.status = "active"
    if audience is not UNSET:
        set_audience(actor, connection, audience)
    elif first_activation and not card_binding.pending_cards_bound_to(connection):
        # A card's draft has no audience of its own: the card's completion applies the one saved on the card.
        set_audience(
            actor,
            connection,
            Audience(
                draft_audience.get("allAgents", True),
                tuple(uuid.UUID(a) for a in draft_audience.get("agentIds", [])),
            ),
        )
    if first_activation:
        connection.enabled = True
    connection.health_status = "healthy"
    connection.health_message = None
    connection.last_catalog_refresh_at = utcnow()
    return first_activation


def record_setup_finished(
    actor, connection, grant, tools, before_instructions, first_activation: bool
) -> None:
    record_activity(
        company_id=connection.company_id,
        actor_type="user",
        actor_id=actor.user_id,
        action="tool_app.finished" if first_activation else "tool_connection.reconnected",
        entity_type="tool_connection",
        entity_id=connection.id,
        details={
            "toolCount": len(tools),
            "grantId": str(grant.id),
            "instructionsDigestBefore": settings_digest(before_instructions),
            "instructionsDigestAfter": settings_digest(connection.agent_instructions),
        },
    )


def verify_and_list_tools(connection, app_definition, method, secrets: dict[str, str]):
    headers, query = provider_headers(method, secrets)
    url = server_url_for(connection, app_definition, method, secrets)
    if query:
        url = provider_mcp.url_with_query(url, query)
    try:
        return provider_mcp.list_tools(
            url,
            headers=headers,
            timeout=current_app.config["OUTBOUND_TIMEOUT_SECONDS"],
            guard=provider_guard(connection, method, secrets),
        )
    except provider_mcp.ProviderError as err:
        raise ProviderRefused(err.message) from None


def _store_secret(grant: ConnectionGrant, key: str, value: str) -> None:
    row = db.session.scalar(
        select(GrantSecret).where(GrantSecret.grant_id == grant.id, GrantSecret.key == key)
    )
    if row is None:
        db.session.add(
            GrantSecret(company_id=grant.company_id, grant_id=grant.id, key=key, ciphertext=encrypt(value))
        )
    else:
        row.ciphertext = encrypt(value)


def index_tools(connection: ToolConnection, tools, *, first_index: bool) -> None:
    """Upsert the stored tool index. On first index read tools are allowed and write tools ask first; tools a
    provider adds later get no policy row, which means ask first."""
    existing = {
        t.name: t
        for t in db.session.scalars(
            select(ConnectionTool).where(ConnectionTool.connection_id == connection.id)
        )
    }
    now = utcnow()
    seen = set()
    for tool in tools:
        seen.add(tool.name)
        row = existing.get(tool.name)
        if row is None:
            row = ConnectionTool(
                company_id=connection.company_id,
                connection_id=connection.id,
                name=tool.name,
                first_seen_at=now,
            )
            db.session.add(row)
        row.description = tool.description or ""
        row.input_schema = tool.input_schema or {}
        row.is_write = tool.is_write
        row.version_hash = tool.version_hash
        row.status = "active"
        row.last_seen_at = now
        if first_index:
            _set_policy(connection, tool.name, "ask_first" if tool.is_write else "allow")
    for name, row in existing.items():
        if name not in seen:
            row.status = "removed"
    connection.tool_search_text = tool_search_text(tools)


def tool_search_text(tools) -> str:
    """The distinct lowercase words of the tools' names and descriptions (what search matches query words in)."""
    words: set[str] = set()
    for tool in tools:
        words.update(SEARCH_WORD.findall(f"{tool.name} {tool.description or ''}".lower()))
    return " ".join(sorted(words))


def _set_policy(connection: ToolConnection, tool_name: str, action: str) -> None:
    row = db.session.scalar(
        select(ToolPolicy).where(ToolPolicy.connection_id == connection.id, ToolPolicy.tool_name == tool_name)
    )
    if row is None:
        db.session.add(
            ToolPolicy(
                company_id=connection.company_id,
                connection_id=connection.id,
                tool_name=tool_name,
                action=action,
            )
        )
    else:
        row.action = action


def audience_of(connection: ToolConnection) -> Audience:
    if connection.status == "draft":
        draft = connection.config.get("draftAudience") or {"allAgents": True, "agentIds": []}
        return Audience(draft.get("allAgents", True), tuple(uuid.UUID(a) for a in draft.get("agentIds", [])))
    installs = db.session.scalars(
        select(ConnectionInstall).where(ConnectionInstall.connection_id == connection.id)
    )
    all_agents = False
    agent_ids = []
    for install in installs:
        if install.target_type == "company":
            all_agents = True
        else:
            agent_ids.append(install.target_id)
    return Audience(all_agents, tuple(sorted(agent_ids)))


def _check_audience(actor: Membership, audience: Audience) -> None:
    if audience.agent_ids:
        found = set(
            db.session.scalars(
                select(Agent.id).where(Agent.company_id == actor.company_id, Agent.id.in_(audience.agent_ids))
            )
        )
        unknown = [a for a in audience.agent_ids if a not in found]
        if unknown:
            raise ValidationFailed(
                [
                    {
                        "loc": ["audience", "agentIds"],
                        "msg": "Choose agents of this company",
                        "type": "value_error",
                    }
                ]
            )


def set_audience(actor: Membership, connection: ToolConnection, audience: Audience) -> None:
    """Apply the audience as installs in the same transaction; narrowing removes the matching installs.

    Broadening an organization connection's audience needs connection-management authority.
    """
    identity = connection.config.get("identity", "organization")
    _check_audience(actor, audience)
    if connection.status == "draft":
        connection.config = {**connection.config, "draftAudience": audience.to_json()}
        return
    current = audience_of(connection)
    broadening = (audience.all_agents and not current.all_agents) or bool(
        set(audience.agent_ids) - set(current.agent_ids)
    )
    if broadening and identity == "organization" and not can_manage_connections(actor):
        raise Forbidden("Only connection managers can widen which agents use this connection")
    if audience.all_agents and not current.all_agents:
        add_company_install(connection, actor.user_id)
    elif not audience.all_agents and current.all_agents:
        db.session.execute(
            delete(ConnectionInstall).where(
                ConnectionInstall.connection_id == connection.id, ConnectionInstall.target_type == "company"
            )
        )
    keep = set(audience.agent_ids)
    removed = [a for a in current.agent_ids if a not in keep]
    if removed:
        db.session.execute(
            delete(ConnectionInstall).where(
                ConnectionInstall.connection_id == connection.id,
                ConnectionInstall.target_type == "agent",
                ConnectionInstall.target_id.in_(removed),
            )
        )
    for agent_id in keep - set(current.agent_ids):
        add_agent_install(connection, agent_id, actor.user_id)
    db.session.flush()


def add_company_install(connection: ToolConnection, created_by_user_id: uuid.UUID | None) -> None:
    """Install the connection for every agent of the company (additive: an existing install is kept)."""
    exists = db.session.scalar(
        select(ConnectionInstall.id).where(
            ConnectionInstall.connection_id == connection.id, ConnectionInstall.target_type == "company"
        )
    )
    if exists is None:
        db.session.add(
            ConnectionInstall(
                company_id=connection.company_id,
                connection_id=connection.id,
                target_type="company",
                target_id=connection.company_id,
                created_by_user_id=created_by_user_id,
            )
        )


def add_agent_install(
    connection: ToolConnection, agent_id: uuid.UUID, created_by_user_id: uuid.UUID | None
) -> None:
    """Install the connection for one agent (additive: an existing install is kept as it is)."""
    exists = db.session.scalar(
        select(ConnectionInstall.id).where(
            ConnectionInstall.connection_id == connection.id,
            ConnectionInstall.target_type == "agent",
            ConnectionInstall.target_id == agent_id,
        )
    )
    if exists is None:
        db.session.add(
            ConnectionInstall(
                company_id=connection.company_id,
                connection_id=connection.id,
                target_type="agent",
                target_id=agent_id,
                created_by_user_id=created_by_user_id,
            )
        )


def update_connection(
    actor: Membership,
    connection: ToolConnection,
    app_definition,
    *,
    name=UNSET,
    enabled=UNSET,
    agent_instructions=UNSET,
    method_config=UNSET,
    audience=UNSET,
    tool_policies=UNSET,
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
    if tool_policies is not UNSET:
        known = set(
            db.session.scalars(
                select(ConnectionTool.name).where(
                    ConnectionTool.connection_id == connection.id, ConnectionTool.status == "active"
                )
            )
        )
        errors = [
            {"loc": ["toolPolicies", n], "msg": "Unknown tool or action", "type": "value_error"}
            for n, a in tool_policies.items()
            if n not in known or a not in TOOL_ACTIONS
        ]
        if errors:
            raise ValidationFailed(errors)
        for tool_name, action in tool_policies.items():
            _set_policy(connection, tool_name, action)
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
