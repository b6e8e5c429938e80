"""An assistant's call that asks first: the approval card goes to the person's Inbox, and a client that declared URL-mode
elicitation (2025-11-25 `elicitation: {url: {}}`) is also pointed at the card's page; a client that did not declare it
gets the approval refusal only, and an agent that Switchboard runs is never elicited.

Real parts: the app on a loopback server, the official MCP Python SDK 2.x client (its elicitation callback makes it
declare form and URL modes), the Honcho peer whose `save_memory` asks first.
"""

from __future__ import annotations

import asyncio

import mcp_types
import pytest
from mcp import ClientSession, UrlElicitationRequiredError
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import MCPError
from sqlalchemy import select

from app.models import ThreadInteraction
from tests.conftest import serving
from tests.doors import refusal_fields
from tests.peers.mcp_servers import HONCHO_KEY
from tests.services.gateway import test_gateway
from tests.services.gateway.test_gateway import approve, connect
from tests.web.assistant_oauth.flow import sign_in_assistant

world = test_gateway.world
PUBLIC = "http://127.0.0.1:5000"  # PUBLIC_BASE_URL in the test configuration: the token's resource and the card's link


async def _accepts(context, params):
    return mcp_types.ElicitResult(action="accept")


async def save_memory(url: str, token: str, *, url_mode: bool) -> mcp_types.CallToolResult | MCPError:
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    callback = {"elicitation_callback": _accepts} if url_mode else {}
    async with (
        http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write, **callback) as session,
    ):
        await session.initialize()
        try:
            return await session.call_tool("honcho__save_memory", {"content": "remember the release"})
        except MCPError as error:
            return error


def call(app, token: str, *, url_mode: bool) -> mcp_types.CallToolResult | MCPError:
    with serving(app) as base:
        return asyncio.run(asyncio.wait_for(save_memory(f"{base}/mcp/gateway", token, url_mode=url_mode), 60))


def approval_cards(db) -> list[ThreadInteraction]:
    db.session.expire_all()
    return list(
        db.session.scalars(select(ThreadInteraction).where(ThreadInteraction.kind == "tool_approval"))
    )


def test_a_client_that_declared_url_elicitation_is_sent_to_the_approval_card(db, world, app):
    connect(world, "honcho", HONCHO_KEY)
    _client_id, tokens = sign_in_assistant(world.client, world.company.id)
    answer = call(app, tokens["access_token"], url_mode=True)
    assert isinstance(answer, MCPError) and answer.code == -32042, answer
    (card,) = approval_cards(db)
    assert card.status == "pending" and card.addressee_user_id == world.owner.id
    required = UrlElicitationRequiredError.from_error(
        mcp_types.ErrorData(code=answer.code, message=answer.message, data=answer.data)
    )
    assert (
        required.message
        == f"honcho__save_memory needs approval by the responsible person (approval id {card.id})."
    )
    (elicit,) = required.elicitations
    assert (elicit.mode, elicit.elicitation_id) == ("url", str(card.id))
    assert elicit.url == f"{PUBLIC}/tasks/{card.issue_id}#item-{card.id}"
    assert elicit.message == (
        f"Claude Code ({world.owner.name}) wants to call honcho__save_memory on Honcho, which asks first. Approve or deny it "
        "on this page (it is also in your Inbox), then retry the same call."
    )
    # The card is also in the person's Inbox; the page the URL names shows it to them.
    inbox = world.client.get("/api/me/inbox", headers={"X-CSRFToken": world.csrf})
    assert str(card.id) in inbox.get_data(as_text=True)
    page = world.client.get(f"/tasks/{card.issue_id}")
    assert page.status_code == 200 and f'id="item-{card.id}"' in page.get_data(as_text=True)
    # Approved there, the same call from the same client goes through once.
    assert approve(world, str(card.id)).status_code == 200
    again = call(app, tokens["access_token"], url_mode=True)
    assert isinstance(again, mcp_types.CallToolResult) and again.is_error is not True, again


def test_a_client_that_did_not_declare_it_gets_the_inbox_path_only(db, world, app):
    connect(world, "honcho", HONCHO_KEY)
    _client_id, tokens = sign_in_assistant(world.client, world.company.id)
    answer = call(app, tokens["access_token"], url_mode=False)
    assert isinstance(answer, mcp_types.CallToolResult) and answer.is_error is True, answer
    (card,) = approval_cards(db)
    refusal = refusal_fields(answer)
    assert refusal["reasonCode"] == "approval_required" and refusal["approvalId"] == str(card.id)
    inbox = world.client.get("/api/me/inbox", headers={"X-CSRFToken": world.csrf})
    assert str(card.id) in inbox.get_data(as_text=True)


def test_an_agent_switchboard_runs_is_not_elicited_for_an_approval(db, world, app):
    connect(world, "honcho", HONCHO_KEY)
    answer = call(app, world.token, url_mode=True)
    assert isinstance(answer, mcp_types.CallToolResult) and answer.is_error is True, answer
    (card,) = approval_cards(db)
    assert refusal_fields(answer)["approvalId"] == str(card.id)


@pytest.fixture(autouse=True)
def _public_base_url(app):
    assert app.config["PUBLIC_BASE_URL"] == PUBLIC
