"""The Actions table: one partial renders the page's rows and the row a policy save returns, the same markup."""

from __future__ import annotations

import re

from tests.conftest import sign_in
from tests.web.apps.test_apps_pages import honcho_connection, html, post

TOKEN = re.compile(r'(name="csrf_token" value=")[^"]+"')
SAVED = '<small class="muted" role="status">Saved</small>'


def same_token(text: str) -> str:
    return TOKEN.sub(r'\1TOKEN"', text)


def test_the_saved_row_is_the_row_the_page_shows(client, db, make, acme):
    company, owner, *_ = acme
    tools = [("save_memory", True), ("search_memory", False), ("delete_memory", True)]
    connection = honcho_connection(db, make, company, owner, tools=tools)
    token = sign_in(client, owner)
    saved = html(
        post(
            client, token, f"/apps/{connection.id}/tools/policy", {"tool": "search_memory", "action": "block"}
        )
    )
    assert saved.count("<tr ") == 1 and SAVED in saved
    page = same_token(html(client.get(f"/apps/{connection.id}/permissions")))
    assert page.count('<tr id="tool-') == 3
    row = same_token(saved.replace(SAVED, ""))
    assert row.startswith('\n\n<tr id="tool-') and row in page
    assert '<option value="block" selected>Block</option>' in row


def test_a_viewer_sees_each_tool_policy_as_text(client, db, make, acme):
    company, owner, _member, viewer, _agent = acme
    connection = honcho_connection(
        db, make, company, owner, tools=[("save_memory", True), ("search_memory", False)]
    )
    sign_in(client, viewer)
    page = html(client.get(f"/apps/{connection.id}/permissions"))
    assert page.count('<tr id="tool-') == 2
    assert "/tools/policy" not in page and 'name="action"' not in page
