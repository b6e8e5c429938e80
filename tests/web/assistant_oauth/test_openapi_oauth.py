"""The OpenAPI document describes the OAuth doors MCP clients use (issue 29)."""

from __future__ import annotations


def test_the_oauth_endpoints_are_documented(client):
    paths = client.get("/api/openapi.json").json["paths"]
    expected = {
        ("/token", "post"),
        ("/revoke", "post"),
        ("/device_authorization", "post"),
        ("/.well-known/oauth-authorization-server", "get"),
        ("/.well-known/oauth-protected-resource", "get"),
        ("/.well-known/oauth-protected-resource/mcp/gateway", "get"),
    }
    assert {(p, m) for p, m in expected if m in paths.get(p, {})} == expected
    device = paths["/device_authorization"]["post"]["responses"]["200"]["content"]["application/json"][
        "schema"
    ]
    assert device == {"$ref": "#/components/schemas/DeviceAuthorization"}
    assert paths["/revoke"]["post"]["security"] == []
    form = "application/x-www-form-urlencoded"
    bodies = {
        path: paths[path]["post"]["requestBody"]["content"][form]["schema"]
        for path in ("/token", "/revoke", "/device_authorization")
    }
    assert bodies == {
        "/token": {"$ref": "#/components/schemas/TokenRequest"},
        "/revoke": {"$ref": "#/components/schemas/RevocationRequest"},
        "/device_authorization": {"$ref": "#/components/schemas/DeviceAuthorizationRequest"},
    }
    schemas = client.get("/api/openapi.json").json["components"]["schemas"]
    grants = [schemas[ref["$ref"].rsplit("/", 1)[1]] for ref in schemas["TokenRequest"]["anyOf"]]
    assert [g["properties"]["grant_type"]["const"] for g in grants] == [
        "authorization_code",
        "refresh_token",
        "urn:ietf:params:oauth:grant-type:device_code",
    ]
    assert grants[0]["required"] == ["grant_type", "code", "redirect_uri", "code_verifier"]
    client_id = grants[0]["properties"]["client_id"]
    assert (
        client_id["type"] == "string" and "anyOf" not in client_id
    )  # absent or a string: a form has no null
    # OAuth ignores a parameter it does not know.
    assert grants[0]["additionalProperties"] == {"type": "string"}
    assert paths["/token"]["post"]["responses"]["200"]["content"]["application/json"]["schema"] == {
        "$ref": "#/components/schemas/TokenAnswer"
    }
    # A page a person's browser opens, and RFC 7591 metadata whose redirect URI rules no schema states: not described.
    assert "/register" not in paths and "/authorize" not in paths
