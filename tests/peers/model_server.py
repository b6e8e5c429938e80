"""A scripted model server on loopback that the real agent CLIs (Claude Code, Codex, Gemini CLI) talk to.

It speaks the wire protocols the CLIs use, enough for them to run an agent loop:

* Anthropic Messages: `POST /v1/messages` (with or without `?beta=true`), streaming SSE (message_start,
  content_block_start/delta/stop for text and tool_use, message_delta with stop_reason and usage, message_stop)
  or one JSON message when `stream` is false; `POST /v1/messages/count_tokens`.
* OpenAI Responses: `POST /v1/responses`, streaming SSE (response.created, response.in_progress,
  response.output_item.added/done for `message` and `function_call` items, text and argument deltas,
  response.completed with usage); `GET /v1/models` answers an empty-ish model list.
* Gemini API (Gemini CLI with GOOGLE_GEMINI_BASE_URL): `POST /v1beta/models/<model>:streamGenerateContent`
  (SSE, one chunk), `:generateContent`, `:countTokens`.

What to answer comes from a script: rules evaluated per request, first match wins. A rule is a predicate over the
parsed `Conversation` and a reply, `ToolCall` (call the OFFERED tool whose name equals or ends with a suffix, so
`ToolCall("connections_search", ...)` finds `mcp__switchboard__connections_search`) or `Text`. A request that
offers no tools is a side request (title/summary generation and the like): it gets `side_reply` and is recorded as
a side request. A main request no rule matches gets a text saying so, so a test fails loudly rather than hangs.

    script = [
        Rule(no_tool_result_yet, ToolCall("connections_search", {"query": "crm"})),
        Rule(last_tool_result_from("connections_search"), Text("Found it.")),
    ]
    with ScriptedModelServer(script) as server:
        ...  # ANTHROPIC_BASE_URL / GOOGLE_GEMINI_BASE_URL = server.url; a Codex provider base_url = server.url + "/v1"
        assert "crm" in server.main_requests()[1].conversation.last_tool_result.text

Every request is recorded (parsed Conversation + raw JSON + path + headers, API keys redacted), thread-safely.
"""

from __future__ import annotations

import itertools
import json
import re
import threading
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlsplit

ANTHROPIC = "anthropic"
RESPONSES = "responses"
GEMINI = "gemini"
# Tools the CLI uses to load other tools (not the agent's work): Claude Code defers MCP tools behind ToolSearch
# unless ENABLE_TOOL_SEARCH=false; the server then calls ToolSearch("select:<name>") first, by itself.
TOOL_SEARCH = "ToolSearch"
HARNESS_TOOLS = {TOOL_SEARCH}

# Headers whose values are credentials: recorded as "<redacted>".
_SECRET_HEADERS = {"x-api-key", "authorization", "x-goog-api-key"}


# -- the parsed conversation ---------------------------------------------------------------------------------


@dataclass(frozen=True)
class ToolCallSeen:
    """A tool call the assistant made earlier in the conversation (as the client sent it back)."""

    call_id: str
    name: str
    arguments: Any


@dataclass(frozen=True)
class ToolResultSeen:
    """A tool result in the conversation; `tool_name` is found through the matching call's id ("" if unknown)."""

    call_id: str
    tool_name: str
    text: str
    is_error: bool


@dataclass(frozen=True)
class Item:
    """One entry of the conversation in order: kind is "user", "assistant", "tool_call" or "tool_result"."""

    kind: str
    text: str = ""
    call: ToolCallSeen | None = None
    result: ToolResultSeen | None = None


