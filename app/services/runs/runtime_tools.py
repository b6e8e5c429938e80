"""The runtime tools as an agent sees them: names, protocol, definitions, guidance, and the descriptor and
environment a run is handed."""

from __future__ import annotations

from flask import current_app

from app.core.mcp_messages import tool
from app.models import HeartbeatRun
from app.services.runs.tokens import MintedToken, mint_run_token

SERVER_NAME = "paperclip-runtime-tools"
TOOL_NAMES = ("connections_search", "connection_request")
QUERY_MAX_LENGTH = 200
SERVICE_MAX_LENGTH = 120
# An access request names at most 20 tools (explicit, model-selected lists stay short).
TOOL_NAMES_MAX = 20
TOOL_NAME_MAX_LENGTH = 160

GUIDANCE = (
    "Connection runtime tools: when the task needs a known external service (named by the user or implied by the "
    "work) and you are not sure you can reach it, call connections_search first. If a result is ready, use its "
    "installed tools. If it is available or needs_user_action, call connection_request with the returned service "
    "identifier and follow the returned instruction. If it is unavailable, explain that and do not request it. "
    "After a request answers needs_user_action, finish independent work, then end the run and wait for the "
    "continuation: do not retry or poll, do not ask for credentials in comments, and never claim access you do "
    "not have. A pending connection card stays open across messages; do not request it again. If the user "
    "declined a connection, pursue alternatives and do not request it again unless the user explicitly asks. "
    "Never connect arbitrary MCP server URLs. When a continuation says a connection is connected, use it."
)

TOOL_DEFINITIONS = [
    tool(
        name="connections_search",
        description=(
            "Search the known connectable services and report this run's agent-relative access state for each "
            "(ready, needs_user_action, available, unavailable). Call it before connection_request when a task "
            "needs an external service and access is uncertain. An empty query lists everything."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "maxLength": QUERY_MAX_LENGTH,
                    "description": "Service name or what you need to do, e.g. 'github issues'.",
                }
            },
            "additionalProperties": False,
        },
    ),
    tool(
        name="connection_request",
        description=(
            "Request access to a known connectable service for this run's agent from the task's responsible "
            "user. Returns ready when the service is already usable; otherwise sends one connection card to the "
            "responsible user and tells you to finish independent work, then end the run and wait."
        ),
        input_schema={
            "type": "object",
            "properties": {
                "service": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": SERVICE_MAX_LENGTH,
                    "description": "The service identifier returned by connections_search.",
                },
                "connectionId": {
                    "type": "string",
                    "format": "uuid",
                    "description": "An existing connection of the service to ask access to (from connections_search).",
                },
                "toolNames": {
                    "type": "array",
                    "items": {"type": "string", "minLength": 1, "maxLength": TOOL_NAME_MAX_LENGTH},
                    "minItems": 1,
                    "maxItems": TOOL_NAMES_MAX,
                    "uniqueItems": True,
                    "description": "The exact tools you need; without it, access to all of the connection's tools "
                    "is asked for (at most 500).",
                },
            },
            "required": ["service"],
            "additionalProperties": False,
        },
    ),
]


# --- what a run is handed ------------------------------------------------------------------------------------


def runtime_urls() -> dict[str, str]:
    base = str(current_app.config["PUBLIC_BASE_URL"]).rstrip("/")
    return {
        "mcp": f"{base}/mcp/runtime-tools",
        "search": f"{base}/runtime-tools/connections/search",
        "request": f"{base}/runtime-tools/connections/request",
    }


def runtime_descriptor(token: MintedToken) -> dict:
    """The typed descriptor for adapters (`paperclipRuntimeTools` in the HTTP adapter body)."""
    urls = runtime_urls()
    return {
        "version": 1,
        "guidance": GUIDANCE,
        "mcpEndpoint": urls["mcp"],
        "rest": {"connectionsSearch": urls["search"], "connectionRequest": urls["request"]},
        "bearerToken": token.token,
        "expiresAt": token.expires_at_iso,
        "tools": list(TOOL_NAMES),
    }


def runtime_env(token: MintedToken) -> dict[str, str]:
    """The `PAPERCLIP_RUNTIME_TOOLS_*` environment for shell-based runtimes."""
    urls = runtime_urls()
    return {
        "PAPERCLIP_RUNTIME_TOOLS_MCP_URL": urls["mcp"],
        "PAPERCLIP_RUNTIME_TOOLS_TOKEN": token.token,
        "PAPERCLIP_RUNTIME_TOOLS_EXPIRES_AT": token.expires_at_iso,
        "PAPERCLIP_RUNTIME_TOOLS_CONNECTIONS_SEARCH_URL": urls["search"],
        "PAPERCLIP_RUNTIME_TOOLS_CONNECTION_REQUEST_URL": urls["request"],
        "PAPERCLIP_RUNTIME_TOOLS_AVAILABLE": ",".join(TOOL_NAMES),
        "PAPERCLIP_RUNTIME_TOOLS_GUIDANCE": GUIDANCE,
    }


def runtime_tools_descriptor(run: HeartbeatRun) -> dict | None:
    """The runtime tools descriptor a run is handed (plus the gateway endpoint), when the run has a responsible
    person, a public base URL and a secret key to sign its token; else None."""
    if run.responsible_user_id is None or not current_app.config.get("PUBLIC_BASE_URL"):
        return None
    if not current_app.config.get("SECRET_KEY"):
        return None
    descriptor = runtime_descriptor(mint_run_token(run))
    # The tool gateway sits next to the runtime tools and takes the same run-bound bearer token.
    descriptor["gatewayMcpEndpoint"] = str(current_app.config["PUBLIC_BASE_URL"]).rstrip("/") + "/mcp/gateway"
    return descriptor
