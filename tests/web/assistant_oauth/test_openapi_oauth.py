"""The OpenAPI document describes the OAuth doors MCP clients use (issue 29)."""

from __future__ import annotations


def test_the_oauth_endpoints_are_documented(client):
    paths = client.get("/api/openapi.json").json["paths"]
    expected = {
        ("/authorize", "get"),
        ("/authorize", "post"),
        ("/token", "post"),
        ("/register", "post"),
        ("/revoke", "post"),
        ("/device_authorization", "post"),
        ("/.well-known/oauth-authorization-server", "get"),
        ("/.well-known/oauth-protected-resource", "get"),
        ("/.well-known/oauth-protected-resource/mcp/gateway", "get"),
    }
    assert {(p, m) for p, m in expected if m in paths.get(p, {})} == expected
    register = paths["/register"]["post"]
    assert register["security"] == [] and set(register["responses"]) == {"201", "400", "429", "503"}
    token = paths["/token"]["post"]["responses"]["200"]["content"]["application/json"]["schema"]
    assert token == {"$ref": "#/components/schemas/TokenAnswer"}
    assert paths["/authorize"]["get"]["security"] == [{"session": []}]
