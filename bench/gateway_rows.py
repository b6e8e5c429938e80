"""The gateway `tools/call` rows of `bench/runtime.py`: an echo provider, its connection, and one-client timings.

The provider is a real MCP server built with the official SDK (`tests/peers/mcp_servers.RunningMcpServer`, stateless,
JSON answers, the notes key required) answering one tool, `echo`, in a process of its own. The seeded `github`
connection of the bench agent is pointed at it (`SWITCHBOARD_PROVIDER_SERVER_URLS`, the operator override), gets
the key as its grant's credential and an allowed `echo` tool. Three one-client variants then take turns:

- `direct`: the official SDK client on one session kept open, calling `echo` (what the provider itself costs);
- `ping`: `POST /mcp/runtime-tools` `{"method": "ping"}` through gunicorn (the floor every runtime call pays);
- `gateway`: `POST /mcp/gateway` `tools/call` of the echo tool through gunicorn (authentication, run checks, the
  tool's policy, the provider reached on a pooled session, the activity row).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import subprocess
import sys
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import requests

ROOT = Path(__file__).resolve().parents[1]

ECHO_TOOL = "echo"
ECHO_ARGUMENTS = {"text": "hello from the bench"}

PEER = """
import threading
from tests.peers.mcp_servers import NOTES_KEY, RunningMcpServer

server = RunningMcpServer("bench-echo", required_key=NOTES_KEY)

def echo(text: str) -> str:
    return text

server.add_tool(echo, description="Answer the text it was given.", read_only=True)
server.start()
print(server.url, flush=True)
threading.Event().wait()
"""


@contextmanager
def peer_process(script: str):
    """A test peer started by `script` (which prints its MCP URL) in a process of its own; yields the URL."""
    process = subprocess.Popen(
        [sys.executable, "-c", script],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        text=True,
        env={"PYTHONPATH": str(ROOT)},
    )
    try:
        url = process.stdout.readline().strip()
        if not url:
            raise RuntimeError("the peer did not start")
        yield url
    finally:
        process.terminate()
        process.wait(10)


@contextmanager
def echo_peer():
    """The echo provider in a process of its own; yields its MCP URL and the headers that reach it."""
    from tests.peers.mcp_servers import NOTES_KEY

    with peer_process(PEER) as url:
        yield url, {"Authorization": f"Bearer {NOTES_KEY}"}


def connect_echo(company_id: uuid.UUID, agent_id: uuid.UUID) -> uuid.UUID:
    """Give the bench agent's seeded `github` connection the peer's key and an allowed `echo` tool; commits.

    Returns the connection id. The caller points `github` at the peer with `PROVIDER_SERVER_URLS`.
    """
    from sqlalchemy import select

    from app.extensions import db
    from app.models import (
        ConnectionGrant,
        ConnectionInstall,
        ConnectionTool,
        GrantSecret,
        ToolConnection,
        ToolPolicy,
    )
    from app.services.access.revision import touch
    from app.services.gateway.limit_rules import (
        KINDS,
        LOOP_REPEATS_RANGE,
        LOOP_SECONDS_RANGE,
        MAX_LIMIT,
        SCOPES,
        WINDOWS,
    )
    from app.services.secrets_box import encrypt
    from tests.peers.mcp_servers import NOTES_KEY

    connection = db.session.scalars(
        select(ToolConnection)
        .join(ConnectionInstall, ConnectionInstall.connection_id == ToolConnection.id)
        .where(
            ToolConnection.company_id == company_id,
            ToolConnection.app_slug == "github",
            ConnectionInstall.target_type == "agent",
            ConnectionInstall.target_id == agent_id,
        )
    ).one()
    # The bench repeats one call with the same arguments thousands of times: limits high enough never to refuse it
    # (the default loop breaker stops the tenth repeat in a minute), still counted as every call is.
    connection.call_limits = {
        **{kind: {scope: dict.fromkeys(WINDOWS, MAX_LIMIT) for scope in SCOPES} for kind in KINDS},
        "loop": {"repeats": LOOP_REPEATS_RANGE[1], "seconds": LOOP_SECONDS_RANGE[0]},
    }
    grant = db.session.scalars(
        select(ConnectionGrant).where(ConnectionGrant.connection_id == connection.id)
    ).one()
    db.session.add(
        GrantSecret(
            company_id=company_id, grant_id=grant.id, key="authorization", ciphertext=encrypt(NOTES_KEY)
        )
    )
    db.session.add(
        ConnectionTool(
            company_id=company_id,
            connection_id=connection.id,
            name=ECHO_TOOL,
            description="Answer the text it was given.",
            input_schema={"type": "object", "properties": {"text": {"type": "string"}}, "required": ["text"]},
            is_write=False,
            status="active",
            version_hash="v1",
        )
    )
    db.session.add(
        ToolPolicy(company_id=company_id, connection_id=connection.id, tool_name=ECHO_TOOL, action="allow")
    )
    touch(company_id)
    db.session.commit()
    return connection.id


def echo_visible_name(listing: list[dict]) -> str:
    """The echo tool's visible name in a `tools/list` answer."""
    names = [tool["name"] for tool in listing if tool["name"].endswith(f"__{ECHO_TOOL}")]
    if len(names) != 1:
        raise RuntimeError(f"expected one echo tool in the listing, found {names}")
    return names[0]


