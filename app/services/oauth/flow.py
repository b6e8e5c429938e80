"""Starting an OAuth sign-in: the single-use state bound to the user, draft, identity and audience, and PKCE."""

from __future__ import annotations

import hashlib
import secrets
import uuid
from datetime import timedelta
from urllib.parse import urlsplit, urlunsplit

from sqlalchemy import delete, update

from app.catalog.loader import get_method
from app.catalog.schema import AppDefinition, Method
from app.core.errors import (
    Conflict,
    Forbidden,
    Unprocessable,
    ValidationFailed,
)
from app.extensions import db
from app.models import (
    Membership,
    OAuthState,
    ThreadInteraction,
    ToolConnection,
)
from app.models.base import as_utc, rowcount, utcnow
from app.services.access.effective import CONFIGURE_FORBIDDEN, can_configure, can_manage_connections
from app.services.activity import record_activity
from app.services.connections import card_binding, endpoint, setup
from app.services.oauth.clients import ClientConfig, _oauth_session, redirect_uri, resolve_client
from app.services.oauth.errors import CARD_CLOSED, WRONG_USER, InvalidOAuthState
from app.services.secrets_box import encrypt

STATE_TTL = timedelta(minutes=10)


# -- start --------------------------------------------------------------------------------------------------------


def _hash_state(raw_state: str) -> str:
    return hashlib.sha256(raw_state.encode("utf-8")).hexdigest()


def normalize_origin(value: str | None) -> str | None:
    """An http(s) origin without credentials or path, else None (the page then posts to its own origin)."""
    if not value:
        return None
    parts = urlsplit(value.strip())
    if parts.scheme not in ("http", "https") or not parts.hostname or parts.username or parts.password:
        return None
    return f"{parts.scheme}://{parts.netloc.lower()}"


def resource_indicator(server_url: str) -> str:
    """The MCP server's canonical URI, sent as the RFC 8707 `resource` of every authorization and token request so
    the token is bound to that server (MCP authorization): lowercase scheme and host, no query or fragment, and
    no trailing slash."""
    parts = urlsplit(server_url)
    return urlunsplit((parts.scheme.lower(), parts.netloc.lower(), parts.path.rstrip("/"), "", ""))


def _requested_scopes(client: ClientConfig, method: Method) -> list[str]:
    scopes = list(client.scopes or (method.defaults.scopes if method.defaults else []) or [])
    supported = client.server.scopes_supported or []
    if client.server.userinfo_endpoint and "openid" in supported:
        # An OpenID provider tells the account's email through userinfo: the connection's account label.
        for scope in ("openid", "email"):
            if scope in supported and scope not in scopes:
                scopes.append(scope)
    if "offline_access" in supported and "offline_access" not in scopes:
        scopes.append("offline_access")
    return scopes


def _require_configure(actor: Membership, connection: ToolConnection, identity: str) -> None:
    if not can_configure(actor, connection):
        raise Forbidden(CONFIGURE_FORBIDDEN)
    if identity == "organization" and not can_manage_connections(actor):
        raise Forbidden(setup.ORGANIZATION_FORBIDDEN)


def check_startable(connection: ToolConnection, app_definition: AppDefinition) -> None:
    """Before a sign-in window opens: raise what the start would for the provider's side (no OAuth client
    configured, no authorization server found), so the form can say so where the person is."""
    method = get_method(app_definition, connection.method_key)
    if method is None or method.auth != "oauth":
        raise Unprocessable("This connection does not sign in with OAuth.")
    resolve_client(connection, app_definition, method)