@dataclass(frozen=True)
class Conversation:
    """What one model request asked, in API-neutral terms."""

    api: str  # ANTHROPIC, RESPONSES or GEMINI
    model: str
    # Anthropic `system` blocks, Responses `instructions` + developer/system messages, Gemini systemInstruction.
    system: str
    tools: tuple[str, ...]  # names of the offered tools
    items: tuple[Item, ...]
    stream: bool
    # Responses namespaced tools: full name ("mcp__srv__tool") -> (namespace, name) as the wire wants them back.
    namespaced: dict[str, tuple[str, str]] = field(default_factory=dict, compare=False)

    @property
    def user_texts(self) -> list[str]:
        return [item.text for item in self.items if item.kind == "user"]

    @property
    def assistant_texts(self) -> list[str]:
        return [item.text for item in self.items if item.kind == "assistant"]

    @property
    def tool_calls(self) -> list[ToolCallSeen]:
        return [item.call for item in self.items if item.call is not None]

    @property
    def tool_results(self) -> list[ToolResultSeen]:
        return [item.result for item in self.items if item.result is not None]

    @property
    def last_tool_result(self) -> ToolResultSeen | None:
        results = self.tool_results
        return results[-1] if results else None

    @property
    def current_turn(self) -> tuple[Item, ...]:
        """The items since the last user text (the turn being answered now; earlier turns come from a resume)."""
        last_user = max((i for i, item in enumerate(self.items) if item.kind == "user"), default=-1)
        return self.items[last_user + 1 :]

    @property
    def turn_tool_results(self) -> list[ToolResultSeen]:
        """The current turn's tool results, without the harness's own tool loading (Claude Code's ToolSearch)."""
        return [
            item.result
            for item in self.current_turn
            if item.result is not None and item.result.tool_name not in HARNESS_TOOLS
        ]

    def find_tool(self, suffix: str) -> str | None:
        """The offered tool named `suffix`, else one ending with it after a separator (`mcp__srv__suffix`,
        Gemini's `mcp_srv_suffix`)."""
        if suffix in self.tools:
            return suffix
        return next((name for name in self.tools if tool_matches(name, suffix)), None)


def tool_matches(name: str, suffix: str) -> bool:
    """`name` is the tool `suffix`, bare or qualified by a server prefix (`mcp__srv__x`, `mcp_srv_x`, `srv.x`)."""
    return name == suffix or any(name.endswith(separator + suffix) for separator in ("__", "_", ".", "/"))


