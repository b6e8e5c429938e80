"""An OAuth-protected MCP provider on the older HTTP+SSE transport, protected by the official SDK's own server auth.

The SDK's `MCPServer` serves `/sse` (GET, the event stream) and `/messages/` (POST) with `AuthSettings` and a
`TokenVerifier`: its bearer middleware answers a request without a valid token with 401 and `WWW-Authenticate:
Bearer ... resource_metadata="..."`, publishes RFC 9728 protected-resource metadata naming the issuer, and accepts
only tokens issued for this server (`validate_token_resource`, RFC 8707). The verifier asks the issuer's
introspection endpoint (RFC 7662) about each token. Like every SDK server, `/sse` takes only GET: a POST there is 405.

A recording layer in front logs each request's method, path and outcome (never a token; accepted tokens only as
SHA-256 fingerprints). With `metadata_path` set it plays a front proxy that publishes the metadata document only at
that path (the standard well-known addresses answer 404) and names it in the 401 challenges, so a client can find it
only through the challenge (RFC 9728 section 5).

    server = start_sse_oauth_mcp_server(issuer="http://127.0.0.1:9090", introspection_client=("id", "secret"))
    ...  # server.url is the event stream (/sse); server.requests, server.accepted_token_digests
    server.stop()
"""

from __future__ import annotations

import json
import logging
import socket
from collections.abc import Callable
from typing import Any

import httpx
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from mcp.server.mcpserver import MCPServer

from tests.peers.mcp_servers import RequestRecord, _send_json
from tests.peers.oauth_mcp import INTROSPECTION_TIMEOUT, AcceptedTokens

WELL_KNOWN_RESOURCE = "/.well-known/oauth-protected-resource"


class IntrospectionVerifier:
    """The SDK's `TokenVerifier` protocol, answered by the issuer's introspection endpoint."""

    def __init__(self, owner: SseOAuthMcpServer):
        self.owner = owner

    async def verify_token(self, token: str) -> AccessToken | None:
        try:
            async with httpx.AsyncClient(timeout=INTROSPECTION_TIMEOUT) as client:
                response = await client.post(
                    f"{self.owner.issuer}/token/introspection",
                    data={"token": token},
                    auth=self.owner.introspection_client,
                )
            info = response.json() if response.status_code == 200 else {}
        except (httpx.HTTPError, json.JSONDecodeError):
            return None
        if info.get("active") is not True:
            return None
        audience = info.get("aud")
        audiences = [a for a in (audience if isinstance(audience, list) else [audience]) if a]
        # The SDK compares `resource` with its resource_server_url; for a list, the entry naming this server.
        resource = self.owner.url if self.owner.url in audiences else (audiences[0] if audiences else None)
        return AccessToken(
            token=token,
            client_id=str(info.get("client_id") or ""),
            scopes=str(info.get("scope") or "").split(),
            expires_at=info.get("exp"),
            resource=resource,
            subject=info.get("sub"),
        )


class _RecordingGate:
    """Records what reached the SDK app and how it answered; optionally moves the metadata document."""

    def __init__(self, app: Any, owner: SseOAuthMcpServer):
        self.app = app
        self.owner = owner

    async def __call__(self, scope: dict, receive: Callable, send: Callable) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        method, path = scope["method"], scope["path"]
        moved = self.owner.metadata_path
        if path.startswith("/.well-known/"):
            self.owner._record_request(RequestRecord(method, path, "metadata"))
            if moved is not None:
                await _send_json(send, 404, {"error": "not_found"})
                return
            await self.app(scope, receive, send)
            return
        if moved is not None and path == moved:
            # Served by the SDK's own metadata handler, found under its standard address.
            self.owner._record_request(RequestRecord(method, path, "metadata"))
            await self.app(
                {**scope, "path": self.owner.standard_metadata_path, "raw_path": b""}, receive, send
            )
            return
        headers = {key.decode("latin-1").lower(): value.decode("latin-1") for key, value in scope["headers"]}
        scheme, _, token = headers.get("authorization", "").partition(" ")
        token = token.strip() if scheme.lower() == "bearer" else ""

        async def recording_send(message: dict) -> None:
            if message["type"] == "http.response.start":
                status = message["status"]
                if status == 401:
                    outcome = "wrong" if token else "missing"
                    if moved is not None:
                        message = {**message, "headers": self.owner._moved_challenge(message["headers"])}
                elif status < 400:
                    outcome = "ok" if token else "not-required"
                    if token:
                        self.owner._accept(token)
                else:
                    outcome = f"http {status}"
                # Recorded when the answer starts: an event stream's answer lasts as long as the stream.
                self.owner._record_request(RequestRecord(method, path, outcome))
            await send(message)

        await self.app(scope, receive, recording_send)


class SseOAuthMcpServer(AcceptedTokens):
    """A docs-like MCP server on HTTP+SSE whose SDK auth trusts tokens the issuer's introspection calls active."""

    def __init__(
        self,
        name: str,
        *,
        issuer: str,
        introspection_client: tuple[str, str],
        metadata_path: str | None = None,
    ):
        super().__init__(name, transport="sse")
        self.issuer = issuer.rstrip("/")
        self.introspection_client = introspection_client
        self.metadata_path = metadata_path
        # The resource URL (and so the SDK's settings) names the port: reserve one before building the server.
        self.port = _free_port()
        root_handlers, root_level = list(logging.root.handlers), logging.root.level
        self.mcp = MCPServer(
            name,
            log_level="WARNING",
            warn_on_duplicate_tools=False,
            token_verifier=IntrospectionVerifier(self),
            auth=AuthSettings(
                issuer_url=self.issuer,
                resource_server_url=self.url,
                validate_token_resource=True,
            ),
        )
        logging.root.handlers[:] = root_handlers
        logging.root.setLevel(root_level)

    @property
    def standard_metadata_path(self) -> str:
        return f"{WELL_KNOWN_RESOURCE}/sse"

    @property
    def resource_metadata_url(self) -> str:
        """Where the 401 challenges say the metadata is."""
        return f"{self.base_url}{self.metadata_path or self.standard_metadata_path}"

    def _moved_challenge(self, headers: list) -> list:
        standard = f"{self.base_url}{self.standard_metadata_path}".encode()
        moved = self.resource_metadata_url.encode()
        return [
            (key, value.replace(standard, moved) if key.lower() == b"www-authenticate" else value)
            for key, value in headers
        ]

    def _gate(self, app: Any) -> Any:
        """The SDK checks the tokens itself; this layer only records (and may move the metadata)."""
        return _RecordingGate(app, self)

    def start(self, port: int = 0) -> SseOAuthMcpServer:
        super().start(port or self.port)
        return self


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def start_sse_oauth_mcp_server(
    *, issuer: str, introspection_client: tuple[str, str], metadata_path: str | None = None
) -> SseOAuthMcpServer:
    """Tools: search_docs (read-only) and create_doc (write), as on the Streamable HTTP OAuth peer."""
    server = SseOAuthMcpServer(
        "sse-oauth-docs",
        issuer=issuer,
        introspection_client=introspection_client,
        metadata_path=metadata_path,
    )

    def search_docs(query: str) -> list[str]:
        server.record_call("search_docs", {"query": query})
        return [f"doc about {query}"]

    def create_doc(title: str) -> dict[str, str]:
        server.record_call("create_doc", {"title": title})
        return {"id": "d1", "title": title}

    server.add_tool(search_docs, description="Search documents.", read_only=True)
    server.add_tool(create_doc, description="Create a document.", read_only=False, destructive=False)
    return server.start()
