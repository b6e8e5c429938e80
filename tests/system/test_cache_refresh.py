"""`switchboard cache refresh` (issue 31 item 8): a change made outside the app (an SQL fix, a restore) reaches the
per-process caches of every instance at once.

Two real gunicorn instances on the test PostgreSQL database have the agent's listing and call targets cached. One
connection is switched off and another archived by plain SQL, as an operator would in psql: without the command,
both instances still list both connections' tools and their calls still reach the provider (their caches are keyed
on the access revision, which SQL does not raise). `switchboard cache refresh`, run as its own process, raises every
company's revision; from the next request on, neither instance lists or calls either connection.
"""

from __future__ import annotations

import httpx
import psycopg
import pytest

from tests import servers
from tests.doors import GATEWAY_URL, bearer
from tests.peers.mcp_servers import NOTES_KEY
from tests.services.gateway import test_gateway
from tests.services.gateway.test_gateway import connect

world = test_gateway.world
CALLS = 4  # per instance and connection


def _rpc(base: str, token: str, method: str, params: dict | None = None) -> dict:
    message = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
    answer = httpx.post(f"{base}{GATEWAY_URL}", json=message, headers=bearer(token), timeout=servers.PATIENCE)
    assert answer.status_code == 200, answer.text
    return answer.json()


def _listed(base: str, token: str) -> set[str]:
    answer = _rpc(base, token, "tools/list")
    assert "result" in answer, answer
    return {tool["name"] for tool in answer["result"]["tools"]}


def _unknown(base: str, token: str, name: str, query: str) -> bool:
    """Call the tool: False when it ran, True when the gateway answered that no such tool exists for the agent."""
    answer = _rpc(base, token, "tools/call", {"name": name, "arguments": {"query": query}})
    if "error" in answer:
        assert answer["error"] == {"code": -32602, "message": f"Unknown tool: {name}"}
        return True
    assert answer["result"]["isError"] is False, answer
    return False


def _reached(notes_server) -> int:
    return sum(1 for tool, _ in notes_server.calls if tool == "search_notes")


@pytest.mark.postgres_only
def test_a_connection_changed_by_sql_is_dropped_by_every_instance_after_cache_refresh(
    app, db, world, notes_server, tmp_path
):
    switched_off = connect(world, "github", NOTES_KEY, name="Switched off")
    archived = connect(world, "github", NOTES_KEY, name="Archived")
    names = {"switched-off__search_notes", "archived__search_notes"}
    provider = {"SWITCHBOARD_PROVIDER_SERVER_URLS": f'{{"github": "{notes_server.url}"}}'}
    launched = [servers.launch(app, tmp_path, extra_env=provider) for _ in range(2)]  # booting at once
    try:
        instances = [instance.wait_serving().base for instance in launched]

        def figures(label: str) -> tuple[int, int, int]:
            """Instances listing both tools; of 2 x 2 x CALLS calls, those that reached the provider and those answered
            "Unknown tool"."""
            notes_server.reset()
            listing = sum(1 for base in instances if names <= _listed(base, world.token))
            unknown = sum(
                _unknown(base, world.token, name, f"{label} {i}")
                for base in instances
                for name in sorted(names)
                for i in range(CALLS)
            )
            return listing, _reached(notes_server), unknown

        # Both instances cache the listing and the call targets.
        assert figures("warm") == (2, 2 * 2 * CALLS, 0)

        with psycopg.connect(_plain_url(app), autocommit=True) as sql:
            sql.execute("UPDATE tool_connections SET enabled = false WHERE id = %s", (switched_off["id"],))
            sql.execute("UPDATE tool_connections SET status = 'archived' WHERE id = %s", (archived["id"],))

        # Without the command: still listed on both instances, and every call still reaches the provider.
        assert figures("stale") == (2, 2 * 2 * CALLS, 0)

        printed = servers.switchboard(app, tmp_path, "cache", "refresh")
        assert printed == (
            "cache: raised the access revision of 1 company; every process answers agents' next requests from "
            "the database\n"
        )

        # After it: neither instance lists them, and no call reaches the provider.
        assert figures("refreshed") == (0, 0, 2 * 2 * CALLS)
        for base in instances:
            assert _listed(base, world.token).isdisjoint(names)
    finally:
        for instance in launched:
            instance.stop()


def _plain_url(app) -> str:
    return app.config["SQLALCHEMY_DATABASE_URI"].replace("postgresql+psycopg://", "postgresql://", 1)
