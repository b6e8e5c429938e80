"""Access tokens on demand: single-flight refresh per grant (a row lock, or a process lock on SQLite), rotation,
and marking a grant that needs a new sign-in."""

from __future__ import annotations

import threading
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager

import requests
from authlib.common.errors import AuthlibBaseError
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.extensions import db
from app.models import (
    ActivityLog,
    ConnectionGrant,
    GrantSecret,
    ToolConnection,
)
from app.services import notifications
from app.services.activity import record_activity
from app.services.connections import endpoint
from app.services.oauth.callback import _expires_at
from app.services.oauth.clients import ClientConfig, _client_for_grant, _oauth_session
from app.services.oauth.discovery import _timeout
from app.services.oauth.errors import (
    NEEDS_REAUTHORIZATION,
    REAUTHORIZE_MESSAGE,
    REJECTED_ERRORS,
    ReauthorizationRequired,
    TokenRefreshUnavailable,
)
from app.services.secrets_box import decrypt, encrypt

# After the token endpoint failed (network or 5xx), refreshes of that grant wait this long before trying again,
# so callers during an outage fail fast instead of each queueing on the grant's lock for another request.
REFRESH_BACKOFF_SECONDS = 30
REFRESH_SKEW_SECONDS = 60


# -- refresh ------------------------------------------------------------------------------------------------------

_process_locks: dict[uuid.UUID, threading.Lock] = {}
_process_locks_guard = threading.Lock()


@contextmanager
def _grant_process_lock(grant_id: uuid.UUID) -> Iterator[None]:
    """SQLite has no row locks: serialize refreshes of one grant within this process instead."""
    if db.engine.dialect.name == "postgresql":
        yield
        return
    with _process_locks_guard:
        lock = _process_locks.setdefault(grant_id, threading.Lock())
    with lock:
        yield


def _is_due(tenant: dict | None) -> bool:
    expires_at = (tenant or {}).get("expiresAt")
    if expires_at is None:
        return False
    return time.time() >= float(expires_at) - REFRESH_SKEW_SECONDS


def access_token_due(tenant: dict | None) -> bool:
    """Whether a grant's access token (its expiry kept in `provider_tenant`) is due for refresh."""
    return _is_due(tenant)


def get_valid_access_token(connection: ToolConnection, grant: ConnectionGrant) -> str:
    """The grant's access token, refreshed first when expiry minus the skew has passed.

    Raises ReauthorizationRequired (the connection now shows it) or TokenRefreshUnavailable (nothing changed).
    """
    if grant.status == NEEDS_REAUTHORIZATION:
        raise ReauthorizationRequired()
    secrets_now = endpoint.stored_secrets(grant)
    access_token = secrets_now.get(endpoint.OAUTH_ACCESS_TOKEN_KEY)
    if access_token and not _is_due(grant.provider_tenant):
        return access_token
    token = _refresh_single_flight(grant.id)
    if grant not in db.session.dirty:
        db.session.expire(grant)
    return token


