"""Disable / enable, disconnect and delete a connection. Each one is checked (tenant through the caller's membership,
configure rights here), records activity, and changes rows the access revision watches, so search and the gateway
see it at the commit (`access/revision.py`); the bulk deletes below are Core statements, so they `touch` it by hand.

- **Disable** keeps everything; agents lose the tools at once (effective access reads only enabled connections),
  search shows the service as not ready, and the instruction block leaves the snapshot. **Enable** undoes it.
- **Disconnect** revokes the OAuth tokens at the provider when its metadata names a revocation endpoint (RFC 7009),
  erases the stored credentials and delegations, marks every identity grant revoked and the connection
  `disconnected`. Its id, name, configuration, instructions, audience and tool policies stay, so Reconnect resumes
  it. Pending cards are left alone: a card asking for this service keeps waiting; its setup options stop offering
  this connection (only active, enabled ones are offered) until someone reconnects it from its Permissions page.
- **Delete** removes the connection and everything under it (after revoking at the provider like a disconnect).
  Cards whose saved setup was this draft keep waiting without it; cards asking for this very connection (its
  custom service, or an access request for its tools) expire, and their agents are woken to read why.
  While tool approval requests for it wait on an answer, it refuses with 409.
"""

from __future__ import annotations

from sqlalchemy import Delete, delete, select

from app.core.errors import Conflict, Forbidden
from app.extensions import db
from app.models import (
    ConnectionGrant,
    ConnectionInstall,
    ConnectionTool,
    GrantDelegation,
    GrantSecret,
    Membership,
    OAuthState,
    ToolConnection,
    ToolPolicy,
)
from app.models.base import table_of, utcnow
from app.models.connections import ConnectionStatus
from app.services import notifications
from app.services.access import revision
from app.services.access.effective import CONFIGURE_FORBIDDEN, can_configure, connection_is_live
from app.services.activity import record_activity
from app.services.intents import setup as intent_setup
from app.services.intents.expiry import expire_for_deleted_connection
from app.services.management.impact import Impact, connection_impact
from app.services.oauth.revocation import Revocation, revoke_grant_tokens

DISCONNECTED = ConnectionStatus.DISCONNECTED
NOT_SET_UP = "Finish setting up this connection first; a setup that was never finished can only be deleted"
ALREADY_DISCONNECTED = "This connection is already disconnected"


def _require_configure(actor: Membership, connection: ToolConnection) -> None:
    if not can_configure(actor, connection):
        raise Forbidden(CONFIGURE_FORBIDDEN)


def _record(actor: Membership, connection: ToolConnection, action: str, details: dict) -> None:
    record_activity(
        company_id=connection.company_id,
        actor_type="user",
        actor_id=actor.user_id,
        action=action,
        entity_type="tool_connection",
        entity_id=connection.id,
        details={"name": connection.name, "app": connection.app_slug, **details},
    )


def set_enabled(actor: Membership, connection: ToolConnection, enabled: bool) -> bool:
    """Disable or enable a set-up connection. Returns False (and records nothing) when it already was so."""
    _require_configure(actor, connection)
    if connection.status == "draft":
        raise Conflict(NOT_SET_UP)
    if connection.enabled == enabled:
        return False
    notifications.connection_switched(connection, enabled)
    connection.enabled = enabled
    _record(actor, connection, "tool_connection.enabled" if enabled else "tool_connection.disabled", {})
    return True


def _revoke_at_provider(connection: ToolConnection, grants: list[ConnectionGrant]) -> list[Revocation]:
    """Ask the provider to revoke each grant's OAuth tokens (reads only; the caller erases them after)."""
    if connection.auth_kind != "oauth":
        return []
    return [revoke_grant_tokens(connection, grant) for grant in grants if grant.status != "revoked"]


def _core_delete(model: type) -> Delete:
    """A Core DELETE on the model's table: no ORM bookkeeping, and no "every company" revision mark (the ORM bulk
    hook cannot evaluate criteria); the callers `touch` the connection's company instead."""
    return delete(table_of(model))


