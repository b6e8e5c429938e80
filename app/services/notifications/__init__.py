"""Who is notified of what: the one owner of notification rules.

Every event is a call into this module from the service that makes the change, inside the same unit of work, so the
outbox rows (`NotificationDelivery`) commit or roll back with the event itself; nothing is sent here. The worker
(`app.workers.outbox`) delivers the rows later.

| event                               | email to                                  | webhook event                        |
|-------------------------------------|-------------------------------------------|--------------------------------------|
| a connection card is created        | the addressee (at most one mail per card) | `connection_intent.created`          |
| a connection card is resolved       | -                                         | `connection_intent.resolved`         |
| a tool approval card is created     | the addressee (at most one mail per card) | `tool_approval.requested`            |
| a tool approval card is answered    | -                                         | `tool_approval.resolved`             |
| a connection needs reauthorization  | its owner (the personal grant's person,   | `connection.needs_reauthorization`   |
|                                     | else the person who created it)           |                                      |
| a connection is connected           | -                                         | `connection.connected`               |
| a connection is disconnected or     | -                                         | `connection.disconnected`            |
| deleted while live                  |                                           |                                      |
| a connection is disabled / enabled  | -                                         | `connection.disabled` / `.enabled`   |

Mail is queued only when `SMTP_URL` is configured and the person has not turned email off; webhooks go to the
company's enabled endpoints subscribed to the event. Payloads carry ids, names and states only: never credentials,
tool arguments or URLs.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from flask import current_app
from sqlalchemy import select
from sqlalchemy.orm import Session

from app.core.wake_signal import NOTIFICATIONS, signal_work
from app.extensions import db
from app.models import (
    ConnectionGrant,
    Issue,
    NotificationDelivery,
    NotificationPreference,
    ThreadInteraction,
    ToolConnection,
    User,
    keys,
)
from app.models.base import as_utc, utcnow
from app.models.notifications import WebhookEndpoint

CONNECTION_CARD = keys.CONNECTION_CARD
APPROVAL_CARD = keys.APPROVAL_CARD
CARD_KINDS = (CONNECTION_CARD, APPROVAL_CARD)
CREATED_EVENTS = {CONNECTION_CARD: "connection_intent.created", APPROVAL_CARD: "tool_approval.requested"}
RESOLVED_EVENTS = {CONNECTION_CARD: "connection_intent.resolved", APPROVAL_CARD: "tool_approval.resolved"}


def _session(session: Session | None) -> Session:
    return session if session is not None else db.session()  # the request's session, not its scoped proxy


def _iso(value: datetime | None) -> str | None:
    moment = as_utc(value)
    return moment.isoformat() if moment is not None else None


# --- preferences ---------------------------------------------------------------------------------------------


def email_enabled(user_id: uuid.UUID, session: Session | None = None) -> bool:
    """Whether the person gets notification mail (on unless they turned it off)."""
    preference = _session(session).get(NotificationPreference, user_id)
    return preference is None or preference.email_enabled


@dataclass(frozen=True)
class EmailStatus:
    """What notification mail will really do for one person: sent only when a mail server is configured
    (`SMTP_URL`) and the person has not turned it off."""

    configured: bool
    enabled: bool

    @property
    def sends(self) -> bool:
        return self.configured and self.enabled


def email_status(user_id: uuid.UUID) -> EmailStatus:
    return EmailStatus(configured=mail_configured(), enabled=email_enabled(user_id))


def set_email_enabled(user: User, enabled: bool) -> NotificationPreference:
    preference = db.session.get(NotificationPreference, user.id)
    if preference is None:
        preference = NotificationPreference(user_id=user.id, email_enabled=bool(enabled))
        db.session.add(preference)
    else:
        preference.email_enabled = bool(enabled)
    db.session.flush()
    return preference


# --- payloads ------------------------------------------------------------------------------------------------


def card_outcome(interaction: ThreadInteraction) -> str | None:
    """The resolution in the words of the webhook contract."""
    if interaction.kind == APPROVAL_CARD:
        return None if interaction.status == "pending" else interaction.status
    if interaction.status == "accepted":
        return "connected"
    if interaction.status == "rejected":
        return "declined"
    if interaction.status == "pending":
        return None
    return "superseded" if (interaction.result or {}).get("outcome") == "superseded" else "expired"


def card_data(interaction: ThreadInteraction, session: Session | None = None) -> dict:
    """What any notification about a card may say: ids, names and states."""
    issue = _session(session).get(Issue, interaction.issue_id)
    payload = interaction.payload or {}
    data = {
        "interactionId": str(interaction.id),
        "kind": interaction.kind,
        "status": interaction.status,
        "companyId": str(interaction.company_id),
        "issueId": str(interaction.issue_id),
        "issueIdentifier": issue.identifier if issue is not None else None,
        "issueTitle": issue.title if issue is not None else None,
        "agentId": str(interaction.requesting_agent_id) if interaction.requesting_agent_id else None,
        "agentName": payload.get("requestingAgentName"),
        "addresseeUserId": str(interaction.addressee_user_id) if interaction.addressee_user_id else None,
        "createdAt": _iso(interaction.created_at),
    }
    if interaction.kind == CONNECTION_CARD:
        data["service"] = payload.get("serviceSlug")
        data["serviceName"] = payload.get("serviceName")
    else:
        data["tool"] = payload.get("toolName")
        data["connectionId"] = payload.get("connectionId")
        data["connectionName"] = payload.get("connectionName")
    if interaction.status != "pending":
        data["outcome"] = card_outcome(interaction)
        data["resolvedByUserId"] = (
            str(interaction.resolved_by_user_id) if interaction.resolved_by_user_id else None
        )
        data["resolvedAt"] = _iso(interaction.resolved_at)
        if (interaction.result or {}).get("outcome") == "issue_closed":
            data["reason"] = "issue_closed"
        elif interaction.kind == APPROVAL_CARD and (interaction.result or {}).get("reasonCode"):
            # invalidated: the arguments changed, or the tool's definition
            data["reason"] = (interaction.result or {})["reasonCode"]
    return data


def connection_data(connection: ToolConnection, **extra: Any) -> dict:
    return {
        "connectionId": str(connection.id),
        "companyId": str(connection.company_id),
        "connectionName": connection.name,
        "service": connection.app_slug,
        "status": connection.status,
        "enabled": bool(connection.enabled),
        "healthStatus": connection.health_status,
        **extra,
    }


# --- writing the outbox ----------------------------------------------------------------------------------------


def _queue(
    session: Session,
    *,
    company_id: uuid.UUID,
    event: str,
    channel: str,
    data: dict,
    recipient_user_id: uuid.UUID | None = None,
    endpoint_id: uuid.UUID | None = None,
    dedupe_key: str | None = None,
) -> NotificationDelivery | None:
    if dedupe_key is not None and session.scalar(
        select(NotificationDelivery.id).where(NotificationDelivery.dedupe_key == dedupe_key)
    ):
        return None
    now = utcnow()
    row = NotificationDelivery(
        id=uuid.uuid4(),
        company_id=company_id,
        event=event,
        channel=channel,
        recipient_user_id=recipient_user_id,
        endpoint_id=endpoint_id,
        payload={"type": event, "timestamp": now.isoformat(), "data": data},
        dedupe_key=dedupe_key,
        next_attempt_at=now,
    )
    session.add(row)
    signal_work(session, NOTIFICATIONS)  # the outbox worker looks at once after the commit
    return row


def mail_configured() -> bool:
    """Whether this installation can send mail at all (the operator set `SWITCHBOARD_SMTP_URL`)."""
    return bool(current_app.config.get("SMTP_URL"))


def _queue_email(
    session: Session,
    company_id: uuid.UUID,
    event: str,
    user_id: uuid.UUID | None,
    data: dict,
    dedupe_key: str | None = None,
) -> None:
    if user_id is None or not mail_configured() or not email_enabled(user_id, session):
        return
    _queue(
        session,
        company_id=company_id,
        event=event,
        channel="email",
        data=data,
        recipient_user_id=user_id,
        dedupe_key=dedupe_key,
    )


def _queue_webhooks(
    session: Session, company_id: uuid.UUID, event: str, data: dict, subject: str | None = None
) -> None:
    endpoints = session.scalars(
        select(WebhookEndpoint).where(WebhookEndpoint.company_id == company_id, WebhookEndpoint.enabled)
    )
    for endpoint in endpoints:
        if event in (endpoint.events or []):
            _queue(
                session,
                company_id=company_id,
                event=event,
                channel="webhook",
                data=data,
                endpoint_id=endpoint.id,
                dedupe_key=f"webhook:{endpoint.id}:{event}:{subject}" if subject else None,
            )


# --- the events ----------------------------------------------------------------------------------------------


def card_created(
    interaction: ThreadInteraction,
    session: Session | None = None,
    superseded: Iterable[ThreadInteraction] = (),
) -> None:
    """A connection or approval card now waits for its addressee: one mail to them, and the webhooks. Cards it
    replaces (`superseded`) are told as resolved."""
    if interaction.kind not in CARD_KINDS:
        return
    session = _session(session)
    cards_resolved(superseded, session)
    event = CREATED_EVENTS[interaction.kind]
    data = card_data(interaction, session)
    _queue_email(
        session,
        interaction.company_id,
        event,
        interaction.addressee_user_id,
        data,
        dedupe_key=f"email:card:{interaction.id}",
    )
    _queue_webhooks(session, interaction.company_id, event, data, subject=str(interaction.id))


def card_resolved(interaction: ThreadInteraction, session: Session | None = None) -> None:
    """A card stopped waiting (connected, declined, expired, superseded; approved, denied, invalidated)."""
    if interaction.kind not in CARD_KINDS or interaction.status == "pending":
        return
    session = _session(session)
    event = RESOLVED_EVENTS[interaction.kind]
    _queue_webhooks(
        session, interaction.company_id, event, card_data(interaction, session), subject=str(interaction.id)
    )


def cards_resolved(interactions: Iterable[ThreadInteraction], session: Session | None = None) -> None:
    for interaction in interactions:
        card_resolved(interaction, session)


def connection_needs_reauthorization(
    connection: ToolConnection, grant: ConnectionGrant | None = None, session: Session | None = None
) -> None:
    """The connection's sign-in stopped working: mail its owner, and the webhooks."""
    session = _session(session)
    owner_id = (
        grant.subject_user_id
        if grant is not None and grant.kind == "user" and grant.subject_user_id
        else connection.created_by_user_id
    )
    data = connection_data(connection, grantId=str(grant.id) if grant is not None else None)
    _queue_email(session, connection.company_id, "connection.needs_reauthorization", owner_id, data)
    _queue_webhooks(session, connection.company_id, "connection.needs_reauthorization", data)


