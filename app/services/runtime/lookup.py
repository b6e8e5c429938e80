"""What `connection_request` reads about a catalog service when the run cannot use it yet, in one statement.

Three reads made one round trip on the hot path of an agent's request, as the branches of one UNION ALL told
apart by which columns are set: the app's catalog row (its content hash, for `loader.get_app_versions`), the
company's non-archived connections of the app (id and health: what `readiness` reads of them, as
`intents_service.matching_connections` names them) and the id of the run's card pending under its key
(`creation.pending_card_id`, read without the task lock for the same reason).
"""

from __future__ import annotations

import functools
import uuid
from dataclasses import dataclass, field

from sqlalchemy import CompoundSelect, String, Uuid, bindparam, cast, null, select, union_all

from app.extensions import db
from app.models import CatalogApp, ThreadInteraction, ToolConnection
from app.models.keys import card_key
from app.services.intents.service import MatchingRow
from app.services.runtime.context import RunContext


@dataclass
class CatalogServiceLookup:
    content_hash: str | None = None  # None: the catalog has no such app
    matching: list[MatchingRow] = field(default_factory=list)  # in id order
    pending_card_id: uuid.UUID | None = None


@functools.cache
def _statement() -> CompoundSelect:
    """The three branches as (content_hash, id, health_status): the app row sets only the hash, a connection
    the id and its health (never null), the card only its id. Built once."""
    slug = bindparam("slug", type_=String)
    company_id = bindparam("company_id", type_=Uuid)
    no_id, no_text = cast(null(), Uuid), cast(null(), String)
    app = select(CatalogApp.content_hash, no_id.label("id"), no_text.label("health_status")).where(
        CatalogApp.slug == slug
    )
    connections = select(no_text, ToolConnection.id, ToolConnection.health_status).where(
        ToolConnection.company_id == company_id,
        ToolConnection.status != "archived",
        ToolConnection.app_slug == slug,
    )
    card = select(no_text, ThreadInteraction.id, no_text).where(
        ThreadInteraction.company_id == company_id,
        ThreadInteraction.issue_id == bindparam("issue_id", type_=Uuid),
        ThreadInteraction.idempotency_key == bindparam("key", type_=String),
        ThreadInteraction.status == "pending",
    )
    return union_all(app, connections, card)


def lookup_catalog_service(ctx: RunContext, slug: str) -> CatalogServiceLookup:
    """The catalog app `slug`, its connections in the run's company and the run's pending card for it."""
    found = CatalogServiceLookup()
    params = {
        "slug": slug,
        "company_id": ctx.run.company_id,
        "issue_id": ctx.issue.id,
        "key": card_key(ctx.run.id, ctx.responsible_user_id, slug),
    }
    for content_hash, row_id, health_status in db.session.execute(_statement(), params):
        if content_hash is not None:
            found.content_hash = content_hash
        elif health_status is not None:
            found.matching.append(MatchingRow(row_id, health_status))
        else:
            found.pending_card_id = row_id
    found.matching.sort(key=lambda row: row.id)
    return found