def _text_of(content: Any) -> str:
    """Plain text of a content value: a string, or a list of blocks with `text` (nested `content` too)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if isinstance(block, str):
                parts.append(block)
            elif isinstance(block, dict):
                if isinstance(block.get("text"), str):
                    parts.append(block["text"])
                elif "content" in block:
                    parts.append(_text_of(block["content"]))
        return "\n".join(part for part in parts if part)
    if isinstance(content, dict):
        return _text_of([content])
    return str(content)


def parse_anthropic(body: dict[str, Any]) -> Conversation:
    system = body.get("system")
    system_text = _text_of(system) if system is not None else ""
    tools = tuple(tool.get("name", "") for tool in body.get("tools") or [] if isinstance(tool, dict))
    items: list[Item] = []
    names: dict[str, str] = {}
    for message in body.get("messages") or []:
        role = message.get("role")
        content = message.get("content")
        blocks = [{"type": "text", "text": content}] if isinstance(content, str) else content or []
        texts: list[str] = []
        for block in blocks:
            kind = block.get("type")
            if kind == "text":
                texts.append(block.get("text", ""))
            elif kind == "tool_use":
                call = ToolCallSeen(block.get("id", ""), block.get("name", ""), block.get("input"))
                names[call.call_id] = call.name
                items.append(Item("tool_call", call=call))
            elif kind == "tool_result":
                call_id = block.get("tool_use_id", "")
                result = ToolResultSeen(
                    call_id,
                    names.get(call_id, ""),
                    _text_of(block.get("content")),
                    bool(block.get("is_error")),
                )
                items.append(Item("tool_result", result=result))
        # A user message that carries tool results is the tool turn, not a new user turn (Claude Code appends
        # system reminders as text blocks next to results).
        has_results = any(block.get("type") == "tool_result" for block in blocks)
        text = "\n".join(t for t in texts if t)
        if text and not (role == "user" and has_results):
            items.append(Item("user" if role == "user" else "assistant", text=text))
    return Conversation(
        ANTHROPIC, body.get("model", ""), system_text, tools, tuple(items), bool(body.get("stream"))
    )


def _qualified(namespace: str, name: str) -> str:
    return f"{namespace}{name}" if namespace.endswith("__") else f"{namespace}__{name}"


def _responses_tool_names(tools: list[Any]) -> tuple[tuple[str, ...], dict[str, tuple[str, str]]]:
    """Offered tool names, and the namespaced ones' (namespace, name). Codex offers each MCP server's tools as a
    `namespace` tool named `mcp__<server>`; a call names the namespace and the inner tool separately."""
    names: list[str] = []
    namespaced: dict[str, tuple[str, str]] = {}
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        if tool.get("type") == "namespace":
            prefix = tool.get("name", "")
            for inner in tool.get("tools") or []:
                full = _qualified(prefix, inner.get("name", ""))
                names.append(full)
                namespaced[full] = (prefix, inner.get("name", ""))
        elif "name" in tool:
            names.append(tool["name"])
        elif tool.get("type"):
            names.append(tool["type"])
    return tuple(names), namespaced


def parse_responses(body: dict[str, Any]) -> Conversation:
    system_parts = [body["instructions"]] if isinstance(body.get("instructions"), str) else []
    items: list[Item] = []
    names: dict[str, str] = {}
    raw_input = body.get("input")
    entries = (
        [{"type": "message", "role": "user", "content": raw_input}]
        if isinstance(raw_input, str)
        else raw_input
    )
    for entry in entries or []:
        kind = entry.get("type", "message")
        if kind == "message":
            role = entry.get("role")
            text = _text_of(entry.get("content"))
            if role in ("developer", "system"):
                system_parts.append(text)
            elif text:
                items.append(Item("user" if role == "user" else "assistant", text=text))
        elif kind in ("function_call", "custom_tool_call"):
            name = entry.get("name", "")
            if entry.get("namespace"):
                name = _qualified(entry["namespace"], name)
            raw = entry.get("arguments", entry.get("input"))
            try:
                arguments = json.loads(raw) if isinstance(raw, str) else raw
            except ValueError:
                arguments = raw
            call = ToolCallSeen(entry.get("call_id", ""), name, arguments)
            names[call.call_id] = name
            items.append(Item("tool_call", call=call))
        elif kind in ("function_call_output", "custom_tool_call_output"):
            call_id = entry.get("call_id", "")
            output = entry.get("output")
            is_error = False
            if isinstance(output, dict):
                is_error = output.get("success") is False
                output = output.get("content", output)
            result = ToolResultSeen(call_id, names.get(call_id, ""), _text_of(output), is_error)
            items.append(Item("tool_result", result=result))
    tools, namespaced = _responses_tool_names(body.get("tools") or [])
    return Conversation(
        RESPONSES,
        body.get("model", ""),
        "\n\n".join(system_parts),
        tools,
        tuple(items),
        bool(body.get("stream")),
        namespaced,
    )


def parse_gemini(model: str, body: dict[str, Any]) -> Conversation:
    """A Gemini API `generateContent` request (what Gemini CLI sends to GOOGLE_GEMINI_BASE_URL)."""
    system = body.get("systemInstruction") or {}
    system_text = _text_of(system.get("parts")) if isinstance(system, dict) else _text_of(system)
    tools = tuple(
        declaration.get("name", "")
        for tool in body.get("tools") or []
        for declaration in tool.get("functionDeclarations") or []
    )
    items: list[Item] = []
    counts: dict[str, int] = {}
    for content in body.get("contents") or []:
        role = content.get("role", "user")
        texts: list[str] = []
        for part in content.get("parts") or []:
            if "functionCall" in part:
                call = part["functionCall"]
                name = call.get("name", "")
                counts[name] = counts.get(name, 0) + 1
                call_id = call.get("id") or f"{name}#{counts[name]}"
                items.append(Item("tool_call", call=ToolCallSeen(call_id, name, call.get("args"))))
            elif "functionResponse" in part:
                response = part["functionResponse"]
                name = response.get("name", "")
                call_id = response.get("id") or f"{name}#{counts.get(name, 0)}"
                payload = response.get("response") or {}
                is_error = isinstance(payload, dict) and "error" in payload
                text = (
                    payload.get("error" if is_error else "output", payload)
                    if isinstance(payload, dict)
                    else payload
                )
                if not isinstance(text, str):
                    text = json.dumps(text)
                items.append(Item("tool_result", result=ToolResultSeen(call_id, name, text, is_error)))
            elif isinstance(part.get("text"), str) and not part.get("thought"):
                texts.append(part["text"])
        text = "\n".join(t for t in texts if t)
        if text:
            items.append(Item("user" if role == "user" else "assistant", text=text))
    return Conversation(GEMINI, model, system_text, tools, tuple(items), True)


# -- the script ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Text:
    """Reply with a final text (stop_reason end_turn / a completed message)."""

    text: str


@dataclass(frozen=True)
class ToolCall:
    """Reply by calling the offered tool whose name equals or ends with `tool_suffix`."""

    tool_suffix: str
    arguments: dict[str, Any] = field(default_factory=dict)


Reply = Text | ToolCall
Predicate = Callable[[Conversation], bool]


@dataclass(frozen=True)
class Rule:
    """When `when(conversation)` holds, answer `reply` (or `reply(conversation)` when it is callable)."""

    when: Predicate
    reply: Reply | Callable[[Conversation], Reply]


def always(_: Conversation) -> bool:
    return True


def no_tool_result_yet(conversation: Conversation) -> bool:
    """No tool result in the current turn (since the last user text)."""
    return not conversation.turn_tool_results


def last_tool_result_from(suffix: str) -> Predicate:
    """The current turn's latest tool result came from the tool named `suffix` (or `…__suffix`)."""

    def check(conversation: Conversation) -> bool:
        results = conversation.turn_tool_results
        if not results:
            return False
        return tool_matches(results[-1].tool_name, suffix)

    return check


