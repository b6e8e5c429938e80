"""pytest fixtures for the OAuth peers (load with `pytest_plugins = ["tests.peers.oidc_fixtures"]`).

`oidc_provider` (session): the real OpenID Provider in `tests/peers/oidc` (npm `oidc-provider`, pinned), run with
Node on a free loopback port; `npm install` runs first if `node_modules` is missing. `oauth_mcp_server` (session): an
MCP server that accepts only tokens that provider's introspection endpoint calls active. The function-scoped `oidc`
and `oauth_mcp` fixtures hand out the same peers with their counters and test switches reset.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import requests

from tests.peers.oauth_mcp import OAuthMcpServer, start_oauth_mcp_server

__all__ = ["oidc_provider", "oidc", "oauth_mcp_server", "oauth_mcp"]

OIDC_DIR = Path(__file__).resolve().parent / "oidc"
MCP_RESOURCE_CLIENT = ("mcp-resource", "mcp-resource-secret")
_START_TIMEOUT = 20.0


class RunningOidcProvider:
    def __init__(self, process: subprocess.Popen, port: int, log_path: Path):
        self.process = process
        self.port = port
        self.log_path = log_path

    @property
    def issuer(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def stats(self) -> dict:
        return requests.get(f"{self.issuer}/__test/stats", timeout=5).json()

    def token_requests(self, grant_type: str) -> int:
        return int(self.stats()["tokenRequests"].get(grant_type, 0))

    def configure(self, **switches) -> dict:
        params = {k: str(v).lower() if isinstance(v, bool) else v for k, v in switches.items()}
        return requests.get(f"{self.issuer}/__test/config", params=params, timeout=5).json()

    def reset(self) -> None:
        requests.get(f"{self.issuer}/__test/reset", timeout=5).raise_for_status()

    def register_client(self, redirect_uri: str) -> dict:
        """Register a confidential client directly (what an operator does for SWITCHBOARD_OAUTH_CLIENTS)."""
        response = requests.post(
            f"{self.issuer}/reg",
            json={
                "redirect_uris": [redirect_uri],
                "grant_types": ["authorization_code", "refresh_token"],
                "response_types": ["code"],
                "token_endpoint_auth_method": "client_secret_basic",
            },
            timeout=5,
        )
        response.raise_for_status()
        return response.json()

    def stop(self) -> None:
        if self.process.poll() is None:
            self.process.terminate()
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(timeout=5)


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _ensure_installed() -> None:
    if (OIDC_DIR / "node_modules" / "oidc-provider").is_dir():
        return
    npm = shutil.which("npm")
    if npm is None:
        pytest.skip("npm is not available to install the OIDC test peer")
    subprocess.run(
        [npm, "install", "--silent", "--no-audit", "--no-fund"], cwd=OIDC_DIR, check=True, timeout=300
    )


def start_oidc_provider(tmp_dir: Path, access_token_ttl: int = 3600) -> RunningOidcProvider:
    node = shutil.which("node")
    if node is None:
        pytest.skip("node is not available to run the OIDC test peer")
    _ensure_installed()
    port = _free_port()
    log_path = tmp_dir / f"oidc-provider-{port}.log"
    env = {**os.environ, "OIDC_ACCESS_TOKEN_TTL": str(access_token_ttl)}
    log = open(log_path, "w")  # noqa: SIM115 (lives as long as the process)
    process = subprocess.Popen(
        [node, "provider.mjs", str(port)], cwd=OIDC_DIR, stdout=log, stderr=subprocess.STDOUT, env=env
    )
    provider = RunningOidcProvider(process, port, log_path)
    deadline = time.monotonic() + _START_TIMEOUT
    while True:
        if process.poll() is not None:
            raise RuntimeError(f"oidc-provider exited early:\n{log_path.read_text()}")
        try:
            if requests.get(f"{provider.issuer}/.well-known/openid-configuration", timeout=1).ok:
                return provider
        except requests.RequestException:
            pass
        if time.monotonic() > deadline:
            provider.stop()
            raise RuntimeError(f"oidc-provider did not start:\n{log_path.read_text()}")
        time.sleep(0.05)


@pytest.fixture(scope="session")
def oidc_provider(tmp_path_factory) -> Iterator[RunningOidcProvider]:
    provider = start_oidc_provider(tmp_path_factory.mktemp("oidc"))
    try:
        yield provider
    finally:
        provider.stop()


@pytest.fixture
def oidc(oidc_provider) -> RunningOidcProvider:
    """The session provider with its counters and switches reset for this test."""
    oidc_provider.reset()
    return oidc_provider


@pytest.fixture(scope="session")
def oauth_mcp_server(oidc_provider) -> Iterator[OAuthMcpServer]:
    server = start_oauth_mcp_server(issuer=oidc_provider.issuer, introspection_client=MCP_RESOURCE_CLIENT)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture
def oauth_mcp(oauth_mcp_server) -> OAuthMcpServer:
    oauth_mcp_server.reset()
    return oauth_mcp_server
