"""The gateway's URL-mode elicitation answers (`app.services.gateway.elicitation` decides when and opens the card).

A 2025-11-25 client that declared `elicitation.url` at the `initialize` of its session (`app.web.agents.sessions`)
gets JSON-RPC `-32042` (URLElicitationRequired)
with one URL elicitation; a 2026-07-28 request whose `_meta` client capabilities declare it gets an
`input_required` result carrying the same `elicitation/create` request (its `requestState` is the card's id; a retry
is simply served again). The URL is the card's page (`/intents/<id>/dialog` under `PUBLIC_BASE_URL`), which serves
its addressee only; the elicitation id is the card's id. An assistant's ask-first call is answered the same way with
its approval card, whose page is the card in its task (`/tasks/<id>#item-<card>`), served to the person only.
"""

from __future__ import annotations

from typing import Any

import mcp_types
from flask import current_app, url_for
from mcp_types.jsonrpc import MISSING_REQUIRED_CLIENT_CAPABILITY, URL_ELICITATION_REQUIRED

from app.core import mcp_messages, mcp_versions
from app.models import ThreadInteraction, ToolConnection
from app.services.gateway import elicitation
from app.services.gateway.results import PreparedCall
from app.services.runtime.context import RunContext
from app.web.agents import jsonrpc, sessions

URL_MODE_SINCE = "2025-11-25"


def takes_url(exchange: jsonrpc.Exchange, params: dict) -> bool:
    """Whether the client of this request declared URL-mode elicitation: in the request itself on 2026-07-28, at the
    `initialize` of its own session before (`app.web.agents.sessions`)."""
    if exchange.modern:
        meta = params.get("_meta")
        capabilities = meta.get(mcp_versions.META_CLIENT_CAPABILITIES) if isinstance(meta, dict) else None
        return "url" in (elicitation.declared_modes(capabilities) or [])
    return exchange.version == URL_MODE_SINCE and "url" in sessions.declared_modes()


def card_url(card: ThreadInteraction) -> str:
    base = str(current_app.config.get("PUBLIC_BASE_URL") or "").rstrip("/")
    return base + url_for("intent_cards.dialog", interaction_id=card.id)


def url_mode_required(id_: Any, connection: ToolConnection) -> jsonrpc.Reply:
    """-32021 for a 2026-07-28 client that did not declare URL-mode elicitation, which this call needs: the tool
    exists, but only the responsible person can make it callable (MCP 2026-07-28 "missing required client
    capability"). The error data names the capability, so a client that has it can declare it and retry."""
    data = mcp_messages.dump(
        mcp_types.MissingRequiredClientCapabilityErrorData(
            required_capabilities=mcp_types.ClientCapabilities.model_validate({"elicitation": {"url": {}}})
        )
    )
    message = (
        f"Missing required client capability: elicitation (url mode). {connection.name} must be reconnected by the "
        "task's responsible person first; a client that declares URL-mode elicitation is sent to the page to do it."
    )
    return mcp_messages.error(id_, MISSING_REQUIRED_CLIENT_CAPABILITY, message, data), 200


def person_needed(
    id_: Any, ctx: RunContext, connection: ToolConnection, exchange: jsonrpc.Exchange, params: dict
) -> jsonrpc.Reply | None:
    """The URL elicitation for a call `connection` refused until the responsible person acts, or None (the client
    cannot take one, or no card applies: the call's own answer stands)."""
    if not takes_url(exchange, params):
        return None
    card = elicitation.open_card(ctx, connection)
    if card is None:
        return None
    message = (
        f"{connection.name} needs the task's responsible person to reconnect it before {ctx.agent.name} can use "
        "it. They can do it on this page (a connection card is also waiting in the task)."
    )
    refusal = f"{connection.name} must be reconnected by the task's responsible person first."
    return _url_elicitation(id_, exchange, card, card_url(card), message, refusal)


def approval_needed(
    id_: Any, ctx: RunContext, prepared: PreparedCall, exchange: jsonrpc.Exchange, params: dict
) -> jsonrpc.Reply | None:
    """The URL elicitation for an assistant's call that waits for its person's approval, or None (not an
    assistant's approval, or its client cannot take one: the approval refusal stands)."""
    card = elicitation.approval_card_for_client(ctx, prepared)
    if card is None or not takes_url(exchange, params):
        return None
    base = str(current_app.config.get("PUBLIC_BASE_URL") or "").rstrip("/")
    url = base + url_for("board.task", issue_id=card.issue_id) + f"#item-{card.id}"
    message = (
        f"{ctx.agent.name} wants to call {prepared.visible_name} on {prepared.connection_name}, which asks first. "
        "Approve or deny it on this page (it is also in your Inbox), then retry the same call."
    )
    refusal = f"{prepared.visible_name} needs approval by the responsible person (approval id {card.id})."
    return _url_elicitation(id_, exchange, card, url, message, refusal)


def _url_elicitation(
    id_: Any, exchange: jsonrpc.Exchange, card: ThreadInteraction, url: str, message: str, refusal: str
) -> jsonrpc.Reply:
    request = {"mode": "url", "url": url, "message": message}
    if exchange.modern:
        result = {
            "resultType": "input_required",
            "inputRequests": {str(card.id): {"method": "elicitation/create", "params": request}},
            "requestState": str(card.id),
        }
        return jsonrpc.message(id_, result=result), 200
    return mcp_messages.error(
        id_, URL_ELICITATION_REQUIRED, refusal, {"elicitations": [{**request, "elicitationId": str(card.id)}]}
    ), 200