def connection_connected(connection: ToolConnection, session: Session | None = None) -> None:
    session = _session(session)
    _queue_webhooks(session, connection.company_id, "connection.connected", connection_data(connection))


def queue_test_event(endpoint: WebhookEndpoint, *, sent_by: uuid.UUID) -> NotificationDelivery:
    """`webhook.test` to one endpoint, asked for on its settings page: lets an operator check the receiver and its
    signature check end to end. Not one of the subscribable events; it goes only where it was asked for."""
    row = _queue(
        _session(None),
        company_id=endpoint.company_id,
        event="webhook.test",
        channel="webhook",
        data={
            "endpointId": str(endpoint.id),
            "sentByUserId": str(sent_by),
            "message": "A test event from Switchboard.",
        },
        endpoint_id=endpoint.id,
    )
    assert row is not None  # no dedupe key: always queued
    return row


def connection_switched(connection: ToolConnection, enabled: bool, session: Session | None = None) -> None:
    """Disabled or enabled again: the connection keeps its credentials (not `connection.disconnected`)."""
    session = _session(session)
    event = "connection.enabled" if enabled else "connection.disabled"
    _queue_webhooks(session, connection.company_id, event, connection_data(connection))


def connection_disconnected(connection: ToolConnection, session: Session | None = None) -> None:
    session = _session(session)
    _queue_webhooks(session, connection.company_id, "connection.disconnected", connection_data(connection))
