"""How tests call the agent doors: the runtime tools' REST routes and the gateway, with the run's bearer token."""

from __future__ import annotations

import json

TOKEN_INVALID = {"error": "Runtime tools token is missing, invalid, or expired"}
SEARCH_URL = "/runtime-tools/connections/search"
REQUEST_URL = "/runtime-tools/connections/request"


def bearer(token: str) -> dict:
    return {"Authorization": f"Bearer {token}"}


def search(client, token, query="", **extra):
    return client.post(SEARCH_URL, json={"query": query, **extra}, headers=bearer(token))


def request_service(client, token, service):
    return client.post(REQUEST_URL, json={"service": service}, headers=bearer(token))


GATEWAY_URL = "/mcp/gateway"


def rpc(client, token, method, params=None, id_=1):
    """One JSON-RPC request to the gateway door, as the agent of the run behind `token`."""
    message = {"jsonrpc": "2.0", "id": id_, "method": method}
    if params is not None:
        message["params"] = params
    return client.post(GATEWAY_URL, json=message, headers=bearer(token))


def approval_card(world, tool: str = "honcho__save_memory", **arguments) -> str:
    """The agent calls a tool whose policy asks first (Honcho's save_memory does by default): the gateway opens an
    approval card on the task; its id."""
    call = rpc(world.client, world.token, "tools/call", {"name": tool, "arguments": arguments})
    return refusal_fields(call.json["result"])["approvalId"]


def refusal_fields(result) -> dict:
    """The structured fields of a gateway refusal (`reasonCode`, `approvalId`, ...): its `structuredContent`, or,
    for a tool that declares an output schema, the JSON text block that carries them (issue 34 item 1)."""
    if isinstance(result, dict):
        structured, blocks = result.get("structuredContent"), result.get("content") or []
        texts = [b.get("text") for b in blocks]
    else:
        structured, texts = result.structured_content, [getattr(b, "text", None) for b in result.content]
    if structured is not None:
        return structured
    return json.loads(texts[-1])
