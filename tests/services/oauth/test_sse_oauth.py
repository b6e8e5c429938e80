"""OAuth sign-in for a method marked `transport: sse`, end to end with real parts: our app on a live loopback server,
the real OpenID Provider (npm `oidc-provider`: dynamic registration, PKCE, resource indicators, refresh), and an MCP
provider on the older HTTP+SSE transport protected by the official SDK's own server auth (`tests/peers/sse_oauth_mcp`).

The app definition is an operator's own (the extra catalog folder): one method, `transport: sse`, `auth: oauth`,
with dynamic client registration, its server URL the peer's event stream. Discovery must ask that URL with the GET
an event stream takes (a POST there is 405 at every SDK server); one peer publishes its protected-resource metadata
only where its 401 challenge says, so the sign-in works only if the challenge is read.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from sqlalchemy import func, select

from app.catalog.loader import ingest_definitions
from app.core.errors import ProviderRefused
from app.models import ActivityLog, OAuthClientRegistration
from app.services.connections.endpoint import OAUTH_ACCESS_TOKEN_KEY, OAUTH_REFRESH_TOKEN_KEY, stored_secrets
from app.services.oauth import discovery
from app.services.oauth import tokens as oauth_tokens
from tests.conftest import serving
from tests.peers.mcp_servers import RequestRecord, RunningMcpServer
from tests.peers.oauth_mcp import OAuthMcpServer, token_digest
from tests.peers.oidc_fixtures import MCP_RESOURCE_CLIENT
from tests.peers.sse_oauth_mcp import SseOAuthMcpServer, start_sse_oauth_mcp_server
from tests.services.oauth.test_oauth import Browser, _connection, _expire_access_token, _grant

APP_SLUG = "legacy-docs"
METHOD_KEY = "sse-oauth"
MOVED_METADATA_PATH = "/oauth/resource-metadata"


def definition(server_url: str) -> dict:
    return {
        "schemaVersion": 1,
        "slug": APP_SLUG,
        "name": "Legacy Docs",
        "description": "Documents served over the older HTTP+SSE transport, signed in with OAuth.",
        "categories": ["docs"],
        "branding": {"logoUrl": "/static/img/apps/custom.svg"},
        "docsUrl": "https://docs.example.test/mcp",
        "methods": [
            {
                "key": METHOD_KEY,
                "label": "Sign in (SSE)",
                "transport": "sse",
                "auth": "oauth",
                "grantKinds": ["user", "organization"],
                "defaults": {"serverUrl": server_url, "dynamicClientRegistration": True},
            }
        ],
    }


# -- the peers -----------------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def sse_oauth_servers(oidc_provider) -> Iterator[dict[str, SseOAuthMcpServer]]:
    """Two SSE peers trusting the session's issuer: one with the SDK's standard metadata address, one whose
    metadata only its 401 challenge names."""
    servers = {
        "standard": start_sse_oauth_mcp_server(
            issuer=oidc_provider.issuer, introspection_client=MCP_RESOURCE_CLIENT
        ),
        "moved": start_sse_oauth_mcp_server(
            issuer=oidc_provider.issuer,
            introspection_client=MCP_RESOURCE_CLIENT,
            metadata_path=MOVED_METADATA_PATH,
        ),
    }
    try:
        yield servers
    finally:
        for server in servers.values():
            server.stop()


@pytest.fixture(params=["standard", "moved"])
def peer(request, sse_oauth_servers) -> SseOAuthMcpServer:
    server = sse_oauth_servers[request.param]
    server.reset()
    return server


@pytest.fixture
def moved_peer(sse_oauth_servers) -> SseOAuthMcpServer:
    server = sse_oauth_servers["moved"]
    server.reset()
    return server


@pytest.fixture
def live(app, db, tmp_path, peer, oidc, real_catalog_restored) -> Iterator[str]:
    """Our app on a free loopback port, its catalog holding the SSE app definition that points at `peer` (a
    definition's URL passes the outbound guard, so the operator allow-lists loopback)."""
    extra = tmp_path / "catalog-extra"
    extra.mkdir()
    (extra / f"{APP_SLUG}.json").write_text(json.dumps(definition(peer.url)), encoding="utf-8")
    keys = ("PUBLIC_BASE_URL", "OAUTH_CLIENTS", "CATALOG_EXTRA_DIR", "OUTBOUND_ALLOWED_HOSTS")
    saved = {key: app.config.get(key) for key in keys}
    app.config.update(CATALOG_EXTRA_DIR=str(extra), OAUTH_CLIENTS={}, OUTBOUND_ALLOWED_HOSTS=["127.0.0.1"])
    ingest_definitions()
    db.session.commit()
    with serving(app) as base:
        app.config["PUBLIC_BASE_URL"] = base
        try:
            yield base
        finally:
            app.config.update(saved)


class SseBrowser(Browser):
    """The person's browser from the Streamable HTTP tests, connecting the SSE app's method."""

    def create_draft(self, company, identity: str = "user", **extra) -> str:
        return super().create_draft(
            company, identity, **{"appSlug": APP_SLUG, "methodKey": METHOD_KEY, **extra}
        )


@pytest.fixture
def owner(make):
    company = make.company()
    return company, make.member(company, "owner")


def _metadata_path(server: SseOAuthMcpServer) -> str:
    return urlsplit(server.resource_metadata_url).path


# -- discovery -----------------------------------------------------------------------------------------------------

# The peers are on loopback: discovery reaches them as the operator's hosts (as PROVIDER_SERVER_URLS would make them).
OPERATOR_LOOPBACK = frozenset({"127.0.0.1"})


def test_sse_discovery_gets_the_event_stream_and_reads_the_challenge(db, peer, oidc):
    server = discovery.discover_authorization_server(peer.url, "sse", OPERATOR_LOOPBACK)
    assert (server.issuer, server.authorization_endpoint, server.token_endpoint) == (
        oidc.issuer,
        f"{oidc.issuer}/auth",
        f"{oidc.issuer}/token",
    )
    assert server.registration_endpoint == f"{oidc.issuer}/reg"
    # One GET of the event stream (401: no token), then the metadata the challenge names: never a POST to /sse.
    assert peer.requests == [
        RequestRecord("GET", "/sse", "missing"),
        RequestRecord("GET", _metadata_path(peer), "metadata"),
    ]


def test_without_the_transport_the_moved_metadata_is_missed(db, moved_peer):
    """What discovery did for SSE methods before it knew the transport: the initialize POST is 405 at an SSE
    server, the standard metadata addresses are 404 here, and the server is not an authorization server."""
    with pytest.raises(ProviderRefused):
        discovery.discover_authorization_server(moved_peer.url, "mcp_remote", OPERATOR_LOOPBACK)
    assert moved_peer.requests[0] == RequestRecord("POST", "/sse", "http 405")
    assert RequestRecord("GET", MOVED_METADATA_PATH, "metadata") not in moved_peer.requests


def test_streamable_http_discovery_still_posts_an_initialize(db, oauth_mcp: OAuthMcpServer, oidc):
    server = discovery.discover_authorization_server(oauth_mcp.url, "mcp_remote", OPERATOR_LOOPBACK)
    assert server.issuer == oidc.issuer
    assert [(r.method, r.path, r.auth) for r in oauth_mcp.requests] == [
        ("POST", "/mcp", "missing"),
        ("GET", "/.well-known/oauth-protected-resource/mcp", "metadata"),
    ]


def test_an_open_event_stream_gives_no_hint(db, mcp_server_factory):
    """A server that needs no token opens the stream (200): the probe reads no event and finds no hint."""
    open_sse: RunningMcpServer = mcp_server_factory(_start_open_sse_server)
    assert discovery._resource_metadata_hint(open_sse.url, "sse", OPERATOR_LOOPBACK) is None
    assert open_sse.requests == [RequestRecord("GET", "/sse", "not-required")]


def _start_open_sse_server() -> RunningMcpServer:
    server = RunningMcpServer("open-sse", transport="sse")
    server.add_tool(lambda: "pong", name="ping", description="Answer pong.", read_only=True)
    return server.start()


# -- the sign-in ---------------------------------------------------------------------------------------------------


def test_sign_in_over_sse_registers_authorizes_exchanges_and_indexes(live, owner, db, oidc, peer):
    company, user = owner
    browser = SseBrowser(live, user)
    connection_id = browser.create_draft(company)
    authorization_url = browser.start(connection_id)

    assert authorization_url.startswith(f"{oidc.issuer}/auth?")
    query = parse_qs(urlsplit(authorization_url).query)
    assert query["code_challenge_method"] == ["S256"]
    assert query["redirect_uri"] == [f"{live}/oauth/callback"]
    assert query["resource"] == [peer.url]  # RFC 8707: the token is for the event stream's server
    assert oidc.stats()["registrations"] == 1  # RFC 7591, at the issuer the peer's metadata names
    assert peer.requests == [
        RequestRecord("GET", "/sse", "missing"),
        RequestRecord("GET", _metadata_path(peer), "metadata"),
    ]

    response = browser.callback(browser.authorize(authorization_url))
    assert response.status_code == 303, response.text
    assert response.headers["Location"].endswith(f"/apps/{connection_id}/permissions?done=connected")

    connection = _connection(db, connection_id)
    assert (connection.status, connection.enabled, connection.health_status) == ("active", True, "healthy")
    assert connection.provider_account_label == "alice@example.test"
    grant = _grant(db, connection_id)
    assert grant.status == "active"
    assert grant.provider_tenant["resource"] == peer.url
    secrets = stored_secrets(grant)
    assert set(secrets) == {OAUTH_ACCESS_TOKEN_KEY, OAUTH_REFRESH_TOKEN_KEY}
    assert oidc.token_requests("authorization_code") == 1
    # The tools were indexed over SSE with the stored token: the SDK's bearer check let exactly it through.
    assert peer.accepted_token_digests and set(peer.accepted_token_digests) == {
        token_digest(secrets[OAUTH_ACCESS_TOKEN_KEY])
    }
    indexing = peer.requests[2:]
    assert indexing[0] == RequestRecord("GET", "/sse", "ok")
    assert {(r.method, r.path, r.auth) for r in indexing} == {
        ("GET", "/sse", "ok"),
        ("POST", "/messages/", "ok"),
    }
    tools = browser.http.get(f"{live}/api/tool-connections/{connection_id}", timeout=10).json()["tools"]
    assert {t["name"] for t in tools} == {"search_docs", "create_doc"}
    actions = list(
        db.session.scalars(select(ActivityLog.action).where(ActivityLog.entity_id == connection_id))
    )
    assert "tool_app.oauth_connected" in actions


def test_a_second_sign_in_reuses_the_registration(live, owner, db, oidc, peer):
    company, user = owner
    browser = SseBrowser(live, user)
    browser.connect(company)
    browser.connect(company)
    assert oidc.stats()["registrations"] == 1
    assert db.session.scalar(select(func.count()).select_from(OAuthClientRegistration)) == 1


def test_an_operator_client_without_an_issuer_is_discovered_over_sse(live, owner, app, db, oidc, peer):
    company, user = owner
    client = oidc.register_client(f"{live}/oauth/callback")
    # No issuer or endpoints: the authorization server is found from the method's server URL.
    app.config["OAUTH_CLIENTS"] = {
        APP_SLUG: {"client_id": client["client_id"], "client_secret": client["client_secret"]}
    }
    connection_id = SseBrowser(live, user).connect(company)
    assert _grant(db, connection_id).provider_tenant["clientSource"] == "operator"
    assert db.session.scalar(select(func.count()).select_from(OAuthClientRegistration)) == 0
    assert peer.requests[:2] == [
        RequestRecord("GET", "/sse", "missing"),
        RequestRecord("GET", _metadata_path(peer), "metadata"),
    ]
    assert _connection(db, connection_id).status == "active"


# -- using the connection ------------------------------------------------------------------------------------------


def _gateway(live: str, token: str):
    url = f"{live}/mcp/gateway"
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}

    def post(message_id: int, method: str, params: dict | None = None) -> dict:
        body = {
            "jsonrpc": "2.0",
            "id": message_id,
            "method": method,
            **({"params": params} if params else {}),
        }
        response = requests.post(url, json=body, headers=headers, timeout=30)
        assert response.status_code == 200, response.text
        return response.json()

    return post


