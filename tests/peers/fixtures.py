"""pytest fixtures for the fake MCP providers (load with `pytest_plugins = ["tests.peers.fixtures"]`).

`notes_server`, `honcho_server` and `open_server` start once per session and stop at its end. The autouse
`mcp_peers_reset` puts every peer that is already running back to its starting state before each test (calls and
requests forgotten, tools added at runtime removed), without starting peers a test does not ask for.
`mcp_server_factory` starts extra peers for one test (e.g. one that wants the key in `X-Api-Key`) and stops them after.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import pytest

from tests.peers.mcp_servers import (
    RunningMcpServer,
    start_honcho_like_server,
    start_notes_server,
    start_open_server,
)

__all__ = ["notes_server", "honcho_server", "open_server", "mcp_peers_reset", "mcp_server_factory"]

_running: list[RunningMcpServer] = []


def _session_peer(start: Callable[[], RunningMcpServer]) -> Iterator[RunningMcpServer]:
    server = start()
    _running.append(server)
    try:
        yield server
    finally:
        _running.remove(server)
        server.stop()


@pytest.fixture(scope="session")
def notes_server() -> Iterator[RunningMcpServer]:
    """Notes provider; key `notes-key-123` as `Authorization: Bearer ...`."""
    yield from _session_peer(start_notes_server)


@pytest.fixture(scope="session")
def honcho_server() -> Iterator[RunningMcpServer]:
    """Honcho-like memory provider (tools take `workspace_id`); key `honcho-key-456` as a Bearer token."""
    yield from _session_peer(start_honcho_like_server)


@pytest.fixture(scope="session")
def open_server() -> Iterator[RunningMcpServer]:
    """Provider that needs no key; one tool, `ping`."""
    yield from _session_peer(start_open_server)


@pytest.fixture(autouse=True)
def mcp_peers_reset() -> None:
    """Before each test, reset the session peers that are running (not starting any)."""
    for server in list(_running):
        server.reset()


@pytest.fixture
def mcp_server_factory() -> Iterator[Callable[..., RunningMcpServer]]:
    """Start peers for this test only: `mcp_server_factory(start_notes_server, key_header="X-Api-Key", ...)`."""
    started: list[RunningMcpServer] = []

    def start(starter: Callable[..., RunningMcpServer], *args, **kwargs) -> RunningMcpServer:
        server = starter(*args, **kwargs)
        started.append(server)
        return server

    yield start
    for server in started:
        server.stop()
