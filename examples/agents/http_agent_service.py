#!/usr/bin/env python3
"""A minimal agent service for Switchboard's HTTP adapter (Python standard library only).

Start it with `python3 examples/agents/http_agent_service.py --port 8765` and configure an agent with
`adapter_type = "http"` and `adapter_config = {"url": "http://<host>:8765/run", "headers": {"X-Agent-Key": "..."},
"payloadTemplate": {"model": "..."}, "timeoutSeconds": 120}`. (A loopback or private host must be allow-listed by
the operator in `SWITCHBOARD_OUTBOUND_ALLOWED_HOSTS`.)

The request (one POST per turn) is JSON:

    {
      ...payloadTemplate,                 # your own fields; never overrides the ones below
      "agentId": "...", "runId": "...",
      "context": {"issueId": "...", "connectionInstructions": {...} | null,
                  "interactionId"?, "outcome"?: "connected" | "declined", "forceFreshSession"?: true, ...},
      "prompt": "the shared wake prompt (already includes the connection-instruction text)",
      "connectionInstructions": {"text": "...", "digest": "<sha256 hex>"} | null,
      "paperclipRuntimeTools": {"version": 1, "guidance", "mcpEndpoint", "rest": {...}, "bearerToken",
                                "expiresAt", "tools": [...]} | null,
      "sessionId": "<session to resume>" | null
    }

Answer 2xx when the turn succeeded (anything else fails the run), optionally with `{"sessionId": "..."}` to report
the session. Never reuse a session across different `connectionInstructions.digest` values: the server sends
`sessionId: null` when the digest changed or the turn is a continuation.
"""

from __future__ import annotations

import argparse
import json
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

SESSION_DIGESTS: dict[str, str | None] = {}


class AgentHandler(BaseHTTPRequestHandler):
    def do_POST(self):  # noqa: N802 (http.server naming)
        length = int(self.headers.get("Content-Length") or 0)
        try:
            body = json.loads(self.rfile.read(length))
        except ValueError:
            return self._answer(400, {"error": "expected JSON"})
        snapshot = body.get("connectionInstructions")
        digest = snapshot.get("digest") if snapshot else None
        session = body.get("sessionId")
        if session is None or SESSION_DIGESTS.get(session, "") != digest:
            session = f"http-example-{uuid.uuid4()}"
        SESSION_DIGESTS[session] = digest
        prompt = body.get("prompt") or ""
        if snapshot and snapshot["text"] not in prompt:
            prompt += "\n\n" + snapshot["text"]
        print(f"--- run {body.get('runId')} (session {session}) ---\n{prompt}", flush=True)
        tools = body.get("paperclipRuntimeTools")
        self._answer(
            200,
            {
                "sessionId": session,
                "summary": "Prompt received" + (" with runtime tools" if tools else ""),
            },
        )

    def _answer(self, status: int, data: dict) -> None:
        payload = json.dumps(data).encode("utf-8")
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=8765)
    args = parser.parse_args()
    server = ThreadingHTTPServer((args.host, args.port), AgentHandler)
    print(f"example agent service on http://{args.host}:{args.port}/run", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
