"""CORS for browser-based MCP clients: the discovery documents and the OAuth endpoints allow any origin without
credentials; the tool gateway keeps its Origin check (a foreign origin is refused, a preflight too) and names back an
origin it accepts."""

from __future__ import annotations

import pytest

from tests.doors import bearer
from tests.services.gateway import test_gateway
from tests.web.assistant_oauth.flow import sign_in_assistant

world = test_gateway.world
WEB_CLIENT = "https://inspector.example"
OURS = "http://127.0.0.1:5000"  # PUBLIC_BASE_URL's origin in the test configuration


def preflight(client, path: str, origin: str, method: str = "POST", headers: str = "content-type"):
    return client.options(
        path,
        headers={
            "Origin": origin,
            "Access-Control-Request-Method": method,
            "Access-Control-Request-Headers": headers,
        },
    )


PUBLIC_PATHS = [
    ("/.well-known/oauth-protected-resource/mcp/gateway", "GET"),
    ("/.well-known/oauth-protected-resource", "GET"),
    ("/.well-known/oauth-authorization-server", "GET"),
    ("/token", "POST"),
    ("/register", "POST"),
    ("/revoke", "POST"),
    ("/device_authorization", "POST"),
]


@pytest.mark.parametrize(("path", "method"), PUBLIC_PATHS)
def test_the_public_oauth_doors_answer_a_preflight_from_any_origin(client, path, method):
    answer = preflight(client, path, WEB_CLIENT, method, "authorization, content-type")
    assert answer.status_code == 204
    assert answer.headers["Access-Control-Allow-Origin"] == "*"
    assert method in answer.headers["Access-Control-Allow-Methods"]
    assert (
        answer.headers["Access-Control-Allow-Headers"] == "Authorization, Content-Type, MCP-Protocol-Version"
    )
    assert "Access-Control-Allow-Credentials" not in answer.headers


def test_the_public_oauth_doors_answer_with_cors_headers(client):
    metadata = client.get("/.well-known/oauth-authorization-server", headers={"Origin": WEB_CLIENT})
    assert metadata.status_code == 200 and metadata.headers["Access-Control-Allow-Origin"] == "*"
    registered = client.post(
        "/register",
        json={"client_name": "Web Inspector", "redirect_uris": ["https://inspector.example/callback"]},
        headers={"Origin": WEB_CLIENT},
    )
    assert registered.status_code == 201 and registered.headers["Access-Control-Allow-Origin"] == "*"
    refused = client.post("/token", data={"grant_type": "password"}, headers={"Origin": WEB_CLIENT})
    assert refused.status_code in (400, 401)  # the browser client can read OAuth's error
    assert refused.headers["Access-Control-Allow-Origin"] == "*"
    assert "Access-Control-Allow-Credentials" not in refused.headers
    # Without an Origin (not a browser) nothing is added.
    assert "Access-Control-Allow-Origin" not in client.get("/.well-known/oauth-authorization-server").headers


def test_the_gateway_refuses_a_foreign_origin_even_at_preflight(client):
    answer = preflight(client, "/mcp/gateway", WEB_CLIENT, "POST", "authorization, content-type")
    assert answer.status_code == 403
    assert "Access-Control-Allow-Origin" not in answer.headers


def test_the_gateway_names_back_an_origin_it_accepts(db, world, app):
    allowed = preflight(
        world.client, "/mcp/gateway", OURS, "POST", "authorization, content-type, mcp-session-id"
    )
    assert allowed.status_code == 204
    assert allowed.headers["Access-Control-Allow-Origin"] == OURS and "Origin" in allowed.headers["Vary"]
    assert "Mcp-Session-Id" in allowed.headers["Access-Control-Allow-Headers"]
    assert "Access-Control-Allow-Credentials" not in allowed.headers
    saved = app.config["AGENT_ALLOWED_ORIGINS"]
    app.config["AGENT_ALLOWED_ORIGINS"] = [WEB_CLIENT]
    try:
        anonymous = app.test_client()
        challenge = anonymous.post(
            "/mcp/gateway", json={"jsonrpc": "2.0", "id": 1, "method": "ping"}, headers={"Origin": WEB_CLIENT}
        )
        assert challenge.status_code == 401
        assert challenge.headers["Access-Control-Allow-Origin"] == WEB_CLIENT
        assert "WWW-Authenticate" in challenge.headers["Access-Control-Expose-Headers"]
        _client_id, tokens = sign_in_assistant(world.client, world.company.id)
        listed = anonymous.post(
            "/mcp/gateway",
            json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
            headers={**bearer(tokens["access_token"]), "Origin": WEB_CLIENT},
        )
        assert listed.status_code == 200 and listed.headers["Access-Control-Allow-Origin"] == WEB_CLIENT
    finally:
        app.config["AGENT_ALLOWED_ORIGINS"] = saved
