"""The MCP messages Switchboard sends, built from the SDK's own wire types (`mcp_types`): the one place that shapes
them for both agent doors (`app.web.agents`) and the services whose answers are tool results (`services.gateway`).

A message goes on the wire as `dump` makes it: camelCase names, and only the fields we set. The runtime door keeps
the seed contract's bytes (`connection-intents-api.md`), which carry no `isError: false` and no `resultType`, so a
default the SDK would fill in is sent only where the revision spoken asks for it.
"""

from __future__ import annotations

import json
from typing import Any

import mcp_types
from mcp_types.jsonrpc import (
    JSONRPC_VERSION,
    ErrorData,
    JSONRPCError,
    JSONRPCNotification,
    JSONRPCRequest,
    JSONRPCResponse,
)
from pydantic import BaseModel

# The version our servers name in `serverInfo` (both doors, every revision).
SERVER_VERSION = "1"
# What this client names itself when it speaks to a provider's MCP server.
CLIENT_INFO = mcp_types.Implementation(name="switchboard", version="0.1.0")


def dump(model: BaseModel) -> dict:
    """A wire model as JSON-ready data: aliases (`inputSchema`, `_meta`), only the fields that were set."""
    return model.model_dump(mode="json", by_alias=True, exclude_unset=True)


def _envelope(model: BaseModel, id_: Any) -> dict:
    body = model.model_dump(mode="json", exclude_unset=True, warnings=False)
    # The id is echoed as the client sent it (JSON-RPC: the Server MUST reply with the same value), whatever its
    # JSON type; the SDK's `RequestId` would turn `true` into `1`.
    body["id"] = id_
    return body


def response(id_: Any, result: dict) -> dict:
    """A JSON-RPC response carrying `result`, as given: results are JSON-ready already (built with `dump`, or a
    provider's own JSON), and a listing kept serialized (`core/raw_json.RawJSON`) must reach `raw_json.dumps` as
    it is, not be dumped as a dataclass."""
    body = _envelope(JSONRPCResponse.model_construct(jsonrpc=JSONRPC_VERSION, id=id_, result={}), id_)
    body["result"] = result
    return body


def error(id_: Any, code: int, message: str, data: Any = None) -> dict:
    """A JSON-RPC error response (`data` only when given)."""
    details = (
        ErrorData(code=code, message=message)
        if data is None
        else ErrorData(code=code, message=message, data=data)
    )
    return _envelope(JSONRPCError.model_construct(jsonrpc=JSONRPC_VERSION, id=id_, error=details), id_)


def request(id_: int | str, call: mcp_types.Request) -> dict:
    """A JSON-RPC request (Switchboard as a client)."""
    params = call.params
    envelope = JSONRPCRequest(
        jsonrpc=JSONRPC_VERSION,
        id=id_,
        method=call.method,
        params=dump(params) if isinstance(params, BaseModel) else params,
    )
    return envelope.model_dump(mode="json", exclude_none=True)


def notification(note: mcp_types.Notification) -> dict:
    """A JSON-RPC notification (for example `notifications/progress`)."""
    params = note.params
    envelope = JSONRPCNotification(
        jsonrpc=JSONRPC_VERSION,
        method=note.method,
        params=dump(params) if isinstance(params, BaseModel) else params,
    )
    return envelope.model_dump(mode="json", exclude_none=True)


def server_info(name: str) -> mcp_types.Implementation:
    return mcp_types.Implementation(name=name, version=SERVER_VERSION)


def tools_capabilities() -> mcp_types.ServerCapabilities:
    """What both doors offer: tools, and a listing that changes only between requests (no list_changed push)."""
    return mcp_types.ServerCapabilities(tools=mcp_types.ToolsCapability(list_changed=False))


def text(value: str) -> mcp_types.TextContent:
    return mcp_types.TextContent(type="text", text=value)


def tool_result(value: Any) -> dict:
    """A successful `tools/call` result: the value as JSON text plus `structuredContent`."""
    return dump(mcp_types.CallToolResult(content=[text(json.dumps(value))], structured_content=value))


def tool_error(message: str, structured: dict | None = None) -> dict:
    """A `tools/call` result the agent should read: `isError: true` with the message as text."""
    if structured is None:
        return dump(mcp_types.CallToolResult(content=[text(message)], is_error=True))
    return dump(
        mcp_types.CallToolResult(content=[text(message)], structured_content=structured, is_error=True)
    )


def tool(name: str, description: str, input_schema: dict, **listing: Any) -> dict:
    """A `tools/list` entry; `listing` takes the optional fields by wire name (`title`, `outputSchema`,
    `annotations`, `_meta`), passed through as given."""
    return dump(
        mcp_types.Tool.model_validate(
            {"name": name, "description": description, "inputSchema": input_schema, **listing}
        )
    )
