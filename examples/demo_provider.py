"""A local memory service for the demo: Honcho-compatible MCP tools on 127.0.0.1, so a newcomer can connect
something, see the Permissions page and the agent instructions editor, and watch an agent continue, all without
internet. `make run` starts it and points the catalog's Honcho app at it.

It is a real MCP server built with the official Python SDK (Streamable HTTP, stateless, JSON responses). Memories live
in this process only. The API key is the demo's (`demo-honcho-key`, printed by `switchboard demo`); a request
without it gets 401, as a provider would answer.

    python examples/demo_provider.py --port 5341
"""

from __future__ import annotations

import argparse
import json
import logging
import threading
from typing import Any

import uvicorn
from mcp.server.mcpserver import MCPServer
from mcp_types import ToolAnnotations

DEMO_KEY = "demo-honcho-key"
DEFAULT_PORT = 5341


class KeyGate:
    """ASGI middleware in front of the MCP app: a request without `Authorization: Bearer <key>` is refused."""

    def __init__(self, app: Any, key: str):
        self.app = app
        self.expected = f"Bearer {key}".encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if (
            scope["type"] == "http"
            and dict(scope.get("headers") or []).get(b"authorization") != self.expected
        ):
            body = json.dumps(
                {"error": "invalid_api_key", "error_description": "Missing or invalid API key."}
            )
            await send(
                {
                    "type": "http.response.start",
                    "status": 401,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"www-authenticate", b'Bearer realm="mcp"'),
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body.encode()})
            return
        await self.app(scope, receive, send)


def build_app(key: str = DEMO_KEY) -> Any:
    """The gated ASGI app: search_memory, save_memory (write) and list_workspaces over an in-process store."""
    root_handlers, root_level = list(logging.root.handlers), logging.root.level
    server = MCPServer("demo-memory", log_level="WARNING")
    logging.root.handlers[:] = root_handlers  # MCPServer configures the root logger; keep the caller's
    logging.root.setLevel(root_level)
    memories: dict[str, list[str]] = {"demo": ["The launch is planned for the first Tuesday of next month."]}
    lock = threading.Lock()

    def search_memory(workspace_id: str, query: str) -> dict[str, Any]:
        words = {w for w in query.lower().split() if len(w) > 2}
        with lock:
            found = [m for m in memories.get(workspace_id, []) if not words or words & set(m.lower().split())]
        return {"workspace": workspace_id, "results": found}

    def save_memory(workspace_id: str, content: str) -> dict[str, Any]:
        with lock:
            memories.setdefault(workspace_id, []).append(content)
        return {"workspace": workspace_id, "saved": True}

    def list_workspaces() -> dict[str, Any]:
        with lock:
            return {"workspaces": sorted(memories)}

    read = ToolAnnotations(read_only_hint=True)
    server.add_tool(
        search_memory, description="Search a workspace's memory for what you need.", annotations=read
    )
    server.add_tool(
        save_memory,
        description="Save a memory into a workspace.",
        annotations=ToolAnnotations(read_only_hint=False, destructive_hint=False),
    )
    server.add_tool(list_workspaces, description="List the workspaces this key can use.", annotations=read)
    return KeyGate(server.streamable_http_app(stateless_http=True, json_response=True), key)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    args = parser.parse_args()
    print(f"Demo memory provider on http://{args.host}:{args.port}/mcp (API key: {DEMO_KEY})", flush=True)
    uvicorn.run(build_app(), host=args.host, port=args.port, log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
