"""The single writer of the append-only activity log."""

from __future__ import annotations

import uuid

from app.extensions import db
from app.models import ActivityLog

SECRET_KEY_HINTS = ("secret", "password", "token", "credential", "authorization", "apikey", "api_key")


def _assert_no_secrets(details: dict) -> None:
    """Refuse detail keys that look like secrets: activity is readable by every member of the company."""
    for key, value in details.items():
        lowered = key.lower().replace("-", "_")
        if any(hint in lowered for hint in SECRET_KEY_HINTS) and not lowered.endswith(
            ("_id", "_digest", "_count")
        ):
            raise ValueError(f"activity details must not carry secrets (key {key!r})")
        if isinstance(value, dict):
            _assert_no_secrets(value)


def record_activity(
    *,
    company_id: uuid.UUID,
    actor_type: str,
    actor_id: str | uuid.UUID,
    action: str,
    entity_type: str,
    entity_id: str | uuid.UUID,
    agent_id: uuid.UUID | None = None,
    run_id: uuid.UUID | None = None,
    details: dict | None = None,
) -> ActivityLog:
    details = details or {}
    _assert_no_secrets(details)
    row = ActivityLog(
        company_id=company_id,
        actor_type=actor_type,
        actor_id=str(actor_id),
        action=action,
        entity_type=entity_type,
        entity_id=str(entity_id),
        agent_id=agent_id,
        run_id=run_id,
        details=details,
    )
    db.session.add(row)
    return row
