"""The Python MCP SDK 1.x client (`mcp==1.30.0`, its own venv) against one Switchboard door, once per revision.

Usage: python client.py '<json>' with {url, token, revisions: [...], tool, arguments, unknownTool?}. For each
revision: initialize (asking for that revision), tools/list, tools/call and, when `unknownTool` is set, a call of that
unknown tool, whose error is reported as the SDK surfaced it. Prints one JSON object per revision.
"""

from __future__ import annotations

import asyncio
import json
import sys
from importlib.metadata import version

import mcp.types
from mcp import ClientSession
from mcp.client.streamable_http import streamable_http_client
from mcp.shared._httpx_utils import create_mcp_http_client
from mcp.shared.exceptions import McpError


def describe(err: BaseException) -> dict:
    if isinstance(err, McpError):
        return {"kind": "McpError", "code": err.error.code, "message": err.error.message}
    if isinstance(err, BaseExceptionGroup):
        return {"kind": type(err).__name__, "code": None, "message": "; ".join(map(repr, err.exceptions))}
    return {"kind": type(err).__name__, "code": None, "message": str(err)}


async def one(spec: dict, revision: str) -> dict:
    report: dict = {"revision": revision, "sdk": version("mcp")}
    # The SDK always asks for its newest revision (read when `initialize` is sent); ask for `revision` instead.
    mcp.types.LATEST_PROTOCOL_VERSION = revision
    http = create_mcp_http_client(headers={"Authorization": f"Bearer {spec['token']}"})
    try:
        async with (
            http,
            streamable_http_client(spec["url"], http_client=http) as (read, write, get_session_id),
            ClientSession(read, write) as session,
        ):
            init = await session.initialize()
            report["negotiated"] = init.protocolVersion
            report["server"] = init.serverInfo.model_dump(exclude_none=True)
            report["sessionId"] = get_session_id()
            report["tools"] = [tool.name for tool in (await session.list_tools()).tools]
            called = await session.call_tool(spec["tool"], spec["arguments"])
            text = called.content[0].text if called.content and called.content[0].type == "text" else None
            report["call"] = {"isError": called.isError, "text": text}
            if spec.get("unknownTool"):
                try:
                    odd = await session.call_tool(spec["unknownTool"], {})
                    report["unknown"] = {"result": odd.model_dump(exclude_none=True)}
                except Exception as err:  # noqa: BLE001 - reported to the test as the SDK surfaced it
                    report["unknown"] = describe(err)
                # The session is still usable after the error.
                report["afterError"] = len((await session.list_tools()).tools)
    except BaseException as err:  # noqa: BLE001
        report["failure"] = describe(err)
    return report


async def main(spec: dict) -> None:
    for revision in spec["revisions"]:
        print(json.dumps(await asyncio.wait_for(one(spec, revision), timeout=30)), flush=True)


if __name__ == "__main__":
    asyncio.run(main(json.loads(sys.argv[1])))
