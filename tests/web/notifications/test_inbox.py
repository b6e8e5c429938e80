"""The Inbox (issue 15): cards addressed to me across tasks with the thread's own partials, a Done tab, an empty
state, the badge, pollers that answer 204/304 while nothing changed, and `GET /api/me/inbox` in one statement."""

from __future__ import annotations

import re

import pytest

from app.services.intents import resolution as intents_resolution
from tests.conftest import count_statements, sign_in
from tests.doors import approval_card
from tests.factories import Factory
from tests.peers.mcp_servers import HONCHO_KEY
from tests.services.gateway.test_gateway import connect, world  # noqa: F401  (the gateway's fixture: a run on a task)

SLUGS = ("notion", "github", "linear", "slack", "mem0", "zep")


def open_card(db, company, owner, agent, issue, slug="notion"):
    return Factory(db).card(issue, agent, owner, slug)


@pytest.fixture
def team(make):
    company = make.company("Acme", "ACME")
    owner = make.member(company, "owner")
    agent = make.agent(company, "Builder", adapter_type="manual")
    first = make.issue(company, title="First task", status="in_progress", assignee=agent, responsible=owner)
    second = make.issue(company, title="Second task", status="in_progress", assignee=agent, responsible=owner)
    return company, owner, agent, first, second


def test_empty_inbox_says_what_will_appear(db, client, team):
    _company, owner, *_ = team
    sign_in(client, owner)
    page = client.get("/inbox").get_data(as_text=True)
    assert "Nothing is waiting for you." in page and "appears here" in page
    assert 'id="inbox-nav"' in page and "inbox-count" not in page
    done = client.get("/inbox?tab=done").get_data(as_text=True)
    assert "Nothing answered yet." in done


def test_inbox_lists_my_cards_across_tasks_newest_first_with_the_thread_partials(
    app,
    db,
    world,  # noqa: F811
    make,
):
    connect(world, "honcho", HONCHO_KEY)
    approval_id = approval_card(world, content="c")
    other_issue = make.issue(
        world.company, title="Other task", status="in_progress", assignee=world.agent, responsible=world.owner
    )
    card = open_card(db, world.company, world.owner, world.agent, other_issue)
    # A card addressed to someone else is not in my inbox.
    colleague = make.member(world.company, "member")
    their_issue = make.issue(
        world.company, title="Theirs", status="in_progress", assignee=world.agent, responsible=colleague
    )
    theirs = open_card(db, world.company, colleague, world.agent, their_issue, slug="github")

    page = world.client.get("/inbox").get_data(as_text=True)
    assert f'id="intent-card-{card.id}"' in page and f'id="approval-{approval_id}"' in page
    assert str(theirs.id) not in page
    assert page.index(f"inbox-item-{card.id}") < page.index(f"inbox-item-{approval_id}")  # newest first
    assert f"/intents/{card.id}/dialog" in page and f"/intents/{card.id}/decline" in page  # Connect, Not now
    assert f"/approvals/{approval_id}/approve" in page and f"/approvals/{approval_id}/deny" in page
    assert "Other task" in page and world.issue.title in page and "Builder" in page
    assert re.search(r'class="badge inbox-count"[^>]*>2<', page)

    api = world.client.get("/api/me/inbox").json
    assert [item["id"] for item in api["items"]] == [str(card.id), approval_id]
    assert api["items"][0] == {
        "id": str(card.id),
        "kind": "connection_intent",
        "status": "pending",
        "issueId": str(other_issue.id),
        "issueIdentifier": other_issue.identifier,
        "agentId": str(world.agent.id),
        "service": "notion",
        "createdAt": api["items"][0]["createdAt"],
    }
    assert api["items"][1]["kind"] == "tool_approval" and api["items"][1]["tool"] == "save_memory"

    # Answering inline from the inbox moves the card to Done, with who answered.
    declined = world.client.post(
        f"/intents/{card.id}/decline", headers={"X-CSRFToken": world.csrf, "HX-Request": "true"}
    )
    assert declined.status_code == 200 and "<html" not in declined.get_data(as_text=True)
    page = world.client.get("/inbox").get_data(as_text=True)
    assert str(card.id) not in page
    done = world.client.get("/inbox?tab=done").get_data(as_text=True)
    assert f'id="intent-card-{card.id}"' in done and f"answered by {world.owner.name}" in done
    done_api = world.client.get("/api/me/inbox?tab=done").json["items"]
    assert [(i["id"], i["outcome"]) for i in done_api] == [(str(card.id), "declined")]


def test_pollers_answer_204_or_304_until_something_changes(db, client, team):
    company, owner, agent, first, second = team
    sign_in(client, owner)
    badge = client.get("/inbox/badge", headers={"HX-Request": "true"})
    assert badge.status_code == 200 and "inbox-count" not in badge.get_data(as_text=True)
    tag = badge.headers["ETag"].strip('"')
    assert client.get(f"/inbox/badge?v={tag}").status_code == 204
    assert client.get("/inbox/badge", headers={"If-None-Match": f'"{tag}"'}).status_code == 304
    listing = client.get(f"/inbox/list?v={tag}")
    assert listing.status_code == 204

    card = open_card(db, company, owner, agent, first)
    changed = client.get(f"/inbox/badge?v={tag}", headers={"HX-Request": "true"})
    html = changed.get_data(as_text=True)
    assert changed.status_code == 200 and "<html" not in html and ">1<" in html
    new_tag = changed.headers["ETag"].strip('"')
    assert new_tag != tag and f"v={new_tag}" in html
    fragment = client.get(f"/inbox/list?v={tag}", headers={"HX-Request": "true"}).get_data(as_text=True)
    assert fragment.startswith('<section id="inbox-list"') and f"intent-card-{card.id}" in fragment
    # Opening the card's dialog (a phase change) does not count as a change: the list is not replaced under it.
    intents_resolution.set_phase(card.id, owner.id, "authorizing")
    db.session.commit()
    assert client.get(f"/inbox/list?v={new_tag}").status_code == 204
    intents_resolution.decline_intent(card.id, owner.id, None)
    db.session.commit()
    assert client.get(f"/inbox/list?v={new_tag}").status_code == 200


def test_the_inbox_query_is_one_statement_however_many_cards(app, db, client, team):
    from app.extensions import db as _db
    from app.services.notifications.inbox import inbox_rows

    company, owner, agent, first, second = team
    sign_in(client, owner)
    open_card(db, company, owner, agent, first, SLUGS[0])

    def measure():
        with count_statements(_db.engine) as statements:
            response = client.get("/api/me/inbox")
        assert response.status_code == 200
        return len(response.json["items"]), len(statements)

    one = measure()
    for index, slug in enumerate(SLUGS[1:]):
        open_card(db, company, owner, agent, first if index % 2 else second, slug)
    many = measure()
    assert one[0] == 1 and many[0] == len(SLUGS)
    assert one[1] == many[1]
    company_id, owner_id = company.id, owner.id
    db.session.expire_all()
    with count_statements(_db.engine) as statements:
        rows = inbox_rows(company_id, owner_id)
        identifiers = {issue.identifier for _card, issue in rows}  # the tasks came with the cards
        kinds = {card.kind for card, _issue in rows}
    assert len(rows) == len(SLUGS) and identifiers == {first.identifier, second.identifier}
    assert kinds == {"connection_intent"} and len(statements) == 1, statements
