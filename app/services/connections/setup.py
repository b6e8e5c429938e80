"""The shared setup flow: start a draft, choose the identity grant, verify the key, finish and activate."""

from __future__ import annotations

import uuid
from urllib.parse import urlsplit

from flask import current_app
from sqlalchemy import delete, select

from app.adapters.providers import errors as provider_errors
from app.adapters.providers import mcp_client
from app.adapters.providers import tools as provider_tools
from app.adapters.providers.tools import ProviderTool
from app.catalog.loader import get_method, template_default
from app.catalog.schema import AppDefinition, Method
from app.core.errors import Forbidden, ProviderRefused, Unprocessable, ValidationFailed
from app.extensions import db
from app.models import (
    ConnectionGrant,
    GrantSecret,
    Membership,
    OAuthState,
    ToolConnection,
)
from app.models.base import utcnow
from app.services import notifications
from app.services.access.effective import can_manage_connections
from app.services.activity import record_activity
from app.services.connections import card_binding
from app.services.connections.audience import Audience, _check_audience, set_audience
from app.services.connections.endpoint import (
    config_headers,
    max_response_bytes,
    provider_guard,
    provider_headers,
    server_url_for,
    stored_secrets,
)
from app.services.connections.settings import (
    UNSET,
    Unset,
    _field_error,
    _require_configure,
    public_fields,
    settings_digest,
    validate_fields,
    validate_instructions,
)
from app.services.connections.tool_index import index_tools
from app.services.secrets_box import encrypt

IDENTITY_KINDS = {"organization": "organization", "user": "user"}
ORGANIZATION_FORBIDDEN = "Only connection managers can connect an app for the whole organization"


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


def start_connection(
    actor: Membership,
    app_definition: AppDefinition,
    *,
    method_key: str | None,
    identity: str,
    name: str | None = None,
    method_config: dict | None = None,
    audience: Audience | None = None,
    agent_instructions: dict | None | Unset = UNSET,
) -> ToolConnection:
    """Create a draft connection with its public configuration, identity and chosen audience (grants nothing yet)."""
    method = _checked_choice(actor, app_definition, method_key, identity)
    cleaned_config = validate_fields(public_fields(method), method_config or {}, group="methodConfig")
    audience = audience or Audience(all_agents=True)
    _check_audience(actor, audience)
    instructions = template_default(app_definition) if agent_instructions is UNSET else agent_instructions
    instructions = validate_instructions(instructions)
    existing = _own_draft(actor, app_definition.slug)
    if existing is not None:
        return _resume_draft(
            actor, existing, method, identity, (name or "").strip(), cleaned_config, audience, instructions
        )
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
    # Nothing is recorded yet: `tool_app.connected` is written when the provider accepts the setup, and a refused
    # attempt is recorded as `tool_app.setup_failed` (see `record_setup_failed`).
    return connection


def _checked_choice(
    actor: Membership, app_definition: AppDefinition, method_key: str | None, identity: str
) -> Method:
    """The method a person chose, once the method exists, supports the identity, and the person may use both."""
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
    return method


def change_draft_choices(
    actor: Membership,
    draft: ToolConnection,
    app_definition: AppDefinition,
    *,
    method_key: str | None,
    identity: str,
) -> ToolConnection:
    """After a failed attempt (a refused key, a sign-in that did not finish) the person may pick another method or
    identity for the setup they kept: the draft follows the new choice. A draft grants nothing and holds no verified
    credentials, so nothing is lost; grants of the identity left behind go, and a sign-in started for the earlier
    choice (bound to its method and identity) can no longer finish it. The same choices again change nothing."""
    if draft.status != "draft" or draft.app_slug != app_definition.slug:
        raise Unprocessable("Only an unfinished setup can change its method or identity")
    _require_configure(actor, draft)
    method = _checked_choice(actor, app_definition, method_key, identity)
    config = draft.config or {}
    if method.key == draft.method_key and identity == config.get("identity"):
        return draft
    changed_method = method.key != draft.method_key
    draft.auth_kind = method.auth
    draft.config = {
        **config,
        "connectionMethodKey": method.key,
        # Public values belong to the method they were typed for.
        "methodConfig": {} if changed_method else config.get("methodConfig", {}),
        "identity": identity,
    }
    keep = grant_for_identity(draft, identity, actor)
    for grant in list(draft.grants):
        if grant.id != keep.id:
            db.session.delete(grant)
    db.session.execute(delete(OAuthState).where(OAuthState.connection_id == draft.id))
    db.session.flush()
    return draft


