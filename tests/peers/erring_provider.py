"""A provider that answers tool calls with JSON-RPC errors in the ways real servers do (issue 34 item 1).

Written on raw HTTP (the SDK's servers cannot be made to send an error at HTTP 500 or drop a stream), on loopback in
a daemon thread. It answers `initialize`, notifications and `tools/list` like a Streamable HTTP server (plain JSON,
no sessions) and lists one tool, `forecast`, which declares an `outputSchema`. Every `tools/call` is answered the
way `server.mode` says:

- `json`: HTTP 200, `application/json`, a JSON-RPC error object for the call's id;
- `status`: HTTP 500, `application/json`, the error with `"id": null` (a server that failed before reading the id);
- `sse`: HTTP 200, an SSE stream whose one event is the error, then the connection closes;
- `silent`: HTTP 200, an SSE stream that ends without any event (the provider hung up without answering).

The error's message is `server.message` with `{auth}` replaced by the request's Authorization header, so a test
can check that a provider echoing the credential back never gets it to the agent. Calls are recorded.
"""

from __future__ import annotations

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

ERROR_CODE = -32099
TOOL = {
    "name": "forecast",
    "description": "Forecast for a city.",
    "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}},
    "outputSchema": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "temperatureC": {"type": "number"}},
        "required": ["city", "temperatureC"],
    },
}


class ErringProvider:
    def __init__(self) -> None:
        self.mode = "json"
        self.message = "Forecast backend is down"
        self.calls: list[dict[str, Any]] = []
        owner = self

        class Handler(_Handler):
            provider = owner

        self._http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self._http.daemon_threads = True
        self._thread = threading.Thread(target=self._http.serve_forever, name="erring-provider", daemon=True)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self._http.server_port}/mcp"

    def start(self) -> ErringProvider:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._http.shutdown()
        self._http.server_close()


class _Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    provider: ErringProvider

    def log_message(self, format: str, *args: Any) -> None:  # noqa: A002 - the base class's name
        pass

    def do_GET(self) -> None:  # no standalone stream
        self._send(405, b"", {"Allow": "POST, DELETE"})

    def do_DELETE(self) -> None:
        self._send(200, b"")

    def do_POST(self) -> None:
        message = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)))
        method, id_ = message.get("method"), message.get("id")
        if id_ is None:
            self._send(202, b"")
        elif method == "initialize":
            self._json(200, _result(id_, _initialized(message["params"]["protocolVersion"])))
        elif method == "tools/list":
            self._json(200, _result(id_, {"tools": [TOOL]}))
        elif method == "tools/call":
            self.provider.calls.append(message["params"])
            self._answer_call(id_)
        else:
            self._json(200, _error(id_, -32601, f"Method not found: {method}"))

    def _answer_call(self, id_: Any) -> None:
        mode = self.provider.mode
        text = self.provider.message.replace("{auth}", self.headers.get("Authorization", ""))
        if mode == "json":
            self._json(200, _error(id_, ERROR_CODE, text))
        elif mode == "status":
            self._json(500, _error(None, ERROR_CODE, text))
        elif mode == "sse":
            event = f"event: message\ndata: {json.dumps(_error(id_, ERROR_CODE, text))}\n\n".encode()
            self._send(200, event, {"Content-Type": "text/event-stream", "Connection": "close"})
        elif mode == "silent":
            self._send(200, b"", {"Content-Type": "text/event-stream", "Connection": "close"})
        else:  # pragma: no cover - a test asked for a mode that does not exist
            raise ValueError(mode)

    def _json(self, status: int, body: dict) -> None:
        self._send(status, json.dumps(body).encode(), {"Content-Type": "application/json"})

    def _send(self, status: int, body: bytes, headers: dict[str, str] | None = None) -> None:
        self.send_response(status)
        for name, value in (headers or {}).items():
            self.send_header(name, value)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
        if (headers or {}).get("Connection") == "close":
            self.close_connection = True


def _initialized(version: str) -> dict:
    return {
        "protocolVersion": version,
        "capabilities": {"tools": {}},
        "serverInfo": {"name": "erring", "version": "1"},
    }


def _result(id_: Any, result: dict) -> dict:
    return {"jsonrpc": "2.0", "id": id_, "result": result}


def _error(id_: Any, code: int, message: str) -> dict:
    return {"jsonrpc": "2.0", "id": id_, "error": {"code": code, "message": message}}


def start_erring_provider() -> ErringProvider:
    return ErringProvider().start()
