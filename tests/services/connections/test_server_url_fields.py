"""A definition field marked `serverUrl` is the provider's MCP server address (Cognee's base URL, a credential field;
a custom server's URL, a tenant field), and provider `initialize` prose never becomes agent instructions.

Cognee is set up through the Apps setup form against a Cognee-like MCP peer on loopback (key in `X-Api-Key`,
`instructions` in its initialize result); the agent lists and calls its tools over the gateway.
"""

from __future__ import annotations

import asyncio

import pytest
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from sqlalchemy import select

from app.catalog.loader import get_app, template_default
from app.models import GrantSecret, HeartbeatRun, ToolConnection
from app.services.gateway import tools as gateway
from app.services.runs.snapshot import resolve_instructions_for_run
from tests.conftest import sign_in
from tests.doors import rpc
from tests.peers.mcp_servers import COGNEE_KEY, COGNEE_PROVIDER_INSTRUCTIONS, start_cognee_like_server
from tests.web.apps.test_apps_pages import post


@pytest.fixture
def cognee_server(mcp_server_factory):
    return mcp_server_factory(start_cognee_like_server)


@pytest.fixture
def acme(make):
    return make.team()


def cognee_form(base_url: str, key: str = COGNEE_KEY) -> dict:
    return {
        "method_key": "cloud-api-key",
        "identity": "organization",
        "credentials-COGNEE_BASE_URL": base_url,
        "credentials-COGNEE_API_KEY": key,
        "audience": "all",
    }


def test_cognee_connects_at_its_base_url_and_lists_its_tools(
    make, app, client, db, acme, cognee_server, monkeypatch
):
    company, owner, agent, issue = acme
    token = sign_in(client, owner)
    # The base URL is typed by a member: a loopback address is refused until the operator allow-lists the host.
    refused = post(client, token, "/apps/cognee/connect", cognee_form(cognee_server.url), htmx=False)
    assert "private or local address" in refused.get_data(as_text=True)
    assert cognee_server.requests == []
    monkeypatch.setitem(app.config, "OUTBOUND_ALLOWED_HOSTS", ["127.0.0.1"])

    response = post(client, token, "/apps/cognee/connect", cognee_form(cognee_server.url), htmx=False)
    assert response.status_code == 303, response.get_data(as_text=True)
    connection = db.session.scalars(select(ToolConnection).where(ToolConnection.status == "active")).one()
    assert response.headers["Location"] == f"/apps/{connection.id}/permissions?done=connected"
    assert (connection.app_slug, connection.enabled, connection.health_status) == ("cognee", True, "healthy")
    page = client.get(response.headers["Location"]).get_data(as_text=True)
    assert "<code>search</code>" in page and "<code>add</code>" in page
    assert {r.auth for r in cognee_server.requests} == {"ok"}  # verified with the key in X-Api-Key
    # The base URL is kept with the grant's credentials, encrypted; the connection's config does not carry it.
    assert {row.key for row in db.session.scalars(select(GrantSecret))} == {
        "COGNEE_BASE_URL",
        "COGNEE_API_KEY",
    }
    assert cognee_server.url not in str(connection.config)

    _run, run_token = make.run(agent, issue)
    prefix = gateway.connection_slug(connection.name)  # "Cognee 2": the refused attempt left a draft "Cognee"
    listed = rpc(client, run_token, "tools/list").json["result"]["tools"]
    assert {t["name"] for t in listed} >= {f"{prefix}__search", f"{prefix}__add"}
    called = rpc(
        client, run_token, "tools/call", {"name": f"{prefix}__search", "arguments": {"query": "roadmap"}}
    )
    assert called.json["result"]["isError"] is False, called.json
    assert cognee_server.calls == [("search", {"query": "roadmap"})]


def provider_instructions(url: str) -> str | None:
    """What the peer says in its initialize result, read with the official SDK client."""

    async def main():
        http = create_mcp_http_client(headers={"X-Api-Key": COGNEE_KEY})
        async with (
            http,
            streamable_http_client(url, http_client=http) as (read, write),
            ClientSession(read, write) as session,
        ):
            return (await session.initialize()).instructions

    return asyncio.run(asyncio.wait_for(main(), timeout=30))


def test_provider_initialize_instructions_are_never_adopted(
    make, app, client, db, acme, cognee_server, monkeypatch
):
    company, owner, agent, issue = acme
    assert provider_instructions(cognee_server.url) == COGNEE_PROVIDER_INSTRUCTIONS  # the peer does send them
    monkeypatch.setitem(app.config, "OUTBOUND_ALLOWED_HOSTS", ["127.0.0.1"])
    token = sign_in(client, owner)
    response = post(client, token, "/apps/cognee/connect", cognee_form(cognee_server.url), htmx=False)
    assert response.status_code == 303, response.get_data(as_text=True)
    connection = db.session.scalars(select(ToolConnection).where(ToolConnection.status == "active")).one()
    # The saved setting is the catalog template exactly: nothing of the provider's prose.
    assert connection.agent_instructions == template_default(get_app("cognee"))
    run, _token = make.run(agent, issue)
    snapshot = resolve_instructions_for_run(db.session.get(HeartbeatRun, run.id))
    assert snapshot is not None and get_app("cognee").agentInstructions.text in snapshot["text"]
    assert (
        "PROVIDER INSTRUCTIONS" not in snapshot["text"]
        and COGNEE_PROVIDER_INSTRUCTIONS not in snapshot["text"]
    )
    for text in (
        str(connection.agent_instructions),
        str(connection.config),
        connection.tool_search_text or "",
    ):
        assert "PROVIDER INSTRUCTIONS" not in text
    # A reconnect keeps the saved setting as it was.
    client.post(
        f"/apps/{connection.id}/reconnect",
        data={"credentials-COGNEE_API_KEY": COGNEE_KEY},
        headers={"X-CSRFToken": token},
    )
    db.session.expire_all()
    assert db.session.get(ToolConnection, connection.id).agent_instructions == template_default(
        get_app("cognee")
    )