def user_text_contains(text: str) -> Predicate:
    """The latest user text contains `text`."""

    def check(conversation: Conversation) -> bool:
        texts = conversation.user_texts
        return bool(texts) and text in texts[-1]

    return check


def all_of(*predicates: Predicate) -> Predicate:
    return lambda conversation: all(predicate(conversation) for predicate in predicates)


# -- records -------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class RecordedRequest:
    """One request the server answered. `kind` is "main", "side" or "other" (not a model request)."""

    method: str
    path: str
    headers: dict[str, str]
    body: Any
    kind: str
    conversation: Conversation | None
    reply: Reply | None


DEFAULT_SIDE_REPLY = "Side reply."
# What the model says for a main request no rule matched, or a ToolCall whose tool is not offered.
NO_RULE = "SCRIPT ERROR: no rule matched this request."


def _deferred_tool(body: dict[str, Any], suffix: str) -> str | None:
    """A deferred (not yet loaded) MCP tool named `mcp__<server>__<suffix>` that the request mentions."""
    pattern = re.compile(r"\b(mcp__[A-Za-z0-9_-]+?__" + re.escape(suffix) + r")\b")
    texts = [
        _text_of(message.get("content"))
        for message in body.get("messages") or []
        if isinstance(message, dict)
    ]
    match = pattern.search("\n".join(texts))
    return match.group(1) if match else None


def _sse(event: str, data: dict[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data)}\n\n".encode()


def _sse_data(payload: bytes) -> list[dict[str, Any]]:
    return [json.loads(line[6:]) for line in payload.decode().splitlines() if line.startswith("data: ")]