def start_authorization(
    actor: Membership,
    connection: ToolConnection,
    app_definition: AppDefinition,
    *,
    interaction_id: uuid.UUID | None = None,
    opener_origin: str | None = None,
) -> str:
    """Create the state row and return the provider's authorization URL (new connection or reconnect)."""
    method = get_method(app_definition, connection.method_key)
    if method is None or method.auth != "oauth" or connection.status == "archived":
        raise Unprocessable("This connection does not sign in with OAuth.")
    identity = connection.config.get("identity", "organization")
    _require_configure(actor, connection, identity)
    card_binding.require_card_draft_finisher(connection, actor.user_id)
    if interaction_id is not None:
        interaction = db.session.get(ThreadInteraction, interaction_id)
        if interaction is None or interaction.company_id != connection.company_id:
            raise ValidationFailed(
                [{"loc": ["interactionId"], "msg": "Unknown interaction", "type": "value_error"}]
            )
        if interaction.status != "pending":
            raise Conflict(CARD_CLOSED)
    client = resolve_client(connection, app_definition, method)
    now = utcnow()
    db.session.execute(delete(OAuthState).where(OAuthState.expires_at < now))
    raw_state = secrets.token_urlsafe(32)  # 256 bits
    if interaction_id is not None:
        # The card's id travels in clear beside the secret part, so a callback that arrives after the card
        # closed (its state deleted) can still say so instead of "invalid state".
        raw_state = f"{interaction_id.hex}{CARD_STATE_SEPARATOR}{raw_state}"
    verifier = secrets.token_urlsafe(64) if client.server.supports_pkce_s256 else None
    scopes = _requested_scopes(client, method)
    resource = resource_indicator(endpoint.server_url_for(connection, app_definition, method))
    draft_audience = connection.config.get("draftAudience") if connection.status == "draft" else None
    db.session.add(
        OAuthState(
            state_hash=_hash_state(raw_state),
            company_id=connection.company_id,
            connection_id=connection.id,
            user_id=actor.user_id,
            identity=identity,
            audience=draft_audience,
            code_verifier=encrypt(verifier) if verifier else None,
            redirect_uri=redirect_uri(),
            issuer=client.server.issuer,
            provider={
                "clientId": client.client_id,
                "clientSource": client.source,
                "authMethod": client.auth_method,
                "tokenEndpoint": client.server.token_endpoint,
                "userinfoEndpoint": client.server.userinfo_endpoint,
                "scopes": scopes,
                "resource": resource,
            },
            interaction_id=interaction_id,
            opener_origin=normalize_origin(opener_origin) if interaction_id else None,
            expires_at=now + STATE_TTL,
        )
    )
    db.session.flush()
    extra = {"prompt": "consent"} if "offline_access" in scopes else {}
    session = _oauth_session(
        client,
        redirect_uri=redirect_uri(),
        scope=" ".join(scopes) or None,
        code_challenge_method="S256" if verifier else None,
    )
    url, _ = session.create_authorization_url(
        client.server.authorization_endpoint,
        state=raw_state,
        code_verifier=verifier,
        resource=resource,
        **extra,
    )
    record_activity(
        company_id=connection.company_id,
        actor_type="user",
        actor_id=actor.user_id,
        action="tool_app.oauth_started",
        entity_type="tool_connection",
        entity_id=connection.id,
        details={"app": connection.app_slug, "clientSource": client.source, "pkce": bool(verifier)},
    )
    return url


# -- callback -----------------------------------------------------------------------------------------------------


CARD_STATE_SEPARATOR = "."


def card_of_state(raw_state: str | None) -> uuid.UUID | None:
    """The card id a card's sign-in state names (never trusted for anything but choosing an error page)."""
    if not raw_state or len(raw_state) > 200 or CARD_STATE_SEPARATOR not in raw_state:
        return None
    try:
        return uuid.UUID(hex=raw_state.split(CARD_STATE_SEPARATOR, 1)[0])
    except ValueError:
        return None


def peek_state(raw_state: str | None) -> OAuthState | None:
    """The live (unconsumed, unexpired) state row for a callback's state value, without consuming it."""
    if not raw_state or len(raw_state) > 200:
        return None
    row = db.session.get(OAuthState, _hash_state(raw_state))
    if row is None or row.consumed_at is not None or as_utc(row.expires_at) <= utcnow():
        return None
    return row


def consume_state(raw_state: str, user_id: uuid.UUID) -> OAuthState:
    """Consume a state atomically for its own user: one conditional UPDATE, so a replay or a parallel callback
    finds nothing to consume. The caller commits before exchanging the code."""
    row = peek_state(raw_state)
    if row is None:
        raise InvalidOAuthState()
    if row.user_id != user_id:
        raise Forbidden(WRONG_USER)
    now = utcnow()
    result = db.session.execute(
        update(OAuthState)
        .where(
            OAuthState.state_hash == row.state_hash,
            OAuthState.user_id == user_id,
            OAuthState.consumed_at.is_(None),
            OAuthState.expires_at > now,
        )
        .values(consumed_at=now)
        .execution_options(synchronize_session=False)
    )
    if rowcount(result) != 1:
        raise InvalidOAuthState()
    db.session.expire(row)
    return row
