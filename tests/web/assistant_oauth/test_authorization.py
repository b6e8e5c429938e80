"""The assistants' authorization server through its doors (issue 29): registration, consent, code + PKCE S256, the
resource binding, rotation with reuse detection, revocation; and the gateway accepting the token as the person's
assistant agent under the existing rules."""

from __future__ import annotations

from sqlalchemy import select

from app.models import ActivityLog, Agent, HeartbeatRun
from app.models.assistants import AssistantGrant, AssistantToken
from tests.conftest import count_statements
from tests.doors import bearer, rpc
from tests.peers.mcp_servers import NOTES_KEY
from tests.services.gateway import test_gateway
from tests.services.gateway.test_gateway import connect
from tests.web.assistant_oauth.flow import (
    REDIRECT,
    RESOURCE,
    authorize_query,
    code_from,
    consent,
    exchange,
    pkce,
    refresh,
    register,
    sign_in_assistant,
)

world = test_gateway.world


def tool_names(client, token) -> set[str]:
    listed = rpc(client, token, "tools/list")
    assert listed.status_code == 200, listed.json
    return {tool["name"] for tool in listed.json["result"]["tools"]}


def test_a_consented_assistant_is_an_agent_of_its_person_and_uses_the_gateway(db, world):
    connect(world, "github", NOTES_KEY, name="Notes")
    client_id, tokens = sign_in_assistant(world.client, world.company.id)
    assert tokens["token_type"] == "Bearer" and tokens["expires_in"] == 900
    assert tokens["access_token"].startswith("sba_") and tokens["refresh_token"].startswith("sbr_")
    assert tokens["scope"] == "gateway"
    grant = db.session.scalars(select(AssistantGrant)).one()
    agent = db.session.get(Agent, grant.agent_id)
    assert agent.name == f"Claude Code ({world.owner.name})" and agent.company_id == world.company.id
    run = db.session.get(HeartbeatRun, grant.run_id)
    assert (run.status, run.invocation_source, run.responsible_user_id) == (
        "running",
        "assistant",
        world.owner.id,
    )
    # Stored hashed only.
    stored = db.session.scalars(select(AssistantToken)).one()
    assert tokens["access_token"] not in (stored.access_token_hash, stored.refresh_token_hash)
    assert stored.resource == RESOURCE
    names = tool_names(world.client, tokens["access_token"])
    assert "notes__search_notes" in names
    called = rpc(
        world.client,
        tokens["access_token"],
        "tools/call",
        {"name": "notes__search_notes", "arguments": {"query": "release"}},
    )
    assert called.status_code == 200 and called.json["result"].get("isError") is not True
    db.session.expire_all()
    acted = db.session.scalars(select(ActivityLog).where(ActivityLog.agent_id == agent.id)).all()
    assert {"assistant.connected", "tool_gateway.call"} <= {row.action for row in acted}


def test_the_runtime_door_refuses_an_assistant_token(db, world):
    _client_id, tokens = sign_in_assistant(world.client, world.company.id)
    response = world.client.post(
        "/runtime-tools/connections/search", json={"query": ""}, headers=bearer(tokens["access_token"])
    )
    assert response.status_code == 401


def test_pkce_is_required_and_s256_only(db, world):
    client_id = register(world.client)["client_id"]
    for extra in (
        {},
        {"code_challenge": "a" * 43, "code_challenge_method": "plain"},
        {"code_challenge": "a" * 43},
    ):
        url = authorize_query(client_id, None, **extra)
        refused = world.client.get(url)
        assert refused.status_code == 302
        params = code_from(refused)
        assert params["error"] == "invalid_request" and params["state"] == "st4te"
    # A code exchanged without its verifier is refused too.
    verifier, challenge = pkce()
    params = code_from(consent(world.client, authorize_query(client_id, challenge), world.company.id))
    missing = exchange(world.client, client_id, params["code"], "")
    assert missing.status_code == 400 and missing.json["error"] == "invalid_request"
    wrong = exchange(world.client, client_id, params["code"], pkce()[0])
    assert wrong.status_code == 400 and wrong.json["error"] == "invalid_grant"


def test_a_mismatched_redirect_uri_is_never_redirected_to(db, world):
    client_id = register(world.client)["client_id"]
    _verifier, challenge = pkce()
    page = world.client.get(authorize_query(client_id, challenge, redirect="http://127.0.0.1:9/elsewhere"))
    assert page.status_code == 400 and "Location" not in page.headers
    assert "redirect" in page.get_data(as_text=True).lower()
    verifier, challenge = pkce()
    params = code_from(consent(world.client, authorize_query(client_id, challenge), world.company.id))
    other = exchange(
        world.client, client_id, params["code"], verifier, redirect="http://127.0.0.1:8765/other"
    )
    assert other.status_code == 400 and other.json["error"] == "invalid_grant"


def test_a_reused_code_is_refused_and_revokes_what_it_gave(db, world):
    client_id = register(world.client)["client_id"]
    verifier, challenge = pkce()
    params = code_from(consent(world.client, authorize_query(client_id, challenge), world.company.id))
    first = exchange(world.client, client_id, params["code"], verifier)
    assert first.status_code == 200
    again = exchange(world.client, client_id, params["code"], verifier)
    assert again.status_code == 400 and again.json["error"] == "invalid_grant"
    assert rpc(world.client, first.json["access_token"], "tools/list").status_code == 401


