"""URL-mode elicitation on the gateway: a call to a connection whose OAuth sign-in must be done again points a client
that declared `elicitation.url` at the connection card's page, and the card waits in the task as usual.

Real parts: our app on a loopback server, the local OpenID Provider and an MCP provider that accepts only its tokens
(as in tests/services/oauth/test_oauth.py), the official Python SDK 2.x client as the agent (its elicitation callback makes it
declare form and URL modes), and a signed-in `requests` session as the person's browser.
"""

from __future__ import annotations

import asyncio
from contextlib import asynccontextmanager

import mcp_types
import pytest
import requests
from mcp import ClientSession, UrlElicitationRequiredError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from sqlalchemy import select

from app.core import mcp_versions
from app.models import ThreadInteraction
from app.services.connections.endpoint import OAUTH_REFRESH_TOKEN_KEY
from app.services.connections.setup import _store_secret
from tests.doors import refusal_fields
from tests.services.oauth import test_oauth
from tests.services.oauth.test_oauth import Browser, _expire_access_token

# A live Switchboard with the OAuth peers, and a company with its owner (tests/services/oauth/test_oauth.py).
live = test_oauth.live
owner = test_oauth.owner

MESSAGE = (
    "Linear needs the task's responsible person to reconnect it before Builder can use it. They can do it on this "
    "page (a connection card is also waiting in the task)."
)


async def _accepts(context, params):
    return mcp_types.ElicitResult(action="accept")


@asynccontextmanager
async def agent(url, token, *, url_mode: bool, seen: list | None = None):
    """A Python SDK 2.x client session; `seen` collects the `Mcp-Session-Id` each of its requests carried."""
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    if seen is not None:

        async def record(request):
            seen.append(request.headers.get("mcp-session-id"))

        http.event_hooks["request"].append(record)
    callback = {"elicitation_callback": _accepts} if url_mode else {}
    async with (
        http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write, **callback) as session,
    ):
        await session.initialize()
        yield session


def _elicitation(error: MCPError) -> UrlElicitationRequiredError:
    assert error.code == -32042, (error.code, error.message)
    return UrlElicitationRequiredError.from_error(
        mcp_types.ErrorData(code=error.code, message=error.message, data=error.data)
    )


@pytest.fixture
def broken(live, owner, make, db, oidc, oauth_mcp):
    """An OAuth connection whose refresh the provider will refuse, an agent's live run on a task, the tool name."""
    company, user = owner
    browser = Browser(live, user)
    connection_id = browser.connect(company)
    agent_row = make.agent(company, "Builder", adapter_type="manual")
    issue = make.issue(company, status="in_progress", assignee=agent_row, responsible=user)
    run, token = make.run(agent_row, issue)
    gateway = f"{live}/mcp/gateway"
    listing = requests.post(
        gateway,
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Authorization": f"Bearer {token}"},
        timeout=10,
    ).json()
    name = next(t["name"] for t in listing["result"]["tools"] if t["name"].endswith("__search_docs"))
    grant = _expire_access_token(db, connection_id)
    _store_secret(grant, OAUTH_REFRESH_TOKEN_KEY, "revoked-or-unknown-refresh-token")
    db.session.commit()
    return {
        "gateway": gateway,
        "token": token,
        "name": name,
        "issue": issue,
        "user": user,
        "browser": browser,
        "company": company,
        "run": run,
    }


def _cards(db, issue):
    db.session.expire_all()
    return db.session.scalars(select(ThreadInteraction).where(ThreadInteraction.issue_id == issue.id)).all()


def test_a_url_mode_client_is_sent_to_the_card_and_the_card_waits_in_the_task(live, db, make, broken):
    async def scenario():
        errors = []
        async with agent(broken["gateway"], broken["token"], url_mode=True) as session:
            for _ in range(2):  # the refresh fails, then the connection is marked as needing attention
                with pytest.raises(MCPError) as caught:
                    await session.call_tool(broken["name"], {"query": "q"})
                errors.append(caught.value)
        return errors

    first, second = asyncio.run(asyncio.wait_for(scenario(), timeout=60))
    (card,) = _cards(db, broken["issue"])
    assert card.status == "pending" and card.addressee_user_id == broken["user"].id
    for error in (first, second):
        required = _elicitation(error)
        assert required.message == "Linear must be reconnected by the task's responsible person first."
        (elicit,) = required.elicitations
        assert (elicit.mode, elicit.elicitation_id, elicit.message) == ("url", str(card.id), MESSAGE)
        assert elicit.url == f"{live}/intents/{card.id}/dialog"  # the card's page: no secret in it
    # The page serves the addressee, signed in; anyone else is refused, a stranger is sent to sign in.
    page = broken["browser"].http.get(elicit.url, allow_redirects=False, timeout=10)
    assert page.status_code == 200
    assert f'id="intent-dialog-{card.id}-title">Connect Linear for Builder</' in page.text
    colleague = make.member(broken["company"], "admin")
    refused = Browser(live, colleague).http.get(elicit.url, allow_redirects=False, timeout=10)
    assert refused.status_code == 403
    stranger = requests.get(elicit.url, allow_redirects=False, timeout=10)
    assert (stranger.status_code, stranger.headers["Location"]) == (
        302,
        f"/login?next=/intents/{card.id}/dialog",
    )


