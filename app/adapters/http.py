"""HTTP adapter: POST one turn to the agent's HTTP service.

Agent configuration (`adapter_config`): `url`, optional `headers` (e.g. the service's own API key),
`payloadTemplate` (extra JSON fields), `timeoutSeconds` (read timeout, default 120) and `connectTimeoutSeconds`
(default 10).

The request body is `{...payloadTemplate, agentId, runId, context, prompt, connectionInstructions,
paperclipRuntimeTools, sessionId}`: the server-owned fields come last, so a template can never override them.
`connectionInstructions` is `{text, digest}` or null and is also in `context`; `sessionId` is the session to resume
(null: start fresh). A 2xx answer means the turn succeeded; a JSON answer may carry `sessionId` to report the
agent's session. Redirects are not followed.

The URL must pass the outbound guard (`app.core.net_guard`): no loopback, private, link-local or metadata
addresses after DNS resolution, unless the operator allow-lists the host in `SWITCHBOARD_OUTBOUND_ALLOWED_HOSTS`.
"""

from __future__ import annotations

import json

import httpx

from app.adapters import AdapterResult, Invocation, TailBuffer
from app.core.net_guard import UnsafeUrl, check_outbound_url, guarded_transport

DEFAULT_READ_TIMEOUT = 120.0
DEFAULT_CONNECT_TIMEOUT = 10.0
SERVER_FIELDS = (
    "agentId",
    "runId",
    "context",
    "prompt",
    "connectionInstructions",
    "paperclipRuntimeTools",
    "sessionId",
)


def request_body(invocation: Invocation) -> dict:
    template = invocation.config.get("payloadTemplate") or {}
    if not isinstance(template, dict):
        template = {}
    # Server-owned keys are dropped from the template and written last, so they win and come last in the body.
    return {
        **{k: v for k, v in template.items() if k not in SERVER_FIELDS},
        "agentId": invocation.agent_id,
        "runId": invocation.run_id,
        "context": invocation.context,
        "prompt": invocation.prompt,
        "connectionInstructions": invocation.connection_instructions,
        "paperclipRuntimeTools": invocation.runtime_tools,
        "sessionId": invocation.resume_session_id,
    }


def _headers(config: dict) -> dict[str, str]:
    headers = config.get("headers") or {}
    result = {str(k): str(v) for k, v in headers.items()} if isinstance(headers, dict) else {}
    result["Content-Type"] = "application/json"
    return result


class HttpAdapter:
    def execute(self, invocation: Invocation) -> AdapterResult:
        config = invocation.config
        url = config.get("url")
        if not isinstance(url, str) or not url:
            return AdapterResult(ok=False, error="The HTTP adapter needs a url.")
        try:
            check_outbound_url(url)
        except UnsafeUrl as exc:
            return AdapterResult(ok=False, error=str(exc))
        try:
            timeout = httpx.Timeout(
                float(config.get("timeoutSeconds") or DEFAULT_READ_TIMEOUT),
                connect=float(config.get("connectTimeoutSeconds") or DEFAULT_CONNECT_TIMEOUT),
            )
        except (TypeError, ValueError):
            return AdapterResult(ok=False, error="timeoutSeconds and connectTimeoutSeconds must be numbers.")
        body = json.dumps(request_body(invocation), ensure_ascii=False).encode("utf-8")
        buffer = TailBuffer()
        try:
            with (
                httpx.Client(
                    transport=guarded_transport(), timeout=timeout, follow_redirects=False, trust_env=False
                ) as client,
                client.stream("POST", url, content=body, headers=_headers(config)) as response,
            ):
                for chunk in response.iter_bytes():
                    buffer.write(chunk)
                status = response.status_code
        except httpx.TimeoutException:
            return AdapterResult(
                ok=False, stdout=buffer.text(), timed_out=True, error="The agent service timed out."
            )
        except httpx.HTTPError as exc:
            return AdapterResult(ok=False, stdout=buffer.text(), error=f"The agent service failed: {exc}")
        text = buffer.text()
        session_id = None
        if not buffer.truncated:
            try:
                data = json.loads(text) if text.strip() else None
            except ValueError:
                data = None
            value = data.get("sessionId") if isinstance(data, dict) else None
            if isinstance(value, str) and 0 < len(value) <= 300:
                session_id = value
        ok = 200 <= status < 300
        return AdapterResult(
            ok=ok,
            stdout=text,
            http_status=status,
            session_id=session_id,
            truncated=buffer.truncated,
            error=None if ok else f"The agent service answered HTTP {status}.",
        )
