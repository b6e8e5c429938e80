"""Home's first-run orientation and waiting card, the Menu button's count, and the task list's title links
(issue 27 item 5, "Phone and orientation")."""

from __future__ import annotations

import re

from app.extensions import db as _db
from tests.conftest import count_statements, sign_in


def inbox_statements(statements: list[str]) -> list[str]:
    """The inbox count's aggregate (it reads the cards addressed to the person)."""
    return [s for s in statements if "thread_interactions" in s]


def test_a_fresh_company_home_says_what_switchboard_does_and_where_to_start(client, make):
    company = make.company("Acme")
    sign_in(client, make.member(company))
    page = client.get("/").get_data(as_text=True)
    assert '<h2 id="orientation-title">Start here</h2>' in page
    assert "Switchboard lets your AI agents use apps" in page
    assert '<a href="/apps">Connect an app</a>' in page
    assert '<a href="/agents">Set up an agent</a>' in page
    assert '<a href="/tasks">Give it a task</a>' in page


def test_the_orientation_goes_once_an_app_is_connected_in_this_company_only(client, make):
    company, other = make.company("Acme"), make.company("Beta")
    sign_in(client, make.member(company))
    make.connection(other)  # another company's connection does not count
    assert "orientation-title" in client.get("/").get_data(as_text=True)
    draft = make.connection(company)
    draft.status = "draft"  # set up but never verified: nothing is connected yet
    _db.session.commit()
    assert "orientation-title" in client.get("/").get_data(as_text=True)
    make.connection(company)
    assert "orientation-title" not in client.get("/").get_data(as_text=True)


def test_home_and_the_menu_show_a_waiting_card_from_one_inbox_statement(client, make):
    company = make.company("Acme")
    owner = make.member(company, "owner")
    agent = make.agent(company, "Builder")
    issue = make.issue(company, title="Launch notes", assignee=agent, responsible=owner)
    sign_in(client, owner)
    empty = client.get("/").get_data(as_text=True)
    assert "home-waiting" not in empty
    assert '<span id="menu-count"></span>' in empty
    make.card(issue, agent, owner, "notion")
    with count_statements(_db.engine) as statements:
        page = client.get("/").get_data(as_text=True)
    assert len(inbox_statements(statements)) == 1, statements
    menu = re.search(r'<button type="button" class="nav-toggle[^>]*>(.*?)</button>', page, re.S)
    assert menu is not None
    assert menu.group(1) == (
        'Menu<span id="menu-count"> <span class="badge inbox-count" aria-hidden="true">1</span>'
        '<span class="visually-hidden"> 1 waiting for you</span></span>'
    )
    assert '<p id="home-waiting-title"><span class="badge inbox-count">1</span>' in page
    assert "card is waiting for you: an agent needs you to connect an app or approve a step." in page
    assert '<a href="/inbox" role="button">Open the Inbox</a>' in page


def test_the_badge_poll_updates_the_menu_count_out_of_band(client, make):
    company = make.company("Acme")
    owner = make.member(company, "owner")
    agent = make.agent(company, "Builder")
    issue = make.issue(company, title="Launch notes", assignee=agent, responsible=owner)
    sign_in(client, owner)
    make.card(issue, agent, owner, "notion")
    html = client.get("/inbox/badge", headers={"HX-Request": "true"}).get_data(as_text=True)
    assert 'id="inbox-nav"' in html
    assert (
        '<span id="menu-count" hx-swap-oob="true"> <span class="badge inbox-count" aria-hidden="true">1</span>'
        '<span class="visually-hidden"> 1 waiting for you</span></span>'
    ) in html


def test_task_titles_link_to_their_task(client, make):
    company = make.company("Acme")
    sign_in(client, make.member(company))
    task = make.issue(company, title="Write the launch notes")
    page = client.get("/tasks").get_data(as_text=True)
    assert f'<td data-label="Title"><a href="/tasks/{task.id}">Write the launch notes</a></td>' in page
