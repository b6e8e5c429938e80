"""Connected assistants (issue 29): the person sees theirs, owners and admins see the company's; Disconnect revokes
every token at once; a viewer's assistant is read-only; the device grant for CLIs; the assistant's token cannot
approve."""

from __future__ import annotations

import re
import uuid

from sqlalchemy import select

from app.models import Agent, ConnectionTool, HeartbeatRun, ThreadInteraction
from app.models.assistants import AssistantGrant
from tests.conftest import count_statements, sign_in
from tests.doors import bearer, refusal_fields, rpc
from tests.peers.mcp_servers import HONCHO_KEY, NOTES_KEY
from tests.services.gateway import test_gateway
from tests.services.gateway.test_gateway import approve, connect
from tests.web.assistant_oauth.flow import CSRF_RE, RESOURCE, refresh, register, sign_in_assistant

world = test_gateway.world


def test_the_person_sees_and_disconnects_their_assistant(db, world):
    client_id, tokens = sign_in_assistant(world.client, world.company.id)
    assert rpc(world.client, tokens["access_token"], "tools/list").status_code == 200
    page = world.client.get("/settings/assistants")
    html = page.get_data(as_text=True)
    assert page.status_code == 200 and "Claude Code" in html and "Read and write" in html
    grant = db.session.scalars(select(AssistantGrant)).one()
    assert grant.last_used_at is not None
    csrf = CSRF_RE.search(html).group(1)
    missing_csrf = world.client.post(f"/settings/assistants/{grant.id}/disconnect")
    assert missing_csrf.status_code == 400
    done = world.client.post(f"/settings/assistants/{grant.id}/disconnect", data={"csrf_token": csrf})
    assert done.status_code == 303
    assert rpc(world.client, tokens["access_token"], "tools/list").status_code == 401
    assert refresh(world.client, client_id, tokens["refresh_token"]).status_code == 400
    db.session.expire_all()
    grant = db.session.get(AssistantGrant, grant.id)
    assert grant.disconnected_at is not None
    assert db.session.get(HeartbeatRun, grant.run_id).status == "cancelled"
    assert db.session.get(Agent, grant.agent_id).status == "paused"
    assert "No assistants connected." in world.client.get("/settings/assistants").get_data(as_text=True)


def test_owners_see_every_assistant_and_members_only_theirs(db, world, make, app):
    member = make.member(world.company, "member")
    member_client = app.test_client()
    sign_in(member_client, member)
    sign_in_assistant(member_client, world.company.id)
    sign_in_assistant(world.client, world.company.id)
    with count_statements(db.engine) as statements:
        owner_page = world.client.get("/settings/assistants").get_data(as_text=True)
    assert owner_page.count("Disconnect</button>") == 2 and member.name in owner_page
    assert (
        sum("assistant_grants" in s for s in statements) == 1
    )  # one statement for the list, whatever its length
    member_page = member_client.get("/settings/assistants").get_data(as_text=True)
    assert member_page.count("Disconnect</button>") == 1
    owners_grant = db.session.scalars(
        select(AssistantGrant).where(AssistantGrant.user_id == world.owner.id)
    ).one()
    csrf = CSRF_RE.search(member_page).group(1)
    refused = member_client.post(
        f"/settings/assistants/{owners_grant.id}/disconnect", data={"csrf_token": csrf}
    )
    assert refused.status_code == 404
    members_grant = db.session.scalars(
        select(AssistantGrant).where(AssistantGrant.user_id == member.id)
    ).one()
    csrf = CSRF_RE.search(owner_page).group(1)
    assert (
        world.client.post(
            f"/settings/assistants/{members_grant.id}/disconnect", data={"csrf_token": csrf}
        ).status_code
        == 303
    )


def test_an_owner_of_another_company_cannot_disconnect(db, world, make, app):
    sign_in_assistant(world.client, world.company.id)
    grant = db.session.scalars(select(AssistantGrant)).one()
    other_company = make.company("Globex")
    stranger = make.member(other_company, "owner")
    stranger_client = app.test_client()
    csrf = sign_in(stranger_client, stranger)
    refused = stranger_client.post(f"/settings/assistants/{grant.id}/disconnect", data={"csrf_token": csrf})
    assert refused.status_code == 404
    assert db.session.get(AssistantGrant, grant.id).disconnected_at is None


