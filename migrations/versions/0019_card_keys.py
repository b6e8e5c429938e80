"""card keys and legacy cards: every connection card follows one lifecycle (issue 26, items 1 and 3)

Data only, no schema change:

- Legacy connection cards (`request_confirmation` rows carrying `payload.connectionAuthorization`, stored before
  `connection_intent`) become `connection_intent` rows, their payload in the card's shape with the original kept
  under `legacy`, exactly as the application adopts one before acting on it (`intents.card.adopt_legacy_card`). So
  the Inbox, notifications, expiry, supersede and reuse see them as any card. A `request_confirmation` without
  `connectionAuthorization` is another card and is left alone.
- Pending access cards are keyed again with the key the application now gives them (`models.keys.card_key` with
  the access request), so a request for other tools, or a plain request, never finds them under its own key.

Downgrade leaves the rows as they are: an adopted card is what the previous revision's own code makes of a legacy
card when acting on it, and it looks pending cards up by key only to reuse them (a card it no longer finds under a
plain key is one it would not have had to reuse).

Revision ID: 0019_card_keys
Revises: 0018_agent_cli_adapters
"""

import uuid

import sqlalchemy as sa
from alembic import op
from sqlalchemy.dialects import postgresql

revision = "0019_card_keys"
down_revision = "0018_agent_cli_adapters"
branch_labels = None
depends_on = None

JSON_TYPE = sa.JSON().with_variant(postgresql.JSONB(), "postgresql")
LEGACY_KIND = "request_confirmation"
LEGACY_KEY = "connectionAuthorization"
KIND = "connection_intent"
PHASES = ("requested", "authorizing", "needs_retry")

cards = sa.table(
    "thread_interactions",
    sa.column("id", sa.Uuid()),
    sa.column("kind", sa.String()),
    sa.column("status", sa.String()),
    sa.column("payload", JSON_TYPE),
    sa.column("idempotency_key", sa.String()),
    sa.column("addressee_user_id", sa.Uuid()),
    sa.column("requesting_agent_id", sa.Uuid()),
    sa.column("source_run_id", sa.Uuid()),
)


def upgrade():
    bind = op.get_bind()
    adopt_legacy_cards(bind)
    rekey_access_cards(bind)


def downgrade():
    pass


def _uuid_or_none(value):
    try:
        return uuid.UUID(str(value)) if value else None
    except ValueError:
        return None


def adopted_payload(payload: dict, requesting_agent_id) -> dict:
    """A legacy card's payload in the `connection_intent` shape (as `intents.card.intent_payload` reads it)."""
    legacy = payload[LEGACY_KEY]
    slug = str(legacy.get("serviceSlug") or legacy.get("service") or "")
    agent_id = legacy.get("requestingAgentId") or (str(requesting_agent_id) if requesting_agent_id else None)
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


def adopt_legacy_cards(bind) -> int:
    """Every legacy connection card becomes a `connection_intent` (any status). Returns how many."""
    rows = bind.execute(
        sa.select(cards.c.id, cards.c.payload, cards.c.requesting_agent_id).where(cards.c.kind == LEGACY_KIND)
    ).all()
    changed = 0
    for row in rows:
        payload = row.payload or {}
        if not isinstance(payload.get(LEGACY_KEY), dict):
            continue
        adopted = adopted_payload(payload, row.requesting_agent_id)
        bind.execute(
            cards.update()
            .where(cards.c.id == row.id)
            .values(
                kind=KIND,
                payload=adopted,
                requesting_agent_id=row.requesting_agent_id or _uuid_or_none(adopted["requestingAgentId"]),
            )
        )
        changed += 1
    return changed


def rekey_access_cards(bind) -> int:
    """Pending access cards get the key that names their access request. Returns how many changed."""
    from app.models.keys import card_key

    rows = bind.execute(
        sa.select(
            cards.c.id, cards.c.payload, cards.c.idempotency_key, cards.c.addressee_user_id, cards.c.source_run_id
        ).where(cards.c.kind == KIND, cards.c.status == "pending", cards.c.idempotency_key.is_not(None))
    ).all()
    changed = 0
    for row in rows:
        payload = row.payload or {}
        access = payload.get("accessRequest")
        if not isinstance(access, dict) or row.source_run_id is None or row.addressee_user_id is None:
            continue
        key = card_key(row.source_run_id, row.addressee_user_id, str(payload.get("serviceSlug") or ""), access)
        if key != row.idempotency_key:
            bind.execute(cards.update().where(cards.c.id == row.id).values(idempotency_key=key))
            changed += 1
    return changed
