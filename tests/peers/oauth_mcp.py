"""An OAuth-protected MCP provider: the official SDK behind a gate that accepts only bearer tokens from a real issuer.

The gate validates every bearer token with the issuer's introspection endpoint (RFC 7662, short timeout) and accepts
only tokens bound to this server's URL (RFC 8707 `aud`, as MCP authorization requires), answers a
missing or inactive token with 401 and `WWW-Authenticate: Bearer resource_metadata="..."`, and publishes RFC 9728
protected-resource metadata naming the issuer as its authorization server. It records each request's method, path
and outcome, and a SHA-256 fingerprint of every accepted token (never the token itself), so tests can tell which
access token the provider saw.

    server = start_oauth_mcp_server(issuer="http://127.0.0.1:9090", introspection_client=("id", "secret"))
    ...  # server.url is the MCP endpoint; server.accepted_token_digests lists fingerprints
    server.stop()
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Callable
from typing import Any

import httpx

from tests.peers.mcp_servers import RequestRecord, RunningMcpServer, _send_json

INTROSPECTION_TIMEOUT = 2.0
_START_TIMEOUT = 5.0


def token_digest(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


class AcceptedTokens(RunningMcpServer):
    """A peer that records fingerprints of the bearer tokens it accepted (never the tokens themselves)."""

    def __init__(self, *args: Any, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self._accepted: list[str] = []

    def _accept(self, token: str) -> None:
        with self._lock:
            self._accepted.append(token_digest(token))

    @property
    def accepted_token_digests(self) -> list[str]:
        with self._lock:
            return list(self._accepted)

    def reset(self) -> None:
        super().reset()
        with self._lock:
            self._accepted.clear()


class _IntrospectionGate:
    def __init__(self, app: Any, owner: OAuthMcpServer):
        self.app = app
        self.owner = owner

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        if path.startswith("/.well-known/oauth-protected-resource"):
            self.owner._record_request(RequestRecord(scope["method"], path, "metadata"))
            await _send_json(send, 200, self.owner.resource_metadata())
            return
        headers = {key.decode("latin-1").lower(): value.decode("latin-1") for key, value in scope["headers"]}
        scheme, _, token = headers.get("authorization", "").partition(" ")
        token = token.strip() if scheme.lower() == "bearer" else ""
        outcome = "missing"
        if token:
            outcome = "ok" if await self.owner._introspect(token) else "wrong"
        self.owner._record_request(RequestRecord(scope["method"], path, outcome))
        if outcome == "ok":
            self.owner._accept(token)
            await self.app(scope, receive, send)
            return
        challenge = f'Bearer resource_metadata="{self.owner.resource_metadata_url}"'
        if outcome == "wrong":
            challenge += ', error="invalid_token"'
        await _send_json(
            send,
            401,
            {"error": "invalid_token", "error_description": "A valid bearer token is required."},
            [(b"www-authenticate", challenge.encode())],
        )


class OAuthMcpServer(AcceptedTokens):
    """A notes-like MCP server whose gate trusts tokens the issuer's introspection endpoint calls active."""

    def __init__(self, name: str, *, issuer: str, introspection_client: tuple[str, str]):
        super().__init__(name)
        self.issuer = issuer.rstrip("/")
        self.introspection_client = introspection_client

    @property
    def resource_metadata_url(self) -> str:
        return f"{self.base_url}/.well-known/oauth-protected-resource/mcp"

    def resource_metadata(self) -> dict:
        return {
            "resource": self.url,
            "authorization_servers": [self.issuer],
            "bearer_methods_supported": ["header"],
        }

    async def _introspect(self, token: str) -> bool:
        try:
            async with httpx.AsyncClient(timeout=INTROSPECTION_TIMEOUT) as client:
                response = await client.post(
                    f"{self.issuer}/token/introspection",
                    data={"token": token},
                    auth=self.introspection_client,
                )
            info = response.json() if response.status_code == 200 else {}
        except (httpx.HTTPError, json.JSONDecodeError):
            return False
        # RFC 8707 / MCP authorization: only tokens issued for this server (its URL in `aud`) are accepted.
        audience = info.get("aud")
        audiences = audience if isinstance(audience, list) else [audience]
        return info.get("active") is True and self.url in audiences

    def _gate(self, app: Any) -> Any:
        """Bearer tokens are checked by introspection at the issuer instead of an API key."""
        return _IntrospectionGate(app, self)


def start_oauth_mcp_server(*, issuer: str, introspection_client: tuple[str, str]) -> OAuthMcpServer:
    """Tools: search_docs (read-only) and create_doc (write)."""
    server = OAuthMcpServer("oauth-docs", issuer=issuer, introspection_client=introspection_client)

    def search_docs(query: str) -> list[str]:
        server.record_call("search_docs", {"query": query})
        return [f"doc about {query}"]

    def create_doc(title: str) -> dict[str, str]:
        server.record_call("create_doc", {"title": title})
        return {"id": "d1", "title": title}

    server.add_tool(search_docs, description="Search documents.", read_only=True)
    server.add_tool(create_doc, description="Create a document.", read_only=False, destructive=False)
    return server.start()