def _own_draft(actor: Membership, app_slug: str) -> ToolConnection | None:
    """The person's unfinished setup of this app, if any: one draft per app and person (the oldest wins)."""
    return db.session.scalar(
        select(ToolConnection)
        .where(
            ToolConnection.company_id == actor.company_id,
            ToolConnection.app_slug == app_slug,
            ToolConnection.status == "draft",
            ToolConnection.created_by_user_id == actor.user_id,
        )
        .order_by(ToolConnection.created_at, ToolConnection.id)
        .limit(1)
    )


def _resume_draft(
    actor: Membership,
    draft: ToolConnection,
    method: Method,
    identity: str,
    name: str,
    method_config: dict,
    audience: Audience,
    instructions: dict | None,
) -> ToolConnection:
    """A new setup of an app the person already started resumes that draft with the new choices (a draft grants
    nothing, so changing its method or identity is safe); grants of another identity, never verified, go."""
    if name and name != draft.name:
        draft.name = _unique_name(actor.company_id, name)
    draft.auth_kind = method.auth
    draft.agent_instructions = instructions
    config = {
        **(draft.config or {}),
        "connectionMethodKey": method.key,
        "methodConfig": method_config,
        "identity": identity,
    }
    if not card_binding.pending_cards_bound_to(draft):
        config["draftAudience"] = audience.to_json()
    draft.config = config
    keep = grant_for_identity(draft, identity, actor)
    for grant in list(draft.grants):
        if grant.id != keep.id:
            db.session.delete(grant)
    db.session.flush()
    return draft


def record_setup_failed(actor: Membership, connection: ToolConnection, reason: str) -> None:
    """A setup attempt the provider refused (the draft stays for Continue); the reason is the shown message."""
    record_activity(
        company_id=connection.company_id,
        actor_type="user",
        actor_id=actor.user_id,
        action="tool_app.setup_failed",
        entity_type="tool_connection",
        entity_id=connection.id,
        details={"app": connection.app_slug, "method": connection.method_key, "reason": reason[:500]},
    )


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


def finish_connection(
    actor: Membership,
    connection: ToolConnection,
    app_definition: AppDefinition,
    *,
    credentials: dict | None = None,
    method_config: dict | None | Unset = UNSET,
    audience: Audience | Unset = UNSET,
    agent_instructions: dict | None | Unset = UNSET,
) -> ToolConnection:
    """Verify the credentials against the provider, store them encrypted, index tools, and activate.

    Also the reconnect (key rotation) path: the same connection id, grants, instructions and policies are kept. A
    refused key raises ProviderRefused before anything is stored, so a draft stays a draft and an active connection
    keeps its previous, working key.
    """
    _require_configure(actor, connection)
    card_binding.require_card_draft_finisher(connection, actor.user_id)
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
        require_credentials(method, secrets)
    elif method.auth == "oauth":
        raise Unprocessable("Sign in with the provider to finish this connection.")
    tools = verify_and_list_tools(connection, app_definition, method, secrets)
    first_activation = activate_connection(actor, connection, grant, secrets, tools, audience=audience)
    record_setup_finished(actor, connection, grant, tools, before_instructions, first_activation)
    return connection


