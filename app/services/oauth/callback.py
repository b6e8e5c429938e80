"""Finishing an OAuth sign-in: the code exchange, the account label, storing the grant, and recording failures."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass

import jwt
import requests
from authlib.common.errors import AuthlibBaseError
from sqlalchemy import select

from app.catalog.loader import get_method
from app.catalog.schema import AppDefinition
from app.core.errors import (
    ProviderRefused,
)
from app.core.net_guard import guarded_session
from app.extensions import db
from app.models import (
    Membership,
    OAuthClientRegistration,
    OAuthState,
    ToolConnection,
)
from app.services.activity import record_activity
from app.services.connections import endpoint as connections_endpoint
from app.services.connections import setup
from app.services.oauth.clients import ClientConfig, _oauth_session, operator_clients
from app.services.oauth.discovery import AuthServer, _timeout, operator_hosts
from app.services.oauth.errors import OAuthFlowError
from app.services.oauth.flow import _require_configure
from app.services.secrets_box import decrypt


def _expires_at(token: dict) -> int | None:
    """Seconds since the epoch when the access token expires: from `expires_at`, else `expires_in`, else unknown."""
    for key in ("expires_at",):
        value = token.get(key)
        if isinstance(value, int | float) and value > 0:
            return int(value)
    value = token.get("expires_in")
    if isinstance(value, int | float | str) and str(value).strip().isdigit():
        return int(time.time()) + int(str(value).strip())
    return None


LABEL_CLAIMS = ("email", "preferred_username", "login", "name", "workspace_name")


def _id_token_label(id_token: str | None, issuer: str | None, client_id: str) -> str | None:
    """The account label from the ID token of the code exchange, when it is for us from this issuer and current.

    The token came straight from the token endpoint over the connection we opened, which OpenID Connect Core
    (3.1.3.7, item 6) accepts in place of checking its signature. Only a display label is taken from it. Needed
    because a token bound to the MCP server (RFC 8707) is refused at userinfo.
    """
    if not isinstance(id_token, str) or not issuer:
        return None
    try:
        claims = jwt.decode(
            id_token,
            # PyJWT skips every claim check once the signature check is off, unless each is asked for.
            options={
                "verify_signature": False,
                "verify_aud": True,
                "verify_iss": True,
                "verify_exp": True,
                "require": ["iss", "aud", "exp"],
            },
            audience=client_id,
            issuer=list(dict.fromkeys([issuer, issuer.rstrip("/")])),
        )
    except jwt.PyJWTError:
        return None
    return _label_from(claims)


def _label_from(info: dict) -> str | None:
    for key in LABEL_CLAIMS:
        value = info.get(key)
        if isinstance(value, str) and value.strip():
            return value.strip()[:300]
    return None


def _account_label(
    userinfo_endpoint: str | None, access_token: str, allowed: frozenset[str] | None
) -> str | None:
    if not userinfo_endpoint:
        return None
    try:
        response = guarded_session(allowed).get(
            userinfo_endpoint,
            headers={"Authorization": f"Bearer {access_token}", "Accept": "application/json"},
            timeout=_timeout(),
            allow_redirects=False,
        )
        info = response.json() if response.status_code == 200 else {}
    except (requests.RequestException, ValueError):
        return None
    if not isinstance(info, dict):
        return None
    return _label_from(info)


def _exchange_code(state: OAuthState, client: ClientConfig, code: str, provider_name: str) -> dict:
    verifier = decrypt(state.code_verifier) if state.code_verifier else None
    session = _oauth_session(client, redirect_uri=state.redirect_uri)
    params = {"code": code, "grant_type": "authorization_code", "timeout": _timeout()}
    if verifier:
        params["code_verifier"] = verifier
    if (state.provider or {}).get("resource"):
        params["resource"] = state.provider["resource"]
    try:
        token = session.fetch_token(client.server.token_endpoint, **params)
    except requests.RequestException:
        raise OAuthFlowError("unreachable", provider=provider_name, status=502) from None
    except (AuthlibBaseError, ValueError):
        raise OAuthFlowError("exchange_failed", provider=provider_name, status=502) from None
    if not isinstance(token, dict) or not token.get("access_token"):
        raise OAuthFlowError("exchange_failed", provider=provider_name, status=502)
    return dict(token)


@dataclass
class SignedIn:
    """What a provider sign-in returned, before anything is stored: the tokens, the tools they list, the account."""

    client: ClientConfig
    token: dict
    secrets: dict[str, str]
    tools: list
    label: str | None


def exchange_authorization(
    actor: Membership,
    state: OAuthState,
    connection: ToolConnection,
    app_definition: AppDefinition,
    *,
    code: str | None,
    error: str | None,
    iss: str | None,
) -> SignedIn:
    """The outbound half of a callback: exchange the code and list the tools with the new token. Writes nothing.

    Raises OAuthFlowError with a plain reason.
    """
    provider_name = app_definition.name
    _require_configure(actor, connection, state.identity)
    if error:
        raise OAuthFlowError(
            "access_denied" if error == "access_denied" else "provider_error", provider=provider_name
        )
    if not code:
        raise OAuthFlowError("missing_code", provider=provider_name)
    if iss is not None and (state.issuer is None or iss.rstrip("/") != state.issuer.rstrip("/")):
        raise OAuthFlowError("issuer_mismatch", provider=provider_name)
    method = get_method(app_definition, connection.method_key)
    provider = state.provider or {}
    client = ClientConfig(
        client_id=provider["clientId"],
        client_secret=None,
        auth_method=provider.get("authMethod") or "client_secret_basic",
        server=AuthServer(
            issuer=state.issuer, authorization_endpoint="", token_endpoint=provider["tokenEndpoint"]
        ),
        source=provider.get("clientSource", "operator"),
        allowed_hosts=operator_hosts(connection.app_slug),
    )
    client.client_secret = _current_client_secret(connection, client)
    token = _exchange_code(state, client, code, provider_name)
    access_token = token["access_token"]
    secrets_to_store = {connections_endpoint.OAUTH_ACCESS_TOKEN_KEY: access_token}
    if token.get("refresh_token"):
        secrets_to_store[connections_endpoint.OAUTH_REFRESH_TOKEN_KEY] = token["refresh_token"]
    try:
        tools = setup.verify_and_list_tools(connection, app_definition, method, secrets_to_store)
    except ProviderRefused:
        raise OAuthFlowError("tools_failed", provider=provider_name, status=502) from None
    label = _id_token_label(token.get("id_token"), state.issuer, client.client_id) or _account_label(
        provider.get("userinfoEndpoint"), access_token, client.allowed_hosts
    )
    return SignedIn(client=client, token=token, secrets=secrets_to_store, tools=tools, label=label)


def store_authorization(
    actor: Membership, state: OAuthState, connection: ToolConnection, signed_in: SignedIn
) -> ToolConnection:
    """The database half: store the tokens encrypted, index the tools, activate (or reconnect). Callers that
    finish a card run it inside the card's locked transaction, so a closed card never gets tokens."""
    _require_configure(actor, connection, state.identity)
    provider = state.provider or {}
    client, token = signed_in.client, signed_in.token
    before_instructions = connection.agent_instructions
    if connection.status == "draft" and state.audience is not None:
        connection.config = {**connection.config, "draftAudience": state.audience}
    grant = setup.grant_for_identity(connection, state.identity, actor)
    granted = token.get("scope")
    grant.scopes = granted.split() if isinstance(granted, str) else list(provider.get("scopes") or [])
    grant.provider_tenant = {
        **(grant.provider_tenant or {}),
        "issuer": state.issuer,
        "clientId": client.client_id,
        "clientSource": client.source,
        "authMethod": client.auth_method,
        "tokenEndpoint": client.server.token_endpoint,
        "expiresAt": _expires_at(token),
        "accountLabel": signed_in.label,
        "resource": provider.get("resource"),
    }
    grant.revoked_at = None
    if signed_in.label:
        connection.provider_account_label = signed_in.label
    first_activation = setup.activate_connection(actor, connection, grant, signed_in.secrets, signed_in.tools)
    setup.record_setup_finished(
        actor, connection, grant, signed_in.tools, before_instructions, first_activation
    )
    record_activity(
        company_id=connection.company_id,
        actor_type="user",
        actor_id=actor.user_id,
        action="tool_app.oauth_connected",
        entity_type="tool_connection",
        entity_id=connection.id,
        details={
            "app": connection.app_slug,
            "grantId": str(grant.id),
            "scopes": grant.scopes,
            "reconnect": not first_activation,
            "interactionId": str(state.interaction_id) if state.interaction_id else None,
        },
    )
    return connection


def _current_client_secret(connection: ToolConnection, client: ClientConfig) -> str | None:
    if client.source == "registration":
        row = db.session.scalar(
            select(OAuthClientRegistration).where(
                OAuthClientRegistration.company_id == connection.company_id,
                OAuthClientRegistration.app_slug == connection.app_slug,
            )
        )
        if row is None or row.client_id != client.client_id or not row.client_secret_ciphertext:
            return None
        return decrypt(row.client_secret_ciphertext)
    entry = operator_clients().get(connection.app_slug) or {}
    return entry.get("client_secret") if entry.get("client_id") == client.client_id else None


def record_failure(actor_user_id: uuid.UUID, state: OAuthState, reason: str) -> None:
    """Activity for a callback that did not connect (the reason is a fixed code, never provider text)."""
    record_activity(
        company_id=state.company_id,
        actor_type="user",
        actor_id=actor_user_id,
        action="tool_app.oauth_failed",
        entity_type="tool_connection",
        entity_id=state.connection_id,
        details={
            "reason": reason,
            "interactionId": str(state.interaction_id) if state.interaction_id else None,
        },
    )
