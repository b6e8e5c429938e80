"""The Inbox: every open connection and approval card addressed to me in this company, with the same card
partials as the task thread, a Done tab, and pollers that cost one aggregate query and answer 204 (htmx) or 304
(`If-None-Match`) while nothing changed.
"""

from __future__ import annotations

from collections.abc import Callable

from flask import g, render_template, request
from flask.typing import ResponseReturnValue
from flask_login import current_user
from sqlalchemy import select

from app.extensions import db
from app.models import Issue, Membership, ThreadInteraction, User
from app.services.notifications.inbox import (
    DONE,
    OPEN,
    TABS,
    InboxVersion,
    inbox_rows,
    inbox_version,
    item_json,
)
from app.web.context import current_membership
from app.web.notifications import bp
from app.web.notifications.schemas import InboxResponse
from app.web.openapi import operations as openapi
from app.web.openapi.responses import respond

POLL_SECONDS = 5


def _tab() -> str:
    tab = request.args.get("tab", OPEN)
    return tab if tab in TABS else OPEN


def _resolver_names(rows: list[tuple[ThreadInteraction, Issue]]) -> dict:
    ids = {item.resolved_by_user_id for item, _issue in rows if item.resolved_by_user_id}
    if not ids:
        return {}
    return {
        user_id: name
        for user_id, name in db.session.execute(select(User.id, User.name).where(User.id.in_(ids)))
    }


def _list_context(membership: Membership, tab: str) -> dict:
    rows = inbox_rows(membership.company_id, current_user.id, tab)
    return {
        "tab": tab,
        "rows": rows,
        "resolvers": _resolver_names(rows) if tab == DONE else {},
        "version": inbox_version(membership.company_id, current_user.id),
        "poll_seconds": POLL_SECONDS,
    }


def _polled(membership: Membership, render: Callable[[InboxVersion], str]) -> ResponseReturnValue:
    """A poller's answer: 204 when it already shows this version, 304 for a conditional GET, else the fragment
    `render` makes, tagged with the version (the one aggregate query is all an unchanged poll costs)."""
    version = inbox_version(membership.company_id, current_user.id)
    if request.args.get("v") == version.tag:
        return "", 204
    if request.if_none_match and request.if_none_match.contains(version.tag):
        return "", 304
    return render(version), 200, {"ETag": f'"{version.tag}"'}


@bp.get("/inbox")
def inbox() -> ResponseReturnValue:
    membership = current_membership()
    return render_template("inbox/inbox.html", **_list_context(membership, _tab()))


@bp.get("/inbox/list")
def inbox_list() -> ResponseReturnValue:
    membership = current_membership()
    return _polled(
        membership, lambda _version: render_template("inbox/_list.html", **_list_context(membership, _tab()))
    )


@bp.get("/inbox/badge")
def badge() -> ResponseReturnValue:
    return _polled(
        current_membership(),
        lambda version: render_template("inbox/_badge.html", inbox_nav=version, poll_seconds=POLL_SECONDS),
    )


@bp.app_template_global("inbox_nav_version")
def _inbox_nav_version() -> InboxVersion | None:
    """The badge's count for the page being rendered (one aggregate query), or None outside a company.

    Kept for the request: the Inbox link, the Menu button and Home's waiting card all show it from the one query."""
    membership = g.get("membership")
    if membership is None or not current_user.is_authenticated:
        return None
    if "inbox_nav_version" not in g:
        g.inbox_nav_version = inbox_version(membership.company_id, current_user.id)
    return g.inbox_nav_version


@bp.get("/api/me/inbox")
@openapi.board_read(
    "My inbox: connection cards and tool approvals addressed to me in the current company",
    "inbox",
    InboxResponse,
    description="`?tab=open` (the default): pending cards on open tasks, newest first. `?tab=done`: answered, "
    "expired and superseded cards, latest first, with `outcome`, `resolvedAt` and `resolvedByUserId`.",
)
def api_inbox() -> ResponseReturnValue:
    membership = current_membership()
    tab = _tab()
    rows = inbox_rows(membership.company_id, current_user.id, tab)
    return respond(InboxResponse.model_validate({"items": [item_json(item, issue) for item, issue in rows]}))