def require_credentials(method: Method, credentials: dict) -> None:
    """An API-key method's required credentials are all given (not blank). Checked again before a new draft is
    started, so a form sent without its key leaves nothing behind."""
    if method.auth != "api_key":
        return
    missing = [f for f in method.credentialFields if f.required and not _given(credentials.get(f.key))]
    if missing:
        raise ValidationFailed(
            [_field_error(f.key, f"{f.label} is required", "credentials") for f in missing]
        )


def _given(value: object) -> bool:
    return isinstance(value, str) and bool(value.strip())


def activate_connection(
    actor: Membership,
    connection: ToolConnection,
    grant: ConnectionGrant,
    secrets: dict[str, str],
    tools: list[ProviderTool],
    *,
    audience: Audience | Unset = UNSET,
) -> bool:
    """The shared tail of every successful setup (API key or OAuth): store the verified credentials encrypted,
    index tools, apply the audience, and mark the connection live. Returns True on first activation."""
    card_binding.require_card_draft_finisher(connection, actor.user_id)
    for key, value in secrets.items():
        _store_secret(grant, key, value)
    grant.status = "active"
    grant.revoked_at = None
    # A disconnected connection that is reconnected keeps its audience and enabled switch: only a draft is new.
    first_activation = connection.status == "draft"
    index_tools(connection, tools, first_index=first_activation)
    draft_audience = connection.config.get("draftAudience") or {"allAgents": True, "agentIds": []}
    # Activate before applying the audience: installs exist only for live connections.
    connection.status = "active"
    if audience is not UNSET:
        set_audience(actor, connection, audience, first_activation=first_activation)
    elif first_activation and not card_binding.pending_cards_bound_to(connection):
        # A card's draft has no audience of its own: the card's completion applies the one saved on the card.
        set_audience(
            actor,
            connection,
            Audience(
                draft_audience.get("allAgents", True),
                tuple(uuid.UUID(a) for a in draft_audience.get("agentIds", [])),
            ),
            first_activation=True,
        )
    if first_activation:
        connection.enabled = True
    connection.health_status = "healthy"
    connection.health_message = None
    connection.last_catalog_refresh_at = utcnow()
    return first_activation


def record_setup_finished(
    actor: Membership,
    connection: ToolConnection,
    grant: ConnectionGrant,
    tools: list[ProviderTool],
    before_instructions: dict | None,
    first_activation: bool,
) -> None:
    if first_activation:
        record_activity(
            company_id=connection.company_id,
            actor_type="user",
            actor_id=actor.user_id,
            action="tool_app.connected",
            entity_type="tool_connection",
            entity_id=connection.id,
            details={
                "app": connection.app_slug,
                "method": connection.method_key,
                "identity": (connection.config or {}).get("identity"),
                "instructionsDigest": settings_digest(before_instructions),
            },
        )
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
    notifications.connection_connected(connection)


def verify_and_list_tools(
    connection: ToolConnection, app_definition: AppDefinition, method: Method, secrets: dict[str, str]
) -> list[ProviderTool]:
    headers, query = provider_headers(method, secrets)
    headers = {**config_headers(method, connection.method_config or {}), **headers}
    url = server_url_for(connection, app_definition, method, secrets)
    if query:
        url = provider_tools.url_with_query(url, query)
    try:
        return mcp_client.list_tools(
            url,
            headers=headers,
            timeout=current_app.config["OUTBOUND_TIMEOUT_SECONDS"],
            guard=provider_guard(connection, method, secrets),
            transport=method.transport,
            max_tools=current_app.config["PROVIDER_MAX_TOOLS"],
            max_response_bytes=max_response_bytes(),
        )
    except provider_errors.ProviderAuthRejected as err:
        raise ProviderRefused(err.message, kind="rejected") from None
    except provider_errors.ProviderUnavailable as err:
        raise ProviderRefused(err.message, kind="unreachable", host=urlsplit(url).hostname) from None
    except provider_errors.ProviderError as err:
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
