"""The single writer of the append-only activity log."""

from __future__ import annotations

import uuid
from datetime import datetime
from typing import Any, NotRequired, TypedDict, Unpack

from sqlalchemy import insert, select
from sqlalchemy.orm import Session

from app.extensions import db
from app.models import ActivityLog, Agent, User

# The action of a gateway tool call's row: written by the gateway, read by the task thread (`run_progress`).
TOOL_CALL_ACTION = "tool_gateway.call"
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


class ActivityFields(TypedDict):
    """What one activity row records; both writers below take exactly these keywords."""

    company_id: uuid.UUID
    actor_type: str
    actor_id: str | uuid.UUID
    action: str
    entity_type: str
    entity_id: str | uuid.UUID
    agent_id: NotRequired[uuid.UUID | None]
    run_id: NotRequired[uuid.UUID | None]
    details: NotRequired[dict | None]


def _activity_row(fields: ActivityFields) -> dict[str, Any]:
    """The row's column values, its details checked for secrets."""
    details = fields.get("details") or {}
    _assert_no_secrets(details)
    return {
        "company_id": fields["company_id"],
        "actor_type": fields["actor_type"],
        "actor_id": str(fields["actor_id"]),
        "action": fields["action"],
        "entity_type": fields["entity_type"],
        "entity_id": str(fields["entity_id"]),
        "agent_id": fields.get("agent_id"),
        "run_id": fields.get("run_id"),
        "details": details,
    }


def record_activity(*, session: Session | None = None, **fields: Unpack[ActivityFields]) -> ActivityLog:
    """Append one activity row (details are checked for secrets) to the request's session, or to `session` for
    work done in a transaction of its own (OAuth token refresh)."""
    row = ActivityLog(**_activity_row(fields))
    (session if session is not None else db.session).add(row)
    return row


def record_activity_now(**fields: Unpack[ActivityFields]) -> None:
    """`record_activity` durable at once: one autocommitted INSERT on a connection of its own (no BEGIN, no COMMIT).

    For an outcome recorded while the request holds no transaction (a gateway call's, once the provider has
    answered: the request's transaction ended before the provider was called), where the unit of work would open
    one transaction for this single row. Never call it inside a transaction that has written: on SQLite it would
    wait for that transaction's lock.
    """
    row = _activity_row(fields)
    with db.engine.connect().execution_options(isolation_level="AUTOCOMMIT") as connection:
        connection.execute(insert(ActivityLog), row)


ACTIVITY_PAGE_SIZE = 50


def list_activity(
    company_id: uuid.UUID,
    *,
    action_prefix: str | None = None,
    before: datetime | None = None,
    limit: int = ACTIVITY_PAGE_SIZE,
) -> list[ActivityLog]:
    """The company's activity, newest first, optionally filtered by an action prefix (e.g. `issue.`)."""
    query = select(ActivityLog).where(ActivityLog.company_id == company_id)
    if action_prefix:
        query = query.where(ActivityLog.action.startswith(action_prefix, autoescape=True))
    if before is not None:
        query = query.where(ActivityLog.created_at < before)
    return list(
        db.session.scalars(query.order_by(ActivityLog.created_at.desc(), ActivityLog.id.desc()).limit(limit))
    )


def actor_names(rows: list[ActivityLog]) -> dict[str, str]:
    """Display names for the people and agents in a page of activity, read in batches (a longer page costs no
    more round trips)."""
    user_ids: set[uuid.UUID] = set()
    agent_ids: set[uuid.UUID] = set()
    for row in rows:
        target = user_ids if row.actor_type == "user" else agent_ids if row.actor_type == "agent" else None
        if target is not None:
            try:
                target.add(uuid.UUID(row.actor_id))
            except ValueError:
                continue
    names: dict[str, str] = {}
    if user_ids:
        names.update(
            {str(u.id): u.name for u in db.session.scalars(select(User).where(User.id.in_(user_ids)))}
        )
    if agent_ids:
        names.update(
            {str(a.id): a.name for a in db.session.scalars(select(Agent).where(Agent.id.in_(agent_ids)))}
        )
    return names
