"""The catalog tells the truth before the click (issue 27 item 2): apps this installation cannot connect are marked
"Needs setup by an admin" (with what the admin sets) and refused before any draft; connected apps say so and by whom;
a submit without its key leaves no draft; the Connections list shows whose each connection is and filters on it."""

from __future__ import annotations

import re
from html import unescape

import pytest
from sqlalchemy import func, select

from app.models import ToolConnection
from tests.conftest import sign_in
from tests.web.apps import test_apps_pages
from tests.web.apps.test_apps_pages import html, post

SETTING = "SWITCHBOARD_OAUTH_CLIENTS"
# The Apps pages' fixture: Honcho pointed at its real MCP peer (its requests are counted).
honcho_peer = test_apps_pages.providers


def _text(markup: str) -> str:
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", markup)).split())


def _card(body: str, slug: str) -> str:
    heading = body.index(f'<h2 id="app-{slug}">')
    start = body.rindex('<article class="app-card">', 0, heading)
    return body[start : body.index("</article>", heading)]


def _count_connections(db) -> int:
    return db.session.scalar(select(func.count()).select_from(ToolConnection))


@pytest.fixture
def no_operator_clients(app):
    saved = app.config.get("OAUTH_CLIENTS")
    app.config["OAUTH_CLIENTS"] = {}
    yield app.config
    app.config["OAUTH_CLIENTS"] = saved


def test_an_app_without_an_operator_client_is_marked_before_the_click(client, acme, no_operator_clients):
    _company, _owner, member, *_ = acme
    sign_in(client, member)
    slack = _card(html(client.get("/apps?q=slack")), "slack")
    assert _text(slack).endswith(
        "Needs setup by an admin The person who runs this Switchboard adds an OAuth client for Slack (the "
        f"{SETTING} setting). Details"
    )
    assert ">Connect<" not in slack
    # Notion registers its own client (RFC 7591): it can be connected here, and says nothing of the kind.
    notion = _card(html(client.get("/apps?q=notion")), "notion")
    assert "Needs setup" not in notion and ">Connect</a>" in notion

    no_operator_clients["OAUTH_CLIENTS"] = {"slack": {"client_id": "operator-slack-client"}}
    slack = _card(html(client.get("/apps?q=slack")), "slack")
    assert "Needs setup" not in slack and ">Connect</a>" in slack


def test_the_setup_page_says_so_and_a_submit_leaves_no_draft(client, db, acme, no_operator_clients):
    _company, _owner, member, *_ = acme
    token = sign_in(client, member)
    page = html(client.get("/apps/slack/connect"))
    notice = re.search(
        r'<div class="alert alert-warning" role="note" id="setup-flow-needs-admin">(.*?)</div>', page, re.S
    )
    assert notice and _text(notice.group(1)) == (
        "Slack needs setup by an admin. Sign-in with Slack needs an OAuth client that the person who runs this "
        f"Switchboard adds (the {SETTING} setting). Until then it can’t be connected here."
    )
    assert re.search(r'<button type="submit" aria-describedby="oauth-sign-in-note" disabled>', page)

    response = post(
        client,
        token,
        "/apps/slack/connect",
        {"method_key": "mcp-oauth", "identity": "user", "audience": "all"},
        htmx=False,
    )
    assert response.status_code == 422
    assert "Slack sign-in is not set up on this Switchboard yet." in html(response)
    assert _count_connections(db) == 0


def test_a_submit_without_its_key_leaves_no_draft(client, db, acme, honcho_peer):
    _company, _owner, member, *_ = acme
    token = sign_in(client, member)
    response = post(
        client,
        token,
        "/apps/honcho/connect",
        {
            "method_key": "mcp-api-key",
            "identity": "user",
            "credentials-authorization": "   ",
            "config-workspaceId": "team-workspace",
            "audience": "all",
        },
        htmx=False,
    )
    assert response.status_code == 422
    assert "API key is required" in html(response)
    assert _count_connections(db) == 0
    assert honcho_peer.requests == []


def test_connected_apps_say_by_whom(client, make, acme):
    company, owner, member, *_ = acme
    sign_in(client, member)
    make.connection(company, slug="honcho", grants=[("user", member)])
    make.connection(company, slug="linear", grants=[("user", owner)])
    make.connection(company, slug="github", grants=[("organization", None), ("user", member)])
    body = html(client.get("/apps"))
    assert "Connected by you" in _text(_card(body, "honcho"))
    assert "Connected by a teammate" in _text(_card(body, "linear"))
    assert "Connected for the organization" in _text(_card(body, "github"))
    assert _text(_card(body, "github")).endswith("Connect another")
    assert "Connected" not in _text(_card(body, "notion"))


def test_the_connections_list_shows_whose_each_is_and_filters(client, db, make, acme):
    company, owner, member, *_ = acme
    sign_in(client, member)
    make.connection(company, slug="honcho", name="My memory", grants=[("user", member)])
    make.connection(company, slug="linear", name="Owner's Linear", grants=[("user", owner)])
    make.connection(company, slug="github", name="Company GitHub", grants=[("organization", None)])
    draft = make.connection(company, slug="notion", name="My Notion draft", installed=False)
    draft.status, draft.enabled, draft.created_by_user_id = "draft", False, member.id
    db.session.commit()

    def listed(query: str = "") -> dict[str, str]:
        body = html(client.get(f"/connections{query}"))
        rows = re.findall(
            r"<tr>\s*<td><a href=\"/apps/[^\"]+/permissions\">([^<]+)</a></td>(.*?)</tr>", body, re.S
        )
        return {unescape(name): _text(rest).split(" ")[0] for name, rest in rows}

    everything = listed()
    assert everything == {
        "Company GitHub": "GitHub",
        "My Notion draft": "Notion",
        "My memory": "Honcho",
        "Owner's Linear": "Linear",
    }
    body = _text(html(client.get("/connections")))
    assert "Company GitHub GitHub Organization" in body
    assert "My memory Honcho You" in body
    assert f"Owner's Linear Linear {owner.name}" in body
    assert "My Notion draft Notion You" in body
    assert "4 of 4 connections" in body

    assert set(listed("?owner=mine")) == {"My memory", "My Notion draft"}
    assert set(listed("?owner=organization")) == {"Company GitHub"}
    assert set(listed("?status=draft")) == {"My Notion draft"}
    assert set(listed("?status=active&owner=mine")) == {"My memory"}
    assert set(listed("?status=bogus&owner=bogus")) == set(everything)
    none = _text(html(client.get("/connections?status=disconnected")))
    assert "0 of 4 connections" in none and "No connection matches these filters. Show all" in none