def call_body(visible_name: str) -> dict:
    return {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": visible_name, "arguments": ECHO_ARGUMENTS},
    }


class OpenSession:
    """One SDK client session kept open on a loop of its own: the provider's own cost (`bench/runtime.py`'s and
    `bench/calls.py`'s floor).

    One task owns it from opening to closing (the SDK's task groups must end in the task that entered them).
    """

    def __init__(self, url: str, headers: dict):
        self.loop = asyncio.new_event_loop()
        threading.Thread(target=self.loop.run_forever, daemon=True).start()
        self.url, self.headers = url, headers
        self._opened: concurrent.futures.Future = concurrent.futures.Future()
        self._owner = asyncio.run_coroutine_threadsafe(self._own(), self.loop)
        self._opened.result(30)

    async def _own(self) -> None:
        import httpx2
        from mcp import ClientSession
        from mcp.client.streamable_http import streamable_http_client

        self._closing = asyncio.Event()
        try:
            async with (
                httpx2.AsyncClient(headers=self.headers) as http,
                streamable_http_client(self.url, http_client=http) as (read, write),
                ClientSession(read, write) as session,
            ):
                await session.initialize()
                self.session = session
                self._opened.set_result(None)
                await self._closing.wait()
        except BaseException as exc:
            if not self._opened.done():
                self._opened.set_exception(exc)
            raise

    def call(self, name: str = ECHO_TOOL, arguments: dict | None = None) -> bool:
        """Call `name` (the echo tool by default) once; whether it succeeded."""
        result = asyncio.run_coroutine_threadsafe(
            self.session.call_tool(name, ECHO_ARGUMENTS if arguments is None else arguments), self.loop
        ).result(30)
        return not result.is_error

    def close(self) -> None:
        self.loop.call_soon_threadsafe(self._closing.set)
        self._owner.result(30)


def http_caller(url: str, body: dict, token: str):
    """One keep-alive client posting `body`; each call answers whether it succeeded."""
    session = requests.Session()
    headers = {"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"}

    def call() -> bool:
        response = session.post(url, json=body, headers=headers, timeout=60)
        return response.status_code == 200 and b'"isError": true' not in response.content

    return call


def time_calls(call, seconds: float, warmup: float) -> tuple[list[float], int]:
    """Call back to back for `warmup` + `seconds`; the latencies (s) of the measured calls and their errors."""
    latencies, errors = [], 0
    now = time.perf_counter()
    measure_from, stop_at = now + warmup, now + warmup + seconds
    while True:
        t0 = time.perf_counter()
        if t0 >= stop_at:
            break
        ok = call()
        t1 = time.perf_counter()
        if t0 >= measure_from:
            latencies.append(t1 - t0)
            errors += 0 if ok else 1
    return latencies, errors