def test_a_read_only_assistant_is_refused_write_tools(db, world):
    connect(world, "honcho", HONCHO_KEY)
    _client_id, tokens = sign_in_assistant(world.client, world.company.id, read_only=True)
    token = tokens["access_token"]
    listed = {t["name"] for t in rpc(world.client, token, "tools/list").json["result"]["tools"]}
    assert "honcho__search_memory" in listed and "honcho__save_memory" not in listed
    read = rpc(
        world.client, token, "tools/call", {"name": "honcho__search_memory", "arguments": {"query": "x"}}
    )
    assert read.status_code == 200 and read.json["result"].get("isError") is not True
    write = rpc(
        world.client, token, "tools/call", {"name": "honcho__save_memory", "arguments": {"content": "x"}}
    )
    assert write.json["result"]["isError"] is True
    assert refusal_fields(write.json["result"])["reasonCode"] == "read_only_assistant"


def test_a_viewers_assistant_is_read_only(db, world, make, app):
    viewer = make.member(world.company, "viewer")
    viewer_client = app.test_client()
    sign_in(viewer_client, viewer)
    sign_in_assistant(viewer_client, world.company.id)  # the box was not ticked
    grant = db.session.scalars(select(AssistantGrant)).one()
    assert grant.read_only is True


def test_the_assistant_token_cannot_approve(db, world):
    connect(world, "honcho", HONCHO_KEY)
    _client_id, tokens = sign_in_assistant(world.client, world.company.id)
    token = tokens["access_token"]
    call = rpc(
        world.client, token, "tools/call", {"name": "honcho__save_memory", "arguments": {"content": "x"}}
    )
    approval_id = refusal_fields(call.json["result"])["approvalId"]
    anonymous = world.client.application.test_client()
    attempt = anonymous.post(
        f"/approvals/{approval_id}/approve", headers={**bearer(token), "HX-Request": "true"}
    )
    assert attempt.status_code == 400  # no session, no CSRF token: the bearer token is not a way in
    db.session.expire_all()
    card = db.session.get(ThreadInteraction, uuid.UUID(approval_id))
    assert card.status == "pending" and card.addressee_user_id == world.owner.id
    # The person finds the card in their Inbox and approves it there; the assistant's call then goes through.
    inbox = world.client.get("/api/me/inbox", headers={"X-CSRFToken": world.csrf})
    assert approval_id in inbox.get_data(as_text=True)
    assert approve(world, approval_id).status_code == 200
    again = rpc(
        world.client, token, "tools/call", {"name": "honcho__save_memory", "arguments": {"content": "x"}}
    )
    assert again.json["result"].get("isError") is not True, again.json


def test_device_code_sign_in_from_a_script(db, world, app):
    connect(world, "github", NOTES_KEY, name="Notes")
    client_id = register(
        world.client,
        name="Codex CLI",
        grant_types=["urn:ietf:params:oauth:grant-type:device_code", "refresh_token"],
    )["client_id"]
    script = app.test_client()  # the CLI: no browser session
    started = script.post("/device_authorization", data={"client_id": client_id, "resource": RESOURCE})
    assert started.status_code == 200
    device = started.json
    assert device["verification_uri"] == "http://127.0.0.1:5000/device" and device["interval"] == 5
    poll = {
        "grant_type": "urn:ietf:params:oauth:grant-type:device_code",
        "device_code": device["device_code"],
    }
    pending = script.post("/token", data={**poll, "client_id": client_id})
    assert pending.status_code == 400 and pending.json["error"] == "authorization_pending"
    # The person opens the verification page, signed in, and allows.
    page = world.client.get(f"/device?user_code={device['user_code']}")
    assert page.status_code == 200 and "Codex CLI" in page.get_data(as_text=True)
    csrf = CSRF_RE.search(page.get_data(as_text=True)).group(1)
    allowed = world.client.post(
        "/device",
        data={
            "csrf_token": csrf,
            "user_code": device["user_code"],
            "company_id": str(world.company.id),
            "decision": "allow",
        },
    )
    assert allowed.status_code == 200 and "is connected" in allowed.get_data(as_text=True)
    tokens = script.post("/token", data={**poll, "client_id": client_id})
    assert tokens.status_code == 200, tokens.json
    listed = rpc(script, tokens.json["access_token"], "tools/list")
    assert "notes__search_notes" in {t["name"] for t in listed.json["result"]["tools"]}
    again = script.post("/token", data={**poll, "client_id": client_id})
    assert again.status_code == 400  # a device code gives tokens once
    assert re.fullmatch(r"[A-Z]{4}-[A-Z]{4}", device["user_code"])


