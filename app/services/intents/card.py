"""The connection card itself: its kind, texts and payload, and retiring the OAuth states of closed cards."""

from __future__ import annotations

import uuid

from sqlalchemy import delete

from app.extensions import db
from app.models import (
    Issue,
    OAuthState,
    ThreadInteraction,
    keys,
)
from app.services.cards import addressing
from app.services.connections import card_binding

KIND = keys.CONNECTION_CARD
PHASES = ("requested", "authorizing", "needs_retry")
PHASE_INVALID = "phase must be requested, authorizing, or needs_retry"
NOT_ADDRESSEE = addressing.CONNECTION_NOT_ADDRESSEE
ALREADY_RESOLVED = "Connection intent is already resolved"
NO_WRITE_ACCESS = "Addressed user is no longer authorized for company write access"
TASK_GONE = "Connection request no longer belongs to an active task"
CLOSED_ISSUE = "Cannot create an interaction on a closed issue"
KEY_REUSED = "Interaction idempotency key already exists for a different request"
CONNECTION_PREFIX = "connection:"
ISSUE_CLOSED = "issue_closed"
ASSIGNMENT_CHANGED = "assignment_changed"
RESPONSIBLE_CHANGED = "The responsible person changed"
CONNECTION_DELETED = "The connection was deleted"
AUDIENCE_KEY = card_binding.AUDIENCE_KEY
# A task in these statuses is worked on: an answered card's continuation wakes its agent only then (reference.md 9,
# step 7); in Todo or Blocked it waits for the task to move.
WAKE_STATUSES = ("in_progress", "in_review")

BROADEN_FORBIDDEN = (
    "Sharing this connection beyond the requesting agent requires connection-management authority"
)


LEGACY_KIND = "request_confirmation"
LEGACY_KEY = "connectionAuthorization"
# The kinds a connection card's row may have: the lifecycle's queries read both and adopt legacy rows they act on.
CONNECTION_KINDS = (KIND, LEGACY_KIND)


def is_connection_card(row: ThreadInteraction) -> bool:
    """A connection card: a `connection_intent`, or a legacy `request_confirmation` carrying
    `payload.connectionAuthorization` (still readable and resolvable; new requests never create one)."""
    return row.kind == KIND or (
        row.kind == LEGACY_KIND and isinstance((row.payload or {}).get(LEGACY_KEY), dict)
    )


def intent_payload(row: ThreadInteraction) -> dict:
    """The card's payload in the `connection_intent` shape, whichever kind the row is."""
    if row.kind != LEGACY_KIND or not is_connection_card(row):
        return row.payload or {}
    legacy = row.payload[LEGACY_KEY]
    slug = str(legacy.get("serviceSlug") or legacy.get("service") or "")
    agent_id = legacy.get("requestingAgentId") or (
        str(row.requesting_agent_id) if row.requesting_agent_id else None
    )
    return {
        "version": 1,
        "serviceSlug": slug,
        "serviceName": legacy.get("serviceName") or slug,
        "serviceLogoUrl": legacy.get("serviceLogoUrl"),
        "requestingAgentId": agent_id,
        "requestingAgentName": legacy.get("requestingAgentName"),
        "phase": legacy.get("phase") if legacy.get("phase") in PHASES else "requested",
        "legacy": {"kind": LEGACY_KIND, LEGACY_KEY: legacy},
    }


def get_connection_card(interaction_id: uuid.UUID | None) -> ThreadInteraction:
    """The connection card with this id, unlocked: 404 when there is none (or the row is another kind of card).
    The caller checks the company and who may act."""
    row = db.session.get(ThreadInteraction, interaction_id) if interaction_id is not None else None
    if row is None or not is_connection_card(row):
        raise addressing.not_found(KIND)
    return row


def adopt_legacy_card(row: ThreadInteraction) -> None:
    """Before a legacy card is acted on, it becomes a `connection_intent` (its original payload kept under
    `legacy`), so every rule and the continuation treat it like any card."""
    if row.kind == LEGACY_KIND and is_connection_card(row):
        row.payload = intent_payload(row)
        row.kind = KIND
        if row.requesting_agent_id is None:
            row.requesting_agent_id = _uuid_or_none(row.payload.get("requestingAgentId"))
        db.session.flush()


def adopted_connection_cards(rows: list[ThreadInteraction]) -> list[ThreadInteraction]:
    """The connection cards among rows read by kind in `CONNECTION_KINDS` (a `request_confirmation` without
    `connectionAuthorization` is another card), legacy ones adopted, so expiry, supersede and reuse treat a card
    kept from before `connection_intent` as any card."""
    cards = [row for row in rows if is_connection_card(row)]
    for row in cards:
        adopt_legacy_card(row)
    return cards


def card_task_is_active(interaction: ThreadInteraction, issue: Issue | None) -> bool:
    """The card's task is open and still owned by the agent that asked: the one rule for whether a card may still
    be answered (`resolution.active_task` locks the task first) and whether its answer wakes the agent (the
    continuation worker, and what the card says about it)."""
    return (
        issue is not None
        and not issue.is_closed
        and str(issue.assignee_agent_id) == intent_payload(interaction).get("requestingAgentId")
    )


def retire_oauth_states(interaction_ids: list[uuid.UUID]) -> None:
    """Sign-ins in flight for cards that no longer wait: their state rows go, so a late callback connects nothing
    (resolving, expiring or superseding a card deletes its OAuth state rows)."""
    if interaction_ids:
        db.session.execute(
            delete(OAuthState)
            .where(OAuthState.interaction_id.in_(interaction_ids))
            .execution_options(synchronize_session=False)
        )


def _uuid_or_none(value: object) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value)) if value else None
    except ValueError:
        return None