def test_a_client_without_url_mode_gets_the_calls_own_answers(db, broken):
    async def scenario():
        async with agent(broken["gateway"], broken["token"], url_mode=False) as session:
            first = await session.call_tool(broken["name"], {"query": "q"})
            with pytest.raises(MCPError) as caught:
                await session.call_tool(broken["name"], {"query": "q"})
            return first, caught.value

    first, second = asyncio.run(asyncio.wait_for(scenario(), timeout=60))
    assert first.is_error is True and refusal_fields(first)["reasonCode"] == "provider_error"
    assert (second.code, second.message) == (-32602, f"Unknown tool: {broken['name']}")
    assert _cards(db, broken["issue"]) == []  # no card: the agent asks with connection_request, as before


def test_a_modern_request_declaring_url_mode_gets_input_required(live, db, broken):
    meta = {
        mcp_versions.META_PROTOCOL_VERSION: "2026-07-28",
        mcp_versions.META_CLIENT_CAPABILITIES: {"elicitation": {"url": {}}},
        mcp_versions.META_CLIENT_INFO: {"name": "test", "version": "1"},
    }
    body = {
        "jsonrpc": "2.0",
        "id": 4,
        "method": "tools/call",
        "params": {"name": broken["name"], "arguments": {"query": "q"}, "_meta": meta},
    }
    headers = {
        "Authorization": f"Bearer {broken['token']}",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": broken["name"],
    }
    answer = requests.post(broken["gateway"], json=body, headers=headers, timeout=30)
    (card,) = _cards(db, broken["issue"])
    assert answer.status_code == 200
    result = answer.json()["result"]
    assert result == {
        "resultType": "input_required",
        "inputRequests": {
            str(card.id): {
                "method": "elicitation/create",
                "params": {"mode": "url", "url": f"{live}/intents/{card.id}/dialog", "message": MESSAGE},
            }
        },
        "requestState": str(card.id),
        "_meta": {mcp_versions.META_SERVER_INFO: {"name": "switchboard-tool-gateway", "version": "1"}},
    }


def test_a_modern_request_without_url_mode_is_told_the_capability_it_lacks(db, broken):
    """Issue 34 item 3: 2026-07-28 says -32021 (missing required client capability), not "Unknown tool"."""
    meta = {
        mcp_versions.META_PROTOCOL_VERSION: "2026-07-28",
        mcp_versions.META_CLIENT_CAPABILITIES: {},
        mcp_versions.META_CLIENT_INFO: {"name": "test", "version": "1"},
    }
    headers = {
        "Authorization": f"Bearer {broken['token']}",
        "MCP-Protocol-Version": "2026-07-28",
        "Mcp-Method": "tools/call",
        "Mcp-Name": broken["name"],
    }

    def call(id_):
        body = {
            "jsonrpc": "2.0",
            "id": id_,
            "method": "tools/call",
            "params": {"name": broken["name"], "arguments": {"query": "q"}, "_meta": meta},
        }
        return requests.post(broken["gateway"], json=body, headers=headers, timeout=30)

    first = call(1)  # the refresh fails: the connection now needs its person, and the call says why
    assert (
        first.status_code == 200 and refusal_fields(first.json()["result"])["reasonCode"] == "provider_error"
    )
    second = call(2)  # the tool is no longer listed: its call needs URL-mode elicitation
    assert second.status_code == 200
    assert second.json()["error"] == {
        "code": -32021,
        "message": "Missing required client capability: elicitation (url mode). Linear must be reconnected by the "
        "task's responsible person first; a client that declares URL-mode elicitation is sent to the page to do it.",
        "data": {"requiredCapabilities": {"elicitation": {"url": {}}}},
    }
    assert _cards(db, broken["issue"]) == []  # nothing was opened for a client that cannot take the page


