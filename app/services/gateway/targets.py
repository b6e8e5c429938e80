"""Where a prepared gateway call reaches its provider (`ProviderTarget`), kept per process while nothing it was
built from has changed.

A target is built from the connection (app, method and its public configuration), the selected identity (its status
and, for OAuth, the token's expiry), the identity's stored credentials, the app definition and the operator's
settings. Building one loads the connection and identity as ORM objects and decrypts every credential; a repeated
call instead reads those inputs as plain values (one lean statement, the credentials as their ciphertexts) and reuses
the target built from equal inputs. Credential rows do not raise the access revision, so the cache is not keyed by
it: any new ciphertext (a key replaced, an OAuth refresh storing new tokens: Fernet never encrypts twice to the
same text), a changed configuration or identity status, or another app definition object (a catalog change) makes
the inputs differ and the target is built afresh. An OAuth target is used only while its token is not due for
refresh (`oauth_tokens.access_token_due`); a build that refreshes, or finds no access token, is not kept.

The decrypted credentials stay in this process's memory (they are in every call's headers anyway); they are never
logged, and the cache holds a bounded number of targets per app.
"""

from __future__ import annotations

import functools
import threading
import uuid
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

from flask import current_app
from sqlalchemy import Select, bindparam, select

from app.catalog.loader import get_app, get_method
from app.catalog.schema import AppDefinition, Transport
from app.core.errors import ServiceError
from app.extensions import db
from app.models import ConnectionGrant, GrantSecret, ToolConnection
from app.models.connections import config_method_key
from app.services.connections import endpoint
from app.services.oauth import tokens as oauth_tokens

DEFAULT_CALL_TIMEOUT = 30.0
TARGET_CACHE_SIZE = 256
GONE = "The connection is no longer available to this agent."


@dataclass(frozen=True)
class ProviderTarget:
    """Where and how to reach the provider for one prepared call (plain values: no database object). Shared by the
    calls that reuse it: never modified."""

    url: str
    headers: dict
    scrub: list[str]
    guard: frozenset[str] | None
    timeout: float
    transport: Transport = "mcp_remote"


def call_timeout(app_definition: AppDefinition | None) -> float:
    """The call timeout: the app definition's `callTimeoutSeconds`, else `PROVIDER_CALL_TIMEOUT_SECONDS`."""
    own = getattr(app_definition, "callTimeoutSeconds", None)
    return float(own or current_app.config.get("PROVIDER_CALL_TIMEOUT_SECONDS", DEFAULT_CALL_TIMEOUT))


@dataclass(frozen=True)
class _Inputs:
    """What a target is built from, as plain values compared by equality (the app definition by identity)."""

    app_slug: str
    config: Any
    grant_status: str
    provider_tenant: Any
    ciphertexts: tuple[tuple[str, str], ...]
    settings: tuple[Any, ...]
    app_definition_id: int


@dataclass(frozen=True)
class _Kept:
    inputs: _Inputs
    app_definition: AppDefinition  # held so that its id() cannot be reused by another object
    oauth: bool
    target: ProviderTarget


_lock = threading.Lock()


@functools.cache
def _inputs_statement() -> Select:
    """The connection's, identity's and credentials' columns a target is built from, for `connection_id` and
    `grant_id` parameters (one row per credential; built once)."""
    return (
        select(
            ToolConnection.app_slug,
            ToolConnection.config,
            ConnectionGrant.status,
            ConnectionGrant.provider_tenant,
            GrantSecret.key,
            GrantSecret.ciphertext,
        )
        .join(ConnectionGrant, ConnectionGrant.connection_id == ToolConnection.id)
        .outerjoin(GrantSecret, GrantSecret.grant_id == ConnectionGrant.id)
        .where(ToolConnection.id == bindparam("connection_id"), ConnectionGrant.id == bindparam("grant_id"))
    )


def _settings() -> tuple[Any, ...]:
    config = current_app.config
    return (
        dict(config.get("PROVIDER_SERVER_URLS") or {}),
        tuple(config.get("OUTBOUND_ALLOWED_HOSTS") or ()),
        config.get("PROVIDER_CALL_TIMEOUT_SECONDS"),
    )