def test_a_viewers_assistant_reads_but_never_writes(db, world, make, app):
    connect(world, "honcho", HONCHO_KEY)
    viewer = make.member(world.company, "viewer")
    viewer_client = app.test_client()
    sign_in(viewer_client, viewer)
    _client_id, tokens = sign_in_assistant(viewer_client, world.company.id)
    token = tokens["access_token"]
    read = rpc(
        viewer_client, token, "tools/call", {"name": "honcho__search_memory", "arguments": {"query": "x"}}
    )
    assert read.status_code == 200 and read.json["result"].get("isError") is not True, read.json
    write = rpc(
        viewer_client, token, "tools/call", {"name": "honcho__save_memory", "arguments": {"content": "x"}}
    )
    assert refusal_fields(write.json["result"])["reasonCode"] == "read_only_assistant"


def test_a_read_only_assistant_lists_and_calls_by_the_stored_classification(db, world):
    """The provider's `readOnlyHint` and the stored classification can disagree (the hint changed since the tools
    were indexed, or a person reclassified a tool): what a read-only assistant sees and may call follows the stored
    one, in the listing and at the call alike."""
    connection = connect(world, "honcho", HONCHO_KEY)
    tools = {
        tool.name: tool
        for tool in db.session.scalars(
            select(ConnectionTool).where(ConnectionTool.connection_id == uuid.UUID(connection["id"]))
        )
    }
    search, save = tools["search_memory"], tools["save_memory"]
    search.is_write, save.is_write = True, False  # their entries still say readOnlyHint true / false
    db.session.commit()
    _client_id, tokens = sign_in_assistant(world.client, world.company.id, read_only=True)
    token = tokens["access_token"]
    entries = {t["name"]: t for t in rpc(world.client, token, "tools/list").json["result"]["tools"]}
    assert "honcho__search_memory" not in entries
    assert entries["honcho__save_memory"]["annotations"]["readOnlyHint"] is False  # listed all the same
    refused = rpc(
        world.client, token, "tools/call", {"name": "honcho__search_memory", "arguments": {"query": "x"}}
    )
    assert refusal_fields(refused.json["result"])["reasonCode"] == "read_only_assistant"
    allowed = rpc(
        world.client, token, "tools/call", {"name": "honcho__save_memory", "arguments": {"content": "x"}}
    )
    # Not refused as a write: it goes on to its action policy (ask first, as Honcho sets it for this tool).
    assert refusal_fields(allowed.json["result"])["reasonCode"] == "approval_required", allowed.json


def test_an_assistants_runtime_is_read_only(db, world):
    sign_in_assistant(world.client, world.company.id)
    grant = db.session.scalars(select(AssistantGrant)).one()
    page = world.client.get(f"/agents/{grant.agent_id}/runtime")
    html = page.get_data(as_text=True)
    assert page.status_code == 200
    assert (
        '<p id="assistant-runtime">This agent is a person&#39;s own assistant: it runs in their MCP client (Claude '
        "Code, Cursor, ChatGPT, ...), which signed in to Switchboard, so it has no adapter to change here.</p>"
    ) in html
    assert "Save runtime" not in html and 'name="adapter_type"' not in html
    csrf = CSRF_RE.search(html).group(1)  # the secrets form's: a crafted POST carries a valid token
    for adapter in ("claude_code", "manual"):
        crafted = world.client.post(
            f"/agents/{grant.agent_id}/runtime", data={"csrf_token": csrf, "adapter_type": adapter}
        )
        assert crafted.status_code == 403, adapter
    db.session.expire_all()
    assert db.session.get(Agent, grant.agent_id).adapter_type == "manual"
