#!/usr/bin/env python3
"""A small example agent for Switchboard's process adapter (Python standard library only).

What it does on every turn:

1. Reads the wake prompt from stdin and the connection-instruction snapshot from the private file named by
   `PAPERCLIP_CONNECTION_INSTRUCTIONS_FILE` (empty when no instructions apply), checks the digest, and prints the prompt
   it would send to a model (the snapshot text appended unless the prompt already carries it).
2. If the runtime tools are available (`PAPERCLIP_RUNTIME_TOOLS_*`), calls `connections_search` for the service its
   task names and, unless the service is ready, `connection_request` so the responsible person gets a connection card.
3. On a continuation (`PAPERCLIP_WAKE_CONTEXT` has `outcome`), reports what happened instead of asking again. When
   the outcome is `connected`, it talks MCP (JSON-RPC over HTTP) to the tool gateway named by
   `PAPERCLIP_TOOL_GATEWAY_MCP_URL` with the same bearer token: `initialize`, `tools/list`, then `tools/call` of the
   first read-only tool of the connected service (tools are named `<connection-slug>__<tool>`; tools that need an
   approval first are left alone), and prints the result.
4. Prints one result line `{"result": ...}` and one session line `{"paperclipSession": {"id": ...}}`.

Run it by hand to see the contract: `echo "hello" | python3 examples/agents/process_agent.py`.
Options: `--service <slug>` searches for that service instead of guessing it from the task title.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import sys
import urllib.error
import urllib.request
import uuid

# Tool names that read without changing anything; write tools are ask-first and need a person's approval.
READ_ONLY_VERBS = ("search", "list", "get", "read", "find", "query", "fetch", "lookup", "recall")
APPROVAL_NOTE = "needs approval"
MCP_PROTOCOL_VERSION = "2025-03-26"
STOP_WORDS = {"the", "a", "an", "in", "on", "to", "of", "and", "for", "our", "with", "write", "task"}


def read_snapshot() -> dict | None:
    path = os.environ.get("PAPERCLIP_CONNECTION_INSTRUCTIONS_FILE", "")
    if not path:
        return None
    with open(path, encoding="utf-8") as fh:
        snapshot = json.load(fh)
    digest = hashlib.sha256(snapshot["text"].encode("utf-8")).hexdigest()
    if digest != snapshot.get("digest"):
        raise SystemExit("instruction snapshot digest mismatch")
    return snapshot


def model_prompt(wake_prompt: str, snapshot: dict | None) -> str:
    if snapshot and snapshot["text"] not in wake_prompt:
        return wake_prompt.rstrip() + "\n\n" + snapshot["text"] + "\n"
    return wake_prompt


def call_tool(url_variable: str, body: dict) -> dict:
    """POST to a runtime-tools REST endpoint with the run's bearer token; errors come back as {"error": ...}."""
    request = urllib.request.Request(  # noqa: S310 (the URL is the server's own, from the environment)
        os.environ[url_variable],
        data=json.dumps(body).encode("utf-8"),
        headers={
            "Authorization": "Bearer " + os.environ.get("PAPERCLIP_RUNTIME_TOOLS_TOKEN", ""),
            "Content-Type": "application/json",
        },
        method="POST",
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:  # noqa: S310
            return json.loads(response.read().decode("utf-8"))
    except urllib.error.HTTPError as exc:
        try:
            return {"error": json.loads(exc.read().decode("utf-8")).get("error"), "status": exc.code}
        except ValueError:
            return {"error": f"HTTP {exc.code}", "status": exc.code}
    except (urllib.error.URLError, OSError) as exc:
        return {"error": str(exc)}


class GatewayError(Exception):
    pass


class Gateway:
    """A minimal MCP client for the tool gateway: stateless JSON-RPC over HTTP POST with the run's bearer token."""

    def __init__(self, url: str, token: str):
        self.url = url
        self.token = token
        self.next_id = 0

    def send(self, method: str, params: dict | None = None, *, notify: bool = False) -> dict:
        message: dict = {"jsonrpc": "2.0", "method": method, "params": params or {}}
        if not notify:
            self.next_id += 1
            message["id"] = self.next_id
        request = urllib.request.Request(  # noqa: S310 (the URL is the server's own, from the environment)
            self.url,
            data=json.dumps(message).encode("utf-8"),
            headers={
                "Authorization": "Bearer " + self.token,
                "Content-Type": "application/json",
                "Accept": "application/json, text/event-stream",
            },
            method="POST",
        )
        try:
            with urllib.request.urlopen(request, timeout=60) as response:  # noqa: S310
                body = response.read().decode("utf-8")
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode("utf-8", "replace")[:300]
            raise GatewayError(f"{method}: HTTP {exc.code} {detail}") from None
        except (urllib.error.URLError, OSError) as exc:
            raise GatewayError(f"{method}: {exc}") from None
        if notify or not body.strip():
            return {}
        answer = json.loads(body)
        if "error" in answer:
            raise GatewayError(f"{method}: {answer['error'].get('message')}")
        return answer.get("result") or {}


def is_read_only(tool: dict) -> bool:
    """The gateway's `readOnlyHint` annotation decides; older servers without it fall back to the tool's name."""
    if APPROVAL_NOTE in (tool.get("description") or ""):
        return False
    hint = (tool.get("annotations") or {}).get("readOnlyHint")
    if hint is not None:
        return bool(hint)
    return tool["name"].split("__", 1)[-1].lower().startswith(READ_ONLY_VERBS)


def tool_arguments(tool: dict, text: str) -> dict:
    """Fill every required string argument with the task's words (enough for a search)."""
    schema = tool.get("inputSchema") or {}
    properties = schema.get("properties") or {}
    return {
        name: text
        for name in schema.get("required") or []
        if (properties.get(name) or {}).get("type", "string") == "string"
    }


def use_connected_service(service: str, text: str) -> dict:
    """List the gateway's tools and call the first read-only tool of `service`; returns what happened."""
    url = os.environ.get("PAPERCLIP_TOOL_GATEWAY_MCP_URL", "")
    if not url:
        return {"gateway": "unavailable"}
    gateway = Gateway(url, os.environ.get("PAPERCLIP_RUNTIME_TOOLS_TOKEN", ""))
    try:
        gateway.send(
            "initialize",
            {
                "protocolVersion": MCP_PROTOCOL_VERSION,
                "capabilities": {},
                "clientInfo": {"name": "switchboard-example-agent", "version": "1"},
            },
        )
        gateway.send("notifications/initialized", notify=True)
        tools = gateway.send("tools/list").get("tools") or []
        print(f"gateway tools/list -> {json.dumps([t['name'] for t in tools])}")
        mine = [t for t in tools if t["name"].split("__", 1)[0].startswith(service)] if service else tools
        tool = next((t for t in mine if is_read_only(t)), None)
        if tool is None:
            return {"gateway": "no_read_only_tool", "service": service}
        arguments = tool_arguments(tool, text)
        result = gateway.send("tools/call", {"name": tool["name"], "arguments": arguments})
    except GatewayError as exc:
        print(f"gateway error: {exc}")
        return {"gateway": "error", "detail": str(exc)}
    texts = [c.get("text", "") for c in result.get("content") or [] if c.get("type") == "text"]
    print(f"gateway tools/call {tool['name']}({json.dumps(arguments)}) -> {json.dumps(texts)}")
    return {"tool": tool["name"], "isError": bool(result.get("isError")), "content": texts}


def task_title(prompt: str) -> str:
    match = re.search(r"^## Task [^:]*: (.+)$", prompt, re.MULTILINE)
    return match.group(1).strip() if match else ""


def guess_query(prompt: str) -> str:
    """The last meaningful word of the task title (e.g. "Write the launch notes in Notion" -> "notion")."""
    words = [w.lower() for w in re.findall(r"[A-Za-z0-9]+", task_title(prompt))]
    words = [w for w in words if w not in STOP_WORDS]
    return words[-1] if words else ""


def main(argv: list[str]) -> int:
    service_arg = argv[argv.index("--service") + 1] if "--service" in argv[:-1] else None
    wake_prompt = sys.stdin.read() or os.environ.get("PAPERCLIP_WAKE_PROMPT", "")
    snapshot = read_snapshot()
    context = json.loads(os.environ.get("PAPERCLIP_WAKE_CONTEXT") or "{}")
    print("=== prompt for the model ===")
    print(model_prompt(wake_prompt, snapshot))
    print("=== end of prompt ===")
    if snapshot:
        print(f"connection instructions: digest {snapshot['digest'][:12]}...")

    result: dict
    available = os.environ.get("PAPERCLIP_RUNTIME_TOOLS_AVAILABLE", "").split(",")
    if context.get("outcome") == "connected":
        result = {"status": "continuing", "detail": "The connection is ready; continuing the task with it."}
        service = service_arg or guess_query(wake_prompt)
        result["toolCall"] = use_connected_service(service, task_title(wake_prompt) or service)
    elif context.get("outcome") == "declined":
        result = {"status": "alternatives", "detail": "The connection was declined; pursuing alternatives."}
    elif "connections_search" not in available:
        result = {
            "status": "no_runtime_tools",
            "detail": "No runtime tools in this run; working without them.",
        }
    else:
        query = service_arg or guess_query(wake_prompt)
        found = call_tool("PAPERCLIP_RUNTIME_TOOLS_CONNECTIONS_SEARCH_URL", {"query": query})
        top = (found.get("results") or [None])[0]
        print(f"connections_search({query!r}) -> {json.dumps(top) if top else found}")
        if top is None:
            result = {"status": "no_service", "query": query, "detail": found.get("error")}
        elif top.get("state") == "ready":
            result = {"status": "ready", "service": top["service"], "connectionId": top.get("connectionId")}
        elif top.get("state") == "unavailable":
            result = {"status": "unavailable", "service": top["service"], "reason": top.get("reason")}
        else:
            requested = call_tool(
                "PAPERCLIP_RUNTIME_TOOLS_CONNECTION_REQUEST_URL", {"service": top["service"]}
            )
            print(f"connection_request({top['service']!r}) -> {json.dumps(requested)}")
            result = {"status": requested.get("state") or "error", "service": top["service"], **requested}
    print(json.dumps({"result": result}))
    session = os.environ.get("PAPERCLIP_SESSION_ID") or f"example-{uuid.uuid4()}"
    print(json.dumps({"paperclipSession": {"id": session}}))
    failure = failure_of(result)
    if failure:
        # A run that could not reach its tools did not do its work: say so, and let the run fail.
        print(f"runtime tools failed: {failure}", file=sys.stderr)
        return 1
    return 0


def failure_of(result: dict) -> str | None:
    """Why this turn failed, when a runtime tool or gateway call did not answer or answered an error."""
    if result.get("status") in ("error", "no_service") and result.get("detail"):
        return str(result["detail"])
    if result.get("error"):
        return str(result["error"])
    tool_call = result.get("toolCall") or {}
    if tool_call.get("gateway") == "error":
        return str(tool_call.get("detail"))
    return None


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
