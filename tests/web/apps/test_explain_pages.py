"""The explainer on the connection's page and the agent's page, and the dry run on the connection's page: the
fragment to htmx, the whole page without JavaScript, refusals for other companies and bad input."""

from __future__ import annotations

import re

import pytest

from app.services.gateway.arguments import canonical_digest
from tests.conftest import csrf_token_for, sign_in

HX = {"HX-Request": "true"}


@pytest.fixture
def page(make, client, db):
    company, owner, agent, _issue = make.team()
    csrf = sign_in(client, owner)
    connection = make.connection(
        company, name="Notion", grants=[("organization", None)], tools={"search": "allow", "drop": "block"}
    )
    return company, owner, agent, connection, csrf


def test_the_connection_page_explains_and_answers_htmx_with_the_fragment(client, page):
    company, owner, agent, connection, _csrf = page
    html = client.get(f"/apps/{connection.id}/permissions").get_data(as_text=True)
    assert "Why can’t an agent use it?" in html and 'id="explain-form"' in html

    fragment = client.get(
        f"/apps/{connection.id}/permissions/explain?agent={agent.id}&tool=drop", headers=HX
    ).get_data(as_text=True)
    assert "<html" not in fragment and fragment.lstrip().startswith('<div id="access-explanation"')
    assert 'data-first-failure="policy"' in fragment
    assert (
        "Builder can&#39;t use drop on Notion: An administrator blocked drop for agents on this connection."
        in (fragment)
    )
    assert re.search(r'data-check="quarantine" data-status="pass"', fragment)

    full = client.get(f"/apps/{connection.id}/permissions/explain?agent={agent.id}")
    assert full.status_code == 200
    assert "<html" in full.get_data(as_text=True) and "Ready: Builder can use Notion." in full.get_data(
        as_text=True
    )


def test_the_agent_page_explains(client, make, page):
    company, owner, agent, connection, _csrf = page
    hidden = make.connection(
        company, name="Hidden", grants=[("organization", None)], installed=False, tools={"a": None}
    )
    html = client.get(f"/agents/{agent.id}/instructions").get_data(as_text=True)
    assert "Why can’t Builder use a connection?" in html and f'value="{hidden.id}"' in html
    fragment = client.get(f"/agents/{agent.id}/access?connection={hidden.id}", headers=HX).get_data(
        as_text=True
    )
    assert "<html" not in fragment and 'data-first-failure="audience"' in fragment
    full = client.get(f"/agents/{agent.id}/access?connection={hidden.id}").get_data(as_text=True)
    assert "<html" in full and "Builder can&#39;t use Hidden: The connection is not installed" in full


def test_explainers_refuse_other_companies(client, make, page):
    company, owner, agent, connection, _csrf = page
    other_company = make.company("Other Co")
    stranger = make.agent(other_company, "Stranger")
    elsewhere = make.connection(other_company, name="Elsewhere", grants=[("organization", None)])
    assert client.get(f"/apps/{connection.id}/permissions/explain?agent={stranger.id}").status_code == 404
    assert client.get(f"/apps/{connection.id}/permissions/explain").status_code == 404
    assert client.get(f"/agents/{agent.id}/access?connection={elsewhere.id}").status_code == 404
    assert client.get(f"/agents/{agent.id}/access?connection=nope").status_code == 404
    assert client.get(f"/apps/{elsewhere.id}/permissions/explain?agent={agent.id}").status_code == 404


def test_the_dry_run_on_the_connection_page(client, page):
    company, owner, agent, connection, csrf = page
    url = f"/apps/{connection.id}/permissions/dry-run"
    form = {"csrf_token": csrf, "agent": str(agent.id), "tool": "search", "arguments": '{"q": "x"}'}
    fragment = client.post(url, data=form, headers=HX)
    text = fragment.get_data(as_text=True)
    assert fragment.status_code == 200 and "<html" not in text
    assert 'data-decision="allowed"' in text and canonical_digest({"q": "x"}) in text

    blocked = client.post(url, data={**form, "tool": "drop"}, headers=HX).get_data(as_text=True)
    assert 'data-decision="blocked"' in blocked

    bad = client.post(url, data={**form, "arguments": "[1, 2]"}, headers=HX)
    assert bad.status_code == 422 and "Arguments must be a JSON object" in bad.get_data(as_text=True)
    not_json = client.post(url, data={**form, "arguments": "{nope"})
    assert not_json.status_code == 422 and "<html" in not_json.get_data(as_text=True)
    assert "{nope" in not_json.get_data(as_text=True)  # the draft is kept
    assert client.post(url, data={**form, "csrf_token": "wrong"}).status_code == 400
    assert csrf_token_for(client)  # still signed in