def test_gateway_calls_over_sse_carry_the_token_and_refresh_it_once(live, owner, make, db, oidc, peer):
    company, user = owner
    connection_id = SseBrowser(live, user).connect(company)  # installed for every agent of the company
    first = stored_secrets(_grant(db, connection_id))
    agent = make.agent(company, "Builder", adapter_type="manual")
    issue = make.issue(company, status="in_progress", assignee=agent, responsible=user)
    _run, token = make.run(agent, issue)
    gateway = _gateway(live, token)

    listing = gateway(1, "tools/list")
    names = {t["name"] for t in listing["result"]["tools"]}
    assert {f"{APP_SLUG}__search_docs", f"{APP_SLUG}__create_doc"} <= names
    peer.reset()
    found = gateway(2, "tools/call", {"name": f"{APP_SLUG}__search_docs", "arguments": {"query": "plans"}})
    assert found["result"].get("isError", False) is False, found
    assert found["result"]["content"] == [{"type": "text", "text": "doc about plans"}]
    assert peer.calls == [("search_docs", {"query": "plans"})]
    assert set(peer.accepted_token_digests) == {token_digest(first[OAUTH_ACCESS_TOKEN_KEY])}
    assert {(r.method, r.path) for r in peer.requests} <= {("GET", "/sse"), ("POST", "/messages/")}

    # The access token runs out: the next call refreshes it once at the issuer and reaches the provider with it.
    _expire_access_token(db, connection_id)
    peer.reset()
    again = gateway(3, "tools/call", {"name": f"{APP_SLUG}__search_docs", "arguments": {"query": "more"}})
    assert again["result"].get("isError", False) is False, again
    assert oidc.token_requests("refresh_token") == 1
    refreshed = stored_secrets(_grant(db, connection_id))
    assert refreshed[OAUTH_ACCESS_TOKEN_KEY] != first[OAUTH_ACCESS_TOKEN_KEY]
    assert _grant(db, connection_id).provider_tenant["expiresAt"] > time.time() + 60
    assert peer.calls == [("search_docs", {"query": "more"})]
    assert set(peer.accepted_token_digests) == {token_digest(refreshed[OAUTH_ACCESS_TOKEN_KEY])}
    # The refreshed token is still bound to the event stream's server (the SDK refuses any other resource).
    assert all(r.auth == "ok" for r in peer.requests)


def test_a_refresh_through_the_service_keeps_the_resource(live, owner, db, oidc, peer):
    company, user = owner
    connection_id = SseBrowser(live, user).connect(company)
    before = stored_secrets(_expire_access_token(db, connection_id))
    token = oauth_tokens.get_valid_access_token(_connection(db, connection_id), _grant(db, connection_id))
    assert token != before[OAUTH_ACCESS_TOKEN_KEY]
    assert oidc.token_requests("refresh_token") == 1
    grant = _grant(db, connection_id)
    assert grant.provider_tenant["resource"] == peer.url
    assert stored_secrets(grant)[OAUTH_ACCESS_TOKEN_KEY] == token