def _lock_grants(grants: list[ConnectionGrant]) -> None:
    """Wait for a token refresh in flight on these grants (it holds the grant's row lock) before erasing."""
    for grant in grants:
        db.session.refresh(grant, with_for_update=True)


def _erase_credentials(connection: ToolConnection, grant_ids: list) -> None:
    if grant_ids:
        db.session.execute(_core_delete(GrantSecret).where(GrantSecret.grant_id.in_(grant_ids)))
        db.session.execute(_core_delete(GrantDelegation).where(GrantDelegation.grant_id.in_(grant_ids)))
    db.session.execute(_core_delete(OAuthState).where(OAuthState.connection_id == connection.id))
    revision.touch(connection.company_id)


def disconnect_connection(actor: Membership, connection: ToolConnection) -> list[Revocation]:
    """Revoke at the provider, erase credentials, revoke the grants; the connection stays, `disconnected`."""
    _require_configure(actor, connection)
    if connection.status == "draft":
        raise Conflict(NOT_SET_UP)
    if connection.status == DISCONNECTED:
        raise Conflict(ALREADY_DISCONNECTED)
    grants = list(connection.grants)
    revocations = _revoke_at_provider(connection, grants)
    _lock_grants(grants)
    _erase_credentials(connection, [g.id for g in grants])
    now = utcnow()
    for grant in grants:
        grant.status = "revoked"
        grant.revoked_at = now
    connection.status = DISCONNECTED
    connection.health_status = "unchecked"
    connection.health_message = None
    connection.provider_account_label = None
    db.session.flush()
    notifications.connection_disconnected(connection)
    _record(
        actor,
        connection,
        "tool_connection.disconnected",
        {
            "grantIds": [str(g.id) for g in grants],
            "providerRevocation": {r.grant_id: r.outcome for r in revocations},
        },
    )
    return revocations


def delete_connection(actor: Membership, connection: ToolConnection) -> Impact:
    """Delete the connection (a draft, a disconnected or a live one) and everything under it; see the module."""
    _require_configure(actor, connection)
    impact = connection_impact(connection)
    if impact.blocked_reason:
        raise Conflict(impact.blocked_reason)
    grants = list(connection.grants)
    # The provider is called before any row is locked or written, so no lock waits on it.
    revocations = _revoke_at_provider(connection, grants)
    _lock_grants(grants)
    for card in (*impact.kept_cards, *impact.expiring_cards):
        db.session.refresh(card, with_for_update=True)
    impact.kept_cards = [c for c in impact.kept_cards if c.status == "pending"]
    impact.expiring_cards = [c for c in impact.expiring_cards if c.status == "pending"]
    was_live = connection_is_live(connection)
    for card in impact.kept_cards:
        intent_setup.forget_saved_setup(card)
    expire_for_deleted_connection(impact.expiring_cards)
    if was_live:
        notifications.connection_disconnected(connection)
    _record(
        actor,
        connection,
        "tool_connection.deleted",
        {
            "status": connection.status,
            "agentIds": [str(a.id) for a in impact.agents],
            "allAgents": impact.all_agents,
            "cardsKeptWaiting": [str(c.id) for c in impact.kept_cards],
            "cardsExpired": [str(c.id) for c in impact.expiring_cards],
            "providerRevocation": {r.grant_id: r.outcome for r in revocations},
        },
    )
    _erase_credentials(connection, [g.id for g in grants])
    for model in (ToolPolicy, ConnectionTool, ConnectionInstall):
        db.session.execute(_core_delete(model).where(model.connection_id == connection.id))
    db.session.delete(connection)
    db.session.flush()
    return impact


def drafts_of(actor: Membership, app_slug: str | None = None) -> list[ToolConnection]:
    """The person's unfinished setups in this company (one per app at most), newest first."""
    query = select(ToolConnection).where(
        ToolConnection.company_id == actor.company_id,
        ToolConnection.status == "draft",
        ToolConnection.created_by_user_id == actor.user_id,
    )
    if app_slug is not None:
        query = query.where(ToolConnection.app_slug == app_slug)
    return list(db.session.scalars(query.order_by(ToolConnection.created_at.desc())))
