"""Access cards are granted as the tools stand (issue 26 item 7): the card shows each tool's current policy, and a
tool blocked, removed or changed since the request refuses the grant with a visible reason (reference.md 14:
"rejects changed tools and rolls back installs, grants, and acceptance")."""

from __future__ import annotations

import re
import uuid

from sqlalchemy import select, update

from app.models import ConnectionInstall, ConnectionTool, GrantDelegation, ThreadInteraction
from tests.services.intents.test_access_requests import ask, notes, set_policy  # noqa: F401  (fixture)
from tests.services.runtime.test_runtime_rest import providers  # noqa: F401  (the shared fixture)
from tests.web.cards.test_intent_cards import Htmx, assert_fragment

TOOL_ROW = re.compile(
    r"<li><code>(\w+)</code> <span class=\"badge [\w-]+\">([\w ]+)</span>( <span class=\"muted\">([^<]+)</span>)?</li>"
)


def shown_tools(html: str) -> list[tuple[str, str, str | None]]:
    return [(name, badge, note or None) for name, badge, _, note in TOOL_ROW.findall(html)]


def nothing_granted(db, connection, builder, card_id) -> None:
    db.session.expire_all()
    assert db.session.get(ThreadInteraction, uuid.UUID(card_id)).status == "pending"
    installs = db.session.scalars(
        select(ConnectionInstall).where(
            ConnectionInstall.connection_id == uuid.UUID(connection["id"]),
            ConnectionInstall.target_id == builder.id,
        )
    ).all()
    assert installs == []
    assert db.session.scalars(select(GrantDelegation)).all() == []


def test_a_tool_blocked_after_the_request_shows_blocked_and_refuses_the_grant(app, db, client, notes):  # noqa: F811
    _company, owner, builder, connection, _run, token = notes
    card_id = ask(client, token, connection, toolNames=["search_notes", "create_note"]).json["interactionId"]
    owner_browser = Htmx(app, owner)
    before = assert_fragment(owner_browser.get(f"/intents/{card_id}/card"))
    assert shown_tools(before) == [("search_notes", "Allowed", None), ("create_note", "Asks first", None)]

    set_policy(app, owner, connection, search_notes="block")

    after = assert_fragment(owner_browser.get(f"/intents/{card_id}/card"))
    assert shown_tools(after) == [("search_notes", "Blocked", None), ("create_note", "Asks first", None)]
    refused = owner_browser.post(f"/intents/{card_id}/use/{connection['id']}")
    assert refused.status_code == 422
    html = assert_fragment(refused)
    assert (
        '<p class="alert alert-danger" role="alert">Nothing was granted: search_notes is blocked on the connection '
        "now. Decline this request; the agent can ask again for the tools as they are.</p>"
    ) in html
    nothing_granted(db, connection, builder, card_id)


def test_a_tool_changed_or_removed_after_the_request_refuses_the_grant(app, db, client, notes):  # noqa: F811
    _company, owner, builder, connection, _run, token = notes
    card_id = ask(client, token, connection, toolNames=["search_notes", "create_note", "get_note"]).json[
        "interactionId"
    ]
    connection_id = uuid.UUID(connection["id"])
    db.session.execute(
        update(ConnectionTool)
        .where(ConnectionTool.connection_id == connection_id, ConnectionTool.name == "create_note")
        .values(version_hash="a-new-version")
    )
    db.session.execute(
        update(ConnectionTool)
        .where(ConnectionTool.connection_id == connection_id, ConnectionTool.name == "get_note")
        .values(status="removed")
    )
    db.session.commit()
    owner_browser = Htmx(app, owner)

    html = assert_fragment(owner_browser.get(f"/intents/{card_id}/card"))
    assert shown_tools(html) == [
        ("search_notes", "Allowed", None),
        ("create_note", "Asks first", "Changed since the request"),
        ("get_note", "Removed", None),
    ]
    refused = owner_browser.post(f"/intents/{card_id}/use/{connection['id']}")
    assert refused.status_code == 422
    assert (
        "Nothing was granted: create_note changed since the request; get_note was removed from the connection. "
        "Decline this request; the agent can ask again for the tools as they are."
    ) in assert_fragment(refused)
    nothing_granted(db, connection, builder, card_id)
