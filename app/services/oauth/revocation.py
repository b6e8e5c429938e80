"""Revoking a grant's OAuth tokens at the provider (RFC 7009), when its authorization server metadata names a
revocation endpoint. Used by Disconnect and Delete before the stored tokens are erased.

It reads the grant and its secrets and writes nothing; the outcome is returned so the caller records it. A provider
that cannot be reached, or that answers with an error, never blocks the disconnect: the tokens are erased here either
way, and the activity row says the provider was not told.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass

from authlib.common.errors import AuthlibBaseError
from requests import RequestException

from app.core.errors import ProviderRefused
from app.extensions import db
from app.models import ConnectionGrant, ToolConnection
from app.services.connections.endpoint import OAUTH_ACCESS_TOKEN_KEY, OAUTH_REFRESH_TOKEN_KEY, stored_secrets
from app.services.oauth.clients import _client_for_grant, _oauth_session
from app.services.oauth.discovery import _guard, _timeout, fetch_server_metadata, operator_hosts
from app.services.oauth.errors import ReauthorizationRequired

log = logging.getLogger(__name__)

# What the activity row says about the provider side of a disconnect.
REVOKED, NO_ENDPOINT, FAILED, NOTHING = "revoked", "no_revocation_endpoint", "failed", "no_token"


@dataclass(frozen=True)
class Revocation:
    grant_id: str
    outcome: str  # one of the four above


def revoke_grant_tokens(connection: ToolConnection, grant: ConnectionGrant) -> Revocation:
    """Revoke the grant's refresh token (which ends its access tokens too, RFC 7009 section 2.1) and access token."""
    secrets = stored_secrets(grant)
    tokens = [
        (secrets[key], hint)
        for key, hint in (
            (OAUTH_REFRESH_TOKEN_KEY, "refresh_token"),
            (OAUTH_ACCESS_TOKEN_KEY, "access_token"),
        )
        if secrets.get(key)
    ]
    if not tokens:
        return Revocation(str(grant.id), NOTHING)
    issuer = (grant.provider_tenant or {}).get("issuer")
    try:
        if not issuer:
            return Revocation(str(grant.id), NO_ENDPOINT)
        allowed = operator_hosts(connection.app_slug)
        server = fetch_server_metadata(issuer, allowed)
        if not server.revocation_endpoint:
            return Revocation(str(grant.id), NO_ENDPOINT)
        url = _guard(server.revocation_endpoint, allowed)
        client = _client_for_grant(db.session(), grant, connection)
        session = _oauth_session(client, revocation_endpoint_auth_method=client.auth_method)
        for token, hint in tokens:
            response = session.revoke_token(url, token=token, token_type_hint=hint, timeout=_timeout())
            if response.status_code != 200:
                log.info("revocation refused for grant %s: HTTP %s", grant.id, response.status_code)
                return Revocation(str(grant.id), FAILED)
    except (ProviderRefused, ReauthorizationRequired, RequestException, AuthlibBaseError, KeyError):
        log.info("revocation failed for grant %s", grant.id)
        return Revocation(str(grant.id), FAILED)
    return Revocation(str(grant.id), REVOKED)
