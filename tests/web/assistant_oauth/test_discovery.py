"""Discovery for MCP clients (issue 29): the gateway's 401 names its protected-resource metadata (RFC 9728), which
names Switchboard as the authorization server, whose metadata (RFC 8414) lists the endpoints. Whole documents."""

from __future__ import annotations

BASE = "http://127.0.0.1:5000"  # PUBLIC_BASE_URL in the test configuration

PROTECTED_RESOURCE = {
    "resource": f"{BASE}/mcp/gateway",
    "authorization_servers": [BASE],
    "bearer_methods_supported": ["header"],
    "scopes_supported": ["gateway"],
    "resource_name": "Switchboard tool gateway",
}

AUTHORIZATION_SERVER = {
    "issuer": BASE,
    "authorization_endpoint": f"{BASE}/authorize",
    "token_endpoint": f"{BASE}/token",
    "registration_endpoint": f"{BASE}/register",
    "revocation_endpoint": f"{BASE}/revoke",
    "device_authorization_endpoint": f"{BASE}/device_authorization",
    "scopes_supported": ["gateway"],
    "response_types_supported": ["code"],
    "response_modes_supported": ["query"],
    "grant_types_supported": [
        "authorization_code",
        "refresh_token",
        "urn:ietf:params:oauth:grant-type:device_code",
    ],
    "code_challenge_methods_supported": ["S256"],
    "token_endpoint_auth_methods_supported": ["none", "client_secret_post", "client_secret_basic"],
    "revocation_endpoint_auth_methods_supported": ["none", "client_secret_post", "client_secret_basic"],
    "client_id_metadata_document_supported": True,
    "authorization_response_iss_parameter_supported": True,
}


def test_the_gateway_401_points_at_its_protected_resource_metadata(client):
    response = client.post("/mcp/gateway", json={"jsonrpc": "2.0", "id": 1, "method": "initialize"})
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == (
        f'Bearer resource_metadata="{BASE}/.well-known/oauth-protected-resource/mcp/gateway"'
    )


def test_protected_resource_metadata_at_both_well_known_urls(client):
    for path in (
        "/.well-known/oauth-protected-resource/mcp/gateway",
        "/.well-known/oauth-protected-resource",
    ):
        response = client.get(path)
        assert response.status_code == 200 and response.mimetype == "application/json"
        assert response.json == PROTECTED_RESOURCE


def test_authorization_server_metadata(client):
    response = client.get("/.well-known/oauth-authorization-server")
    assert response.status_code == 200 and response.mimetype == "application/json"
    assert response.json == AUTHORIZATION_SERVER


def test_the_metadata_follows_public_base_url_not_the_host_header(app, client):
    response = client.get("/.well-known/oauth-authorization-server", headers={"Host": "evil.example"})
    assert response.json["issuer"] == BASE