def test_refresh_rotates_and_a_reused_refresh_token_revokes_the_family(db, world):
    client_id, tokens = sign_in_assistant(world.client, world.company.id)
    rotated = refresh(world.client, client_id, tokens["refresh_token"])
    assert rotated.status_code == 200
    assert rotated.json["refresh_token"] != tokens["refresh_token"]
    assert tool_names(world.client, rotated.json["access_token"]) is not None
    reused = refresh(world.client, client_id, tokens["refresh_token"])
    assert reused.status_code == 400 and reused.json["error"] == "invalid_grant"
    # The whole family is gone: the newest access and refresh tokens too.
    assert rpc(world.client, rotated.json["access_token"], "tools/list").status_code == 401
    newest = refresh(world.client, client_id, rotated.json["refresh_token"])
    assert newest.status_code == 400 and newest.json["error"] == "invalid_grant"


def test_a_token_for_another_resource_is_refused(db, world):
    client_id = register(world.client)["client_id"]
    verifier, challenge = pkce()
    other = "https://other.example/mcp"
    refused = world.client.get(authorize_query(client_id, challenge, resource=other))
    assert code_from(refused)["error"] == "invalid_target"
    params = code_from(consent(world.client, authorize_query(client_id, challenge), world.company.id))
    wrong = exchange(world.client, client_id, params["code"], verifier, resource=other)
    assert wrong.status_code == 400 and wrong.json["error"] == "invalid_target"
    ok = exchange(world.client, client_id, params["code"], verifier)
    assert ok.status_code == 200
    swapped = refresh(world.client, client_id, ok.json["refresh_token"], resource=other)
    assert swapped.status_code == 400 and swapped.json["error"] == "invalid_target"


def test_revocation_ends_the_tokens(db, world):
    client_id, tokens = sign_in_assistant(world.client, world.company.id)
    revoked = world.client.post("/revoke", data={"token": tokens["refresh_token"], "client_id": client_id})
    assert revoked.status_code == 200
    assert rpc(world.client, tokens["access_token"], "tools/list").status_code == 401
    assert refresh(world.client, client_id, tokens["refresh_token"]).status_code == 400


def test_plain_http_is_refused_except_on_loopback(db, world):
    response = world.client.post(
        "/token", data={"grant_type": "refresh_token"}, base_url="http://switchboard.example"
    )
    assert response.status_code == 400
    assert response.json == {"error": "invalid_request", "error_description": "HTTPS is required."}


def test_consent_needs_a_signed_in_member_and_csrf(db, world, app):
    client_id = register(world.client)["client_id"]
    _verifier, challenge = pkce()
    url = authorize_query(client_id, challenge)
    anonymous = app.test_client()
    page = anonymous.get(url)
    assert page.status_code == 302 and "/login" in page.headers["Location"]
    no_csrf = world.client.post(url, data={"company_id": str(world.company.id), "decision": "allow"})
    assert no_csrf.status_code == 400 and "Location" not in no_csrf.headers
    assert db.session.scalars(select(AssistantGrant)).first() is None


def test_a_client_of_another_company_cannot_be_pinned_there(db, world, make):
    other = make.company("Globex")
    client_id = register(world.client)["client_id"]
    _verifier, challenge = pkce()
    refused = consent(world.client, authorize_query(client_id, challenge), other.id)
    assert refused.status_code == 403 and "Location" not in refused.headers
    assert db.session.scalars(select(AssistantGrant)).first() is None


def test_deny_sends_access_denied(db, world):
    client_id = register(world.client)["client_id"]
    _verifier, challenge = pkce()
    denied = consent(world.client, authorize_query(client_id, challenge), world.company.id, decision="deny")
    params = code_from(denied)
    assert params["error"] == "access_denied" and params["state"] == "st4te"
    assert denied.headers["Location"].startswith(REDIRECT)


def test_an_assistant_token_costs_one_statement_more_than_a_run_token(db, world):
    """The token, its grant and its session run's status come back in one statement; nothing else is added."""
    connect(world, "github", NOTES_KEY, name="Notes")
    _client_id, tokens = sign_in_assistant(world.client, world.company.id)
    params = {"name": "notes__search_notes", "arguments": {"query": "release"}}
    counts = {}
    for token in (world.token, tokens["access_token"]):
        rpc(world.client, token, "tools/call", params)  # warm: listings, last use
        with count_statements(db.engine) as listed:
            rpc(world.client, token, "tools/list")
        with count_statements(db.engine) as called:
            rpc(world.client, token, "tools/call", params)
        counts[token] = (len(listed), len(called))
    run_list, run_call = counts[world.token]
    assert counts[tokens["access_token"]] == (run_list + 1, run_call + 1)


def test_an_expired_access_token_is_refused_and_the_refresh_token_gets_a_new_one(db, world):
    client_id, tokens = sign_in_assistant(world.client, world.company.id)
    stored = db.session.scalars(select(AssistantToken)).one()
    stored.access_expires_at = stored.created_at  # as if 15 minutes had passed
    db.session.commit()
    refused = rpc(world.client, tokens["access_token"], "tools/list")
    assert refused.status_code == 401
    assert refused.headers["WWW-Authenticate"] == (
        'Bearer error="invalid_token", '
        'resource_metadata="http://127.0.0.1:5000/.well-known/oauth-protected-resource/mcp/gateway"'
    )
    renewed = refresh(world.client, client_id, tokens["refresh_token"])
    assert renewed.status_code == 200
    assert rpc(world.client, renewed.json["access_token"], "tools/list").status_code == 200
