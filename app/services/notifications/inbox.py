"""The Inbox: the connection and approval cards addressed to a person in a company, open and done.

`inbox_rows` is one statement whatever the number of cards (the card and its task come back together), and
`inbox_version` is one cheap aggregate the pollers compare, so the badge and the list refresh only on change.
A card counts as open while it is pending on a task that is not closed; everything else is done.
"""

from __future__ import annotations

import functools
import hashlib
import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import ColumnElement, Select, Uuid, and_, bindparam, case, func, not_, select

from app.extensions import db
from app.models import Issue, ThreadInteraction, keys
from app.models.base import as_utc
from app.models.work import CLOSED_ISSUE_STATUSES
from app.services.notifications import CARD_KINDS, card_outcome

OPEN, DONE = "open", "done"
TABS = (OPEN, DONE)
LIMIT = 200


def _mine(
    company_id: uuid.UUID | ColumnElement[uuid.UUID], user_id: uuid.UUID | ColumnElement[uuid.UUID]
) -> ColumnElement[bool]:
    return and_(
        ThreadInteraction.company_id == company_id,
        ThreadInteraction.addressee_user_id == user_id,
        ThreadInteraction.kind.in_(CARD_KINDS),
    )


def _open() -> ColumnElement[bool]:
    return and_(ThreadInteraction.status == "pending", Issue.status.not_in(CLOSED_ISSUE_STATUSES))


def inbox_rows(
    company_id: uuid.UUID, user_id: uuid.UUID, tab: str = OPEN, limit: int = LIMIT
) -> list[tuple[ThreadInteraction, Issue]]:
    """Cards addressed to the person with their tasks: open ones newest first, done ones latest answered first."""
    query = (
        select(ThreadInteraction, Issue)
        .join(Issue, Issue.id == ThreadInteraction.issue_id)
        .where(_mine(company_id, user_id))
        .limit(limit)
    )
    if tab == DONE:
        query = query.where(not_(_open())).order_by(
            func.coalesce(ThreadInteraction.resolved_at, ThreadInteraction.updated_at).desc(),
            ThreadInteraction.id,
        )
    else:
        query = query.where(_open()).order_by(ThreadInteraction.created_at.desc(), ThreadInteraction.id)
    return [(row[0], row[1]) for row in db.session.execute(query)]


@dataclass(frozen=True)
class InboxVersion:
    open_count: int
    tag: str


@functools.cache
def _version_statement() -> Select:
    """`inbox_version`'s aggregate for `company_id` and `user_id` parameters, built once: every board page shows
    the badge, and building the statement cost about as much CPU as running it."""
    is_open = _open()
    return (
        select(
            func.coalesce(func.sum(case((is_open, 1), else_=0)), 0),
            func.count(ThreadInteraction.id),
            func.max(ThreadInteraction.created_at),
            func.max(case((not_(is_open), ThreadInteraction.resolved_at), else_=None)),
        )
        .select_from(ThreadInteraction)
        .join(Issue, Issue.id == ThreadInteraction.issue_id)
        .where(_mine(bindparam("company_id", type_=Uuid), bindparam("user_id", type_=Uuid)))
    )


def inbox_version(company_id: uuid.UUID, user_id: uuid.UUID) -> InboxVersion:
    """How many cards are open, and a tag that changes when a card arrives or moves to done (one statement).

    Phase changes of an open card (the person opened its dialog) do not change the tag, so a poll never replaces a
    card the person is working in.
    """
    row = db.session.execute(_version_statement(), {"company_id": company_id, "user_id": user_id}).one()
    open_count, total, newest, last_resolved = row
    raw = f"{open_count}:{total}:{as_utc(newest) if newest else ''}:{as_utc(last_resolved) if last_resolved else ''}"
    return InboxVersion(int(open_count or 0), hashlib.sha256(raw.encode()).hexdigest()[:16])


def item_json(interaction: ThreadInteraction, issue: Issue) -> dict:
    """One item of `GET /api/me/inbox`."""
    payload = interaction.payload or {}
    item = {
        "id": str(interaction.id),
        "kind": interaction.kind,
        "status": interaction.status,
        "issueId": str(issue.id),
        "issueIdentifier": issue.identifier,
        "agentId": str(interaction.requesting_agent_id) if interaction.requesting_agent_id else None,
        "createdAt": _iso(interaction.created_at),
    }
    if interaction.kind == keys.CONNECTION_CARD:
        item["service"] = payload.get("serviceSlug")
    else:
        item["tool"] = payload.get("toolName")
    if interaction.status != "pending":
        item["outcome"] = card_outcome(interaction)
        item["resolvedAt"] = _iso(interaction.resolved_at)
        item["resolvedByUserId"] = (
            str(interaction.resolved_by_user_id) if interaction.resolved_by_user_id else None
        )
    return item


def _iso(value: datetime | None) -> str | None:
    moment = as_utc(value)
    return moment.isoformat() if moment is not None else None