def test_two_clients_on_one_run_are_each_served_by_their_own_capabilities(db, broken):
    """Issue 34 item 3: a client that never declared URL-mode elicitation never gets -32042 because another client
    on the same run token did, whichever initialized last; the one that declared it gets its elicitation."""
    session_ids: dict[str, list] = {"plain": [], "url": []}

    async def scenario():
        async with (
            agent(broken["gateway"], broken["token"], url_mode=False, seen=session_ids["plain"]) as plain,
            agent(broken["gateway"], broken["token"], url_mode=True, seen=session_ids["url"]) as url_client,
        ):
            first = await plain.call_tool(
                broken["name"], {"query": "q"}
            )  # the refresh fails: needs its person
            answers = []
            for session in (plain, url_client, plain):
                with pytest.raises(MCPError) as caught:
                    await session.call_tool(broken["name"], {"query": "q"})
                answers.append(caught.value)
            return first, answers

    first, (plain_error, url_error, plain_again) = asyncio.run(asyncio.wait_for(scenario(), timeout=60))
    assert first.is_error is True and refusal_fields(first)["reasonCode"] == "provider_error"
    for error in (plain_error, plain_again):
        assert (error.code, error.message) == (-32602, f"Unknown tool: {broken['name']}")
    (card,) = _cards(db, broken["issue"])
    (elicit,) = _elicitation(url_error).elicitations
    assert (elicit.mode, elicit.elicitation_id) == ("url", str(card.id))
    # Only the client that declared elicitation was given a session, and it sent it back on every request.
    assert set(session_ids["plain"]) == {None}
    (url_session,) = set(session_ids["url"]) - {None}
    assert url_session.startswith("form-url.")


def test_url_mode_needs_a_revision_that_has_it_and_a_session_the_gateway_issued(db, broken):
    headers = {"Authorization": f"Bearer {broken['token']}"}

    def send(method, params, version=None, session=None):
        extra = {"MCP-Protocol-Version": version} if version else {}
        if session:
            extra["Mcp-Session-Id"] = session
        body = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params}
        return requests.post(broken["gateway"], json=body, headers={**headers, **extra}, timeout=30)

    init = {"protocolVersion": "2025-06-18", "capabilities": {"elicitation": {"url": {}}}, "clientInfo": {}}
    opened = send("initialize", init)
    assert opened.json()["result"]["protocolVersion"] == "2025-06-18"
    session = opened.headers["Mcp-Session-Id"]
    assert session.startswith("url.")
    call = {"name": broken["name"], "arguments": {"query": "q"}}
    answer = send("tools/call", call, "2025-06-18", session).json()  # URL mode came with 2025-11-25
    assert refusal_fields(answer["result"])["reasonCode"] == "provider_error"
    assert _cards(db, broken["issue"]) == []
    # No session, or a session that does not carry URL mode: the tool is unknown to this client.
    plain = send("initialize", {**init, "protocolVersion": "2025-11-25", "capabilities": {}})
    assert "Mcp-Session-Id" not in plain.headers
    assert send("tools/call", call, "2025-11-25").json()["error"]["code"] == -32602
    form_only = send("initialize", {**init, "capabilities": {"elicitation": {}}}).headers["Mcp-Session-Id"]
    assert form_only.startswith("form.")
    assert send("tools/call", call, "2025-11-25", form_only).json()["error"]["code"] == -32602
    # A session id the gateway did not issue for this run is a session it does not know.
    modes, nonce, tag = session.split(".")
    forged = [f"form-url.{nonce}.{tag}", f"{modes}.{nonce}x.{tag}", "url", form_only[:-2]]
    for bad in forged:
        refused = send("tools/call", call, "2025-11-25", bad)
        assert refused.status_code == 404
        assert refused.json() == {
            "jsonrpc": "2.0",
            "id": 1,
            "error": {"code": -32600, "message": "Session not found"},
        }
    assert send("initialize", init, session=forged[0]).status_code == 200  # a new session starts afresh
    assert _cards(db, broken["issue"]) == []
    assert send("tools/call", call, "2025-11-25", session).json()["error"]["code"] == -32042


def test_a_session_is_bound_to_its_run(db, broken, make):
    other_run, other_token = make.run(broken["run"].agent, broken["issue"])
    init = {"protocolVersion": "2025-11-25", "capabilities": {"elicitation": {"url": {}}}, "clientInfo": {}}
    body = {"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": init}
    opened = requests.post(
        broken["gateway"], json=body, headers={"Authorization": f"Bearer {other_token}"}, timeout=30
    )
    session = opened.headers["Mcp-Session-Id"]
    listing = {"jsonrpc": "2.0", "id": 2, "method": "tools/list"}
    for token, status in ((other_token, 200), (broken["token"], 404)):
        headers = {
            "Authorization": f"Bearer {token}",
            "Mcp-Session-Id": session,
            "MCP-Protocol-Version": "2025-11-25",
        }
        assert (
            requests.post(broken["gateway"], json=listing, headers=headers, timeout=30).status_code == status
        )