def _estimate_tokens(body: bytes) -> int:
    return max(1, len(body) // 4)


class ScriptedModelServer:
    """A threaded HTTP server on 127.0.0.1:<free port> answering model requests from a script. A context manager."""

    def __init__(
        self,
        script: Sequence[Rule] = (),
        *,
        side_reply: str = DEFAULT_SIDE_REPLY,
        is_side_request: Callable[[Conversation, dict[str, Any]], bool] | None = None,
    ):
        self._lock = threading.Lock()
        self._script: list[Rule] = list(script)
        self.side_reply = side_reply
        self._is_side = is_side_request or (lambda conversation, body: not conversation.tools)
        self._records: list[RecordedRequest] = []
        self._ids = itertools.count(1)
        self._httpd: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None

    # -- script and records ---------------------------------------------------------------------------------

    def set_script(self, script: Sequence[Rule]) -> None:
        with self._lock:
            self._script = list(script)

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request, oldest first (a copy)."""
        with self._lock:
            return list(self._records)

    def main_requests(self) -> list[RecordedRequest]:
        """Model requests of the agent loop (they offer tools), oldest first."""
        return [record for record in self.requests if record.kind == "main"]

    def side_requests(self) -> list[RecordedRequest]:
        """Model requests outside the agent loop (no tools offered: titles, summaries, …), oldest first."""
        return [record for record in self.requests if record.kind == "side"]

    def other_requests(self) -> list[RecordedRequest]:
        """Requests that are not model turns (count_tokens, /v1/models, unknown paths)."""
        return [record for record in self.requests if record.kind == "other"]

    def tool_results(self, suffix: str) -> list[ToolResultSeen]:
        """Every distinct tool result from the tool named `suffix` (or `…__suffix`) that reached the model."""
        seen: dict[str, ToolResultSeen] = {}
        for record in self.main_requests():
            assert record.conversation is not None
            for result in record.conversation.tool_results:
                if tool_matches(result.tool_name, suffix):
                    seen.setdefault(result.call_id, result)
        return list(seen.values())

    def _record(self, record: RecordedRequest) -> None:
        with self._lock:
            self._records.append(record)

    def choose(self, conversation: Conversation, body: dict[str, Any]) -> tuple[str, Reply]:
        """("main" | "side", the reply) for a parsed request."""
        if self._is_side(conversation, body):
            return "side", Text(self.side_reply)
        with self._lock:
            script = list(self._script)
        for rule in script:
            if rule.when(conversation):
                reply = rule.reply(conversation) if callable(rule.reply) else rule.reply
                if isinstance(reply, ToolCall) and conversation.find_tool(reply.tool_suffix) is None:
                    deferred = _deferred_tool(body, reply.tool_suffix)
                    if deferred and TOOL_SEARCH in conversation.tools:
                        return "main", ToolCall(
                            TOOL_SEARCH, {"query": f"select:{deferred}", "max_results": 5}
                        )
                    offered = ", ".join(conversation.tools)
                    return "main", Text(
                        f"SCRIPT ERROR: no offered tool matches {reply.tool_suffix!r}; offered: {offered}"
                    )
                return "main", reply
        return "main", Text(NO_RULE)

    def next_id(self) -> str:
        return f"{next(self._ids):04d}{uuid.uuid4().hex[:20]}"

    # -- lifecycle --------------------------------------------------------------------------------------------

    @property
    def port(self) -> int:
        assert self._httpd is not None, "server not started"
        return int(self._httpd.server_address[1])

    @property
    def url(self) -> str:
        """Base URL without a path: Claude Code's ANTHROPIC_BASE_URL; Codex's provider base_url is url + "/v1"."""
        return f"http://127.0.0.1:{self.port}"

    def start(self) -> ScriptedModelServer:
        handler = type("BoundHandler", (_Handler,), {"owner": self})
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self._httpd.daemon_threads = True
        self._thread = threading.Thread(target=self._httpd.serve_forever, name="scripted-model", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        if self._httpd is None:
            return
        self._httpd.shutdown()
        self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
        self._httpd = None
        self._thread = None

    def __enter__(self) -> ScriptedModelServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


# -- wire formats --------------------------------------------------------------------------------------------


def _anthropic_blocks(
    server: ScriptedModelServer, conversation: Conversation, reply: Reply
) -> list[dict[str, Any]]:
    if isinstance(reply, Text):
        return [{"type": "text", "text": reply.text}]
    name = conversation.find_tool(reply.tool_suffix)
    return [{"type": "tool_use", "id": f"toolu_{server.next_id()}", "name": name, "input": reply.arguments}]


def anthropic_message(
    server: ScriptedModelServer, conversation: Conversation, reply: Reply, input_tokens: int
) -> dict[str, Any]:
    blocks = _anthropic_blocks(server, conversation, reply)
    output_tokens = max(1, len(json.dumps(blocks)) // 4)
    return {
        "id": f"msg_{server.next_id()}",
        "type": "message",
        "role": "assistant",
        "model": conversation.model,
        "content": blocks,
        "stop_reason": "tool_use" if isinstance(reply, ToolCall) else "end_turn",
        "stop_sequence": None,
        "usage": {
            "input_tokens": input_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
            "output_tokens": output_tokens,
        },
    }


def anthropic_stream(message: dict[str, Any]) -> bytes:
    usage = message["usage"]
    start = dict(message, content=[], stop_reason=None, usage=dict(usage, output_tokens=1))
    out = [_sse("message_start", {"type": "message_start", "message": start}), _sse("ping", {"type": "ping"})]
    for index, block in enumerate(message["content"]):
        if block["type"] == "text":
            out.append(
                _sse(
                    "content_block_start",
                    {
                        "type": "content_block_start",
                        "index": index,
                        "content_block": {"type": "text", "text": ""},
                    },
                )
            )
            text = block["text"]
            for chunk in [text[i : i + 40] for i in range(0, len(text), 40)] or [""]:
                delta = {"type": "text_delta", "text": chunk}
                out.append(
                    _sse(
                        "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
                    )
                )
        else:
            head = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            out.append(
                _sse(
                    "content_block_start",
                    {"type": "content_block_start", "index": index, "content_block": head},
                )
            )
            arguments = json.dumps(block["input"])
            for chunk in [arguments[i : i + 40] for i in range(0, len(arguments), 40)]:
                delta = {"type": "input_json_delta", "partial_json": chunk}
                out.append(
                    _sse(
                        "content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta}
                    )
                )
        out.append(_sse("content_block_stop", {"type": "content_block_stop", "index": index}))
    delta = {"stop_reason": message["stop_reason"], "stop_sequence": None}
    out.append(
        _sse(
            "message_delta",
            {"type": "message_delta", "delta": delta, "usage": {"output_tokens": usage["output_tokens"]}},
        )
    )
    out.append(_sse("message_stop", {"type": "message_stop"}))
    return b"".join(out)


def responses_stream(
    server: ScriptedModelServer,
    conversation: Conversation,
    reply: Reply,
    body: dict[str, Any],
    input_tokens: int,
) -> bytes:
    response_id = f"resp_{server.next_id()}"
    seq = itertools.count()

    def event(kind: str, **data: Any) -> bytes:
        return _sse(kind, {"type": kind, "sequence_number": next(seq), **data})

    base = {
        "id": response_id,
        "object": "response",
        "created_at": 1_700_000_000,
        "model": conversation.model,
        "status": "in_progress",
        "output": [],
        "usage": None,
        "error": None,
        "incomplete_details": None,
        "parallel_tool_calls": bool(body.get("parallel_tool_calls")),
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": [],
    }
    out = [event("response.created", response=base), event("response.in_progress", response=base)]
    if isinstance(reply, Text):
        item_id = f"msg_{server.next_id()}"
        head = {"id": item_id, "type": "message", "status": "in_progress", "role": "assistant", "content": []}
        out.append(event("response.output_item.added", output_index=0, item=head))
        part = {"type": "output_text", "text": "", "annotations": []}
        out.append(
            event("response.content_part.added", item_id=item_id, output_index=0, content_index=0, part=part)
        )
        text = reply.text
        for chunk in [text[i : i + 40] for i in range(0, len(text), 40)]:
            out.append(
                event(
                    "response.output_text.delta",
                    item_id=item_id,
                    output_index=0,
                    content_index=0,
                    delta=chunk,
                    logprobs=[],
                )
            )
        out.append(
            event(
                "response.output_text.done",
                item_id=item_id,
                output_index=0,
                content_index=0,
                text=text,
                logprobs=[],
            )
        )
        done_part = {"type": "output_text", "text": text, "annotations": []}
        out.append(
            event(
                "response.content_part.done", item_id=item_id, output_index=0, content_index=0, part=done_part
            )
        )
        item = dict(head, status="completed", content=[done_part])
    else:
        name = conversation.find_tool(reply.tool_suffix) or reply.tool_suffix
        item_id = f"fc_{server.next_id()}"
        call_id = f"call_{server.next_id()}"
        arguments = json.dumps(reply.arguments)
        head = {
            "id": item_id,
            "type": "function_call",
            "status": "in_progress",
            "call_id": call_id,
            "name": name,
            "arguments": "",
        }
        if name in conversation.namespaced:
            head["namespace"], head["name"] = conversation.namespaced[name]
        out.append(event("response.output_item.added", output_index=0, item=head))
        for chunk in [arguments[i : i + 40] for i in range(0, len(arguments), 40)]:
            out.append(
                event("response.function_call_arguments.delta", item_id=item_id, output_index=0, delta=chunk)
            )
        out.append(
            event(
                "response.function_call_arguments.done", item_id=item_id, output_index=0, arguments=arguments
            )
        )
        item = dict(head, status="completed", arguments=arguments)
    out.append(event("response.output_item.done", output_index=0, item=item))
    output_tokens = max(1, len(json.dumps(item)) // 4)
    usage = {
        "input_tokens": input_tokens,
        "input_tokens_details": {"cached_tokens": 0},
        "output_tokens": output_tokens,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": input_tokens + output_tokens,
    }
    out.append(
        event("response.completed", response=dict(base, status="completed", output=[item], usage=usage))
    )
    return b"".join(out)


def gemini_response(
    server: ScriptedModelServer, conversation: Conversation, reply: Reply, input_tokens: int
) -> dict[str, Any]:
    """One GenerateContentResponse holding the whole reply (a stream of one chunk)."""
    if isinstance(reply, Text):
        parts: list[dict[str, Any]] = [{"text": reply.text}]
    else:
        name = conversation.find_tool(reply.tool_suffix) or reply.tool_suffix
        parts = [{"functionCall": {"name": name, "args": reply.arguments}}]
    output_tokens = max(1, len(json.dumps(parts)) // 4)
    return {
        "candidates": [{"content": {"role": "model", "parts": parts}, "finishReason": "STOP", "index": 0}],
        "usageMetadata": {
            "promptTokenCount": input_tokens,
            "candidatesTokenCount": output_tokens,
            "totalTokenCount": input_tokens + output_tokens,
        },
        "modelVersion": conversation.model,
        "responseId": f"gem_{server.next_id()}",
    }


_GEMINI_PATH = re.compile(r"^/(?:v1beta|v1|v1alpha)/models/(?P<model>[^/:]+):(?P<method>[A-Za-z]+)$")


class _Handler(BaseHTTPRequestHandler):
    owner: ScriptedModelServer
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the stdlib's signature
        pass

    def _send(self, status: int, payload: bytes, content_type: str) -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(payload)))
        if content_type.startswith("text/event-stream"):
            self.send_header("Cache-Control", "no-cache")
        self.end_headers()
        self.wfile.write(payload)
        self.wfile.flush()

    def _json(self, status: int, payload: Any) -> None:
        self._send(status, json.dumps(payload).encode(), "application/json")

    def _headers(self) -> dict[str, str]:
        return {
            key.lower(): ("<redacted>" if key.lower() in _SECRET_HEADERS else value)
            for key, value in self.headers.items()
        }

    def do_GET(self) -> None:  # noqa: N802 - the stdlib's name
        path = urlsplit(self.path).path
        self.owner._record(RecordedRequest("GET", self.path, self._headers(), None, "other", None, None))
        if path.rstrip("/") in ("/v1/models", "/models"):
            self._json(200, {"object": "list", "data": [], "models": []})
        else:
            self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": f"no {path}"}})

    def do_HEAD(self) -> None:  # noqa: N802 - the stdlib's name
        # Claude Code without CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC probes `HEAD /api/hello` on the base URL.
        self.owner._record(RecordedRequest("HEAD", self.path, self._headers(), None, "other", None, None))
        self.send_response(200)
        self.send_header("Content-Length", "0")
        self.end_headers()

    def do_POST(self) -> None:  # noqa: N802 - the stdlib's name
        length = int(self.headers.get("Content-Length") or 0)
        raw = self.rfile.read(length) if length else b""
        path = urlsplit(self.path).path.rstrip("/")
        try:
            body = json.loads(raw) if raw else {}
        except ValueError:
            self.owner._record(
                RecordedRequest(
                    "POST", self.path, self._headers(), raw.decode("latin-1"), "other", None, None
                )
            )
            self._json(
                400, {"type": "error", "error": {"type": "invalid_request_error", "message": "bad JSON"}}
            )
            return
        tokens = _estimate_tokens(raw)
        if path == "/v1/messages/count_tokens":
            self.owner._record(RecordedRequest("POST", self.path, self._headers(), body, "other", None, None))
            self._json(200, {"input_tokens": tokens})
        elif path == "/v1/messages":
            conversation = parse_anthropic(body)
            kind, reply = self.owner.choose(conversation, body)
            self.owner._record(
                RecordedRequest("POST", self.path, self._headers(), body, kind, conversation, reply)
            )
            message = anthropic_message(self.owner, conversation, reply, tokens)
            if conversation.stream:
                self._send(200, anthropic_stream(message), "text/event-stream; charset=utf-8")
            else:
                self._json(200, message)
        elif path == "/v1/responses":
            conversation = parse_responses(body)
            kind, reply = self.owner.choose(conversation, body)
            self.owner._record(
                RecordedRequest("POST", self.path, self._headers(), body, kind, conversation, reply)
            )
            payload = responses_stream(self.owner, conversation, reply, body, tokens)
            if conversation.stream:
                self._send(200, payload, "text/event-stream; charset=utf-8")
            else:
                # The same response object response.completed carries.
                completed = _sse_data(payload)[-1]
                self._json(200, completed["response"])
        elif (match := _GEMINI_PATH.match(path)) and match["method"] in (
            "streamGenerateContent",
            "generateContent",
        ):
            conversation = parse_gemini(match["model"], body)
            kind, reply = self.owner.choose(conversation, body)
            self.owner._record(
                RecordedRequest("POST", self.path, self._headers(), body, kind, conversation, reply)
            )
            response = gemini_response(self.owner, conversation, reply, tokens)
            if match["method"] == "streamGenerateContent":
                self._send(200, f"data: {json.dumps(response)}\r\n\r\n".encode(), "text/event-stream")
            else:
                self._json(200, response)
        elif (match := _GEMINI_PATH.match(path)) and match["method"] == "countTokens":
            self.owner._record(RecordedRequest("POST", self.path, self._headers(), body, "other", None, None))
            self._json(200, {"totalTokens": tokens})
        else:
            self.owner._record(RecordedRequest("POST", self.path, self._headers(), body, "other", None, None))
            self._json(404, {"type": "error", "error": {"type": "not_found_error", "message": f"no {path}"}})
