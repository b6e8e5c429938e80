"""The addresses an MCP client discovers: the gateway as a protected resource (RFC 9728) and Switchboard as its
authorization server (RFC 8414). All are built from PUBLIC_BASE_URL, never from the request's Host header, so a
client is never sent elsewhere by a forged host."""

from __future__ import annotations

from flask import current_app

GATEWAY_PATH = "/mcp/gateway"
PROTECTED_RESOURCE_PATH = "/.well-known/oauth-protected-resource"
AUTHORIZATION_SERVER_PATH = "/.well-known/oauth-authorization-server"
# What a consented assistant may ask for; the consent page's read-only choice narrows what it gets, not the scope.
SCOPE = "gateway"
DEVICE_GRANT_TYPE = "urn:ietf:params:oauth:grant-type:device_code"


def issuer() -> str:
    return str(current_app.config["PUBLIC_BASE_URL"]).rstrip("/")


def gateway_resource() -> str:
    """The one resource tokens are issued for (RFC 8707): the gateway's canonical URL."""
    return issuer() + GATEWAY_PATH


def resource_metadata_url() -> str:
    return issuer() + PROTECTED_RESOURCE_PATH + GATEWAY_PATH


def protected_resource_metadata() -> dict:
    return {
        "resource": gateway_resource(),
        "authorization_servers": [issuer()],
        "bearer_methods_supported": ["header"],
        "scopes_supported": [SCOPE],
        "resource_name": "Switchboard tool gateway",
    }


def authorization_server_metadata() -> dict:
    base = issuer()
    return {
        "issuer": base,
        "authorization_endpoint": f"{base}/authorize",
        "token_endpoint": f"{base}/token",
        "registration_endpoint": f"{base}/register",
        "revocation_endpoint": f"{base}/revoke",
        "device_authorization_endpoint": f"{base}/device_authorization",
        "scopes_supported": [SCOPE],
        "response_types_supported": ["code"],
        "response_modes_supported": ["query"],
        "grant_types_supported": ["authorization_code", "refresh_token", DEVICE_GRANT_TYPE],
        "code_challenge_methods_supported": ["S256"],
        "token_endpoint_auth_methods_supported": ["none", "client_secret_post", "client_secret_basic"],
        "revocation_endpoint_auth_methods_supported": ["none", "client_secret_post", "client_secret_basic"],
        "client_id_metadata_document_supported": True,
        "authorization_response_iss_parameter_supported": True,
    }