def _refresh_single_flight(grant_id: uuid.UUID) -> str:
    """Refresh in a unit of work of its own, holding the grant's row lock (process lock on SQLite)."""
    with _grant_process_lock(grant_id), Session(bind=db.engine, expire_on_commit=False) as session:
        grant = session.scalars(
            select(ConnectionGrant).where(ConnectionGrant.id == grant_id).with_for_update()
        ).one()
        connection = session.get_one(ToolConnection, grant.connection_id)
        stored = {
            row.key: row
            for row in session.scalars(select(GrantSecret).where(GrantSecret.grant_id == grant_id))
        }
        if grant.status == NEEDS_REAUTHORIZATION:
            session.rollback()
            raise ReauthorizationRequired()
        access_row = stored.get(endpoint.OAUTH_ACCESS_TOKEN_KEY)
        if access_row is not None and not _is_due(grant.provider_tenant):
            access_token = decrypt(access_row.ciphertext)  # refreshed meanwhile by whoever held the lock
            session.rollback()
            return access_token
        refresh_row = stored.get(endpoint.OAUTH_REFRESH_TOKEN_KEY)
        if refresh_row is None:
            _mark_needs_reauthorization(session, grant, connection, "no_refresh_token")
            raise ReauthorizationRequired()
        if time.time() < float((grant.provider_tenant or {}).get("refreshRetryAt") or 0):
            session.rollback()  # backing off after a recent failure: no request
            raise TokenRefreshUnavailable()
        try:
            client = _client_for_grant(session, grant, connection)
        except ReauthorizationRequired:
            _mark_needs_reauthorization(session, grant, connection, "client_missing")
            raise
        outcome, token = _post_refresh(
            client, decrypt(refresh_row.ciphertext), (grant.provider_tenant or {}).get("resource")
        )
        if outcome == "rejected":
            _mark_needs_reauthorization(session, grant, connection, "refresh_rejected")
            raise ReauthorizationRequired()
        if outcome == "unavailable":
            # Credentials stay as they are; only the time of the next attempt is kept.
            grant.provider_tenant = {
                **(grant.provider_tenant or {}),
                "refreshRetryAt": int(time.time()) + REFRESH_BACKOFF_SECONDS,
            }
            session.commit()
            raise TokenRefreshUnavailable()
        _save_secret(session, grant, stored, endpoint.OAUTH_ACCESS_TOKEN_KEY, token["access_token"])
        if token.get("refresh_token"):
            _save_secret(session, grant, stored, endpoint.OAUTH_REFRESH_TOKEN_KEY, token["refresh_token"])
        tenant = {
            **{k: v for k, v in (grant.provider_tenant or {}).items() if k != "refreshRetryAt"},
            "expiresAt": _expires_at(token),
            "refreshedAt": int(time.time()),
        }
        grant.provider_tenant = tenant
        if isinstance(token.get("scope"), str):
            grant.scopes = token["scope"].split()
        grant.status = "active"
        if connection.health_status == NEEDS_REAUTHORIZATION:
            connection.health_status = "healthy"
            connection.health_message = None
            _activity(session, connection, grant, "tool_connection.reauthorization_recovered", {})
        session.commit()
        return token["access_token"]


def _save_secret(session: Session, grant: ConnectionGrant, stored: dict, key: str, value: str) -> None:
    row = stored.get(key)
    if row is None:
        session.add(
            GrantSecret(company_id=grant.company_id, grant_id=grant.id, key=key, ciphertext=encrypt(value))
        )
    else:
        row.ciphertext = encrypt(value)


def _post_refresh(client: ClientConfig, refresh_token: str, resource: str | None = None) -> tuple[str, dict]:
    """("ok", token) | ("rejected", {}) for invalid_grant or 400/401 | ("unavailable", {}) for network and 5xx."""
    statuses: list[int] = []
    session = _oauth_session(client)
    session.hooks["response"].append(lambda response, *args, **kwargs: statuses.append(response.status_code))
    extra = {"resource": resource} if resource else {}
    try:
        token = session.refresh_token(
            client.server.token_endpoint, refresh_token=refresh_token, timeout=_timeout(), **extra
        )
    except requests.HTTPError:
        status = statuses[-1] if statuses else 0
        return ("rejected", {}) if status in (400, 401) else ("unavailable", {})
    except requests.RequestException:
        return "unavailable", {}
    except AuthlibBaseError as err:
        status = statuses[-1] if statuses else 0
        if getattr(err, "error", None) in REJECTED_ERRORS or status in (400, 401):
            return "rejected", {}
        return "unavailable", {}
    except ValueError:
        status = statuses[-1] if statuses else 0
        return ("rejected", {}) if status in (400, 401) else ("unavailable", {})
    token = dict(token)
    if not token.get("access_token"):
        return "unavailable", {}
    if token.get("refresh_token") == refresh_token:
        # None came back (Authlib copies the old one in): the stored one stays.
        token.pop("refresh_token", None)
    return "ok", token


def _mark_needs_reauthorization(
    session: Session, grant: ConnectionGrant, connection: ToolConnection, reason: str
) -> None:
    grant.status = NEEDS_REAUTHORIZATION
    connection.health_status = NEEDS_REAUTHORIZATION
    connection.health_message = REAUTHORIZE_MESSAGE
    _activity(session, connection, grant, "tool_connection.needs_reauthorization", {"reason": reason})
    notifications.connection_needs_reauthorization(connection, grant, session=session)
    session.commit()


def _activity(
    session: Session, connection: ToolConnection, grant: ConnectionGrant, action: str, details: dict
) -> ActivityLog:
    """Token bookkeeping runs in its own transaction: its activity goes through the same secret check."""
    return record_activity(
        company_id=connection.company_id,
        actor_type="system",
        actor_id="oauth",
        action=action,
        entity_type="tool_connection",
        entity_id=connection.id,
        details={"grantId": str(grant.id), **details},
        session=session,
    )