def _kept_targets() -> OrderedDict[tuple[uuid.UUID, uuid.UUID], _Kept]:
    """This app's kept targets (each app has its own settings)."""
    return current_app.extensions.setdefault("gateway_provider_targets", OrderedDict())


def provider_target(
    connection_id: uuid.UUID, grant_id: uuid.UUID, app_definition: AppDefinition | None = None
) -> ProviderTarget:
    """How to reach the connection's provider as that grant; ServiceError when it cannot be reached any more (the
    grant ended, the app left the catalog, the credential cannot be sent).

    `app_definition`: the one the tool was resolved with, parsed under the same access revision (a catalog change
    raises every revision); looked up when the caller has none (then nothing is kept). A target built from equal
    inputs is reused (see the module docstring): one lean statement; otherwise the connection, its identity and
    the identity's credentials are loaded and decrypted (read again after an OAuth refresh).
    """
    if app_definition is None:
        return _build(connection_id, grant_id, None)
    rows = (
        db.session.connection()
        .execute(_inputs_statement(), {"connection_id": connection_id, "grant_id": grant_id})
        .all()
    )
    if not rows:
        raise ServiceError(GONE)
    first = rows[0]
    inputs = _Inputs(
        app_slug=first.app_slug,
        config=first.config,
        grant_status=first.status,
        provider_tenant=first.provider_tenant,
        ciphertexts=tuple(sorted((row.key, row.ciphertext) for row in rows if row.key is not None)),
        settings=_settings(),
        app_definition_id=id(app_definition),
    )
    key = (connection_id, grant_id)
    kept = _kept_targets().get(key)
    if (
        kept is not None
        and kept.inputs == inputs
        and not (kept.oauth and oauth_tokens.access_token_due(inputs.provider_tenant))
    ):
        return kept.target
    target = _build(connection_id, grant_id, app_definition)
    method = get_method(app_definition, config_method_key(inputs.config))
    oauth = method.auth == "oauth"
    refreshed = oauth and (
        oauth_tokens.access_token_due(inputs.provider_tenant)
        or endpoint.OAUTH_ACCESS_TOKEN_KEY not in {k for k, _ in inputs.ciphertexts}
    )
    if inputs.grant_status == "active" and not refreshed:
        with _lock:
            targets = _kept_targets()
            targets[key] = _Kept(inputs, app_definition, oauth, target)
            targets.move_to_end(key)
            while len(targets) > TARGET_CACHE_SIZE:
                targets.popitem(last=False)
    return target


def _build(
    connection_id: uuid.UUID, grant_id: uuid.UUID, app_definition: AppDefinition | None
) -> ProviderTarget:
    """The target built from the stored rows: the connection, its identity and the identity's credentials in one
    statement (read again after an OAuth refresh)."""
    connection, grant, secrets = endpoint.connection_with_secrets(connection_id, grant_id)
    if connection is None or grant is None or grant.status != "active":
        raise ServiceError(GONE)
    if app_definition is None:
        app_definition = get_app(connection.app_slug)
    method = get_method(app_definition, connection.method_key) if app_definition else None
    if app_definition is None or method is None:
        raise ServiceError("The connection's app is no longer in the catalog.")
    access_token = None
    if method.auth == "oauth":
        access_token = oauth_tokens.get_valid_access_token(connection, grant)
        secrets = endpoint.stored_secrets(grant)  # a refresh may have stored new tokens
    try:
        url, headers = endpoint.connection_endpoint(connection, app_definition, grant, secrets)
    except ValueError:
        raise ServiceError("The stored credential cannot be sent to the provider; reconnect it.") from None
    if access_token:
        headers = {**headers, "Authorization": f"Bearer {access_token}"}
    scrub = [v for v in [*secrets.values(), access_token or ""] if isinstance(v, str) and len(v) >= 6]
    return ProviderTarget(
        url=url,
        headers=headers,
        scrub=scrub,
        guard=endpoint.provider_guard(connection, method, secrets),
        timeout=call_timeout(app_definition),
        transport=method.transport,
    )
