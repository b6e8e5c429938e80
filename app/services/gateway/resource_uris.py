"""Gateway-namespaced resource URIs: what an agent sees instead of a provider's resource URI.

A provider's tool result may point at a resource (`resource_link`); the agent must read it through the gateway, with
the same access checks as a tool call, never at the provider itself. So the gateway rewrites each link's URI to

    switchboard://connection/<connection id>/<tag>/<the provider's URI, percent-encoded>

where the tag is an HMAC (keyed from `SECRET_KEY`) over the company, the agent, the connection and the provider's URI.
The tag binds the link to the agent it was handed to and to the URI the provider gave: an agent cannot forge a read
of another URI at the provider, nor borrow another agent's link. It grants nothing by itself (a read also needs the
agent's run token and its access to the connection at that moment), so it is not a secret.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import uuid
from dataclasses import dataclass
from urllib.parse import quote, unquote

from flask import current_app

PREFIX = "switchboard://connection/"
_TAG_BYTES = 12


@dataclass(frozen=True)
class ResourceRef:
    connection_id: uuid.UUID
    tag: str
    provider_uri: str


def _tag(company_id: uuid.UUID, agent_id: uuid.UUID, connection_id: uuid.UUID, provider_uri: str) -> str:
    key = hmac.new(
        str(current_app.config["SECRET_KEY"]).encode(), b"switchboard-gateway-resource", hashlib.sha256
    ).digest()
    message = "\n".join((str(company_id), str(agent_id), str(connection_id), provider_uri)).encode()
    digest = hmac.new(key, message, hashlib.sha256).digest()[:_TAG_BYTES]
    return base64.urlsafe_b64encode(digest).decode().rstrip("=")


def namespaced(
    company_id: uuid.UUID, agent_id: uuid.UUID, connection_id: uuid.UUID, provider_uri: str
) -> str:
    """The URI the agent sees for `provider_uri` of that connection."""
    tag = _tag(company_id, agent_id, connection_id, provider_uri)
    return f"{PREFIX}{connection_id}/{tag}/{quote(provider_uri, safe='')}"


def parse(uri: str) -> ResourceRef | None:
    """The parts of a namespaced URI, or None when it is not one of ours."""
    if not uri.startswith(PREFIX):
        return None
    parts = uri[len(PREFIX) :].split("/", 2)
    if len(parts) != 3 or not parts[1] or not parts[2]:
        return None
    try:
        connection_id = uuid.UUID(parts[0])
    except ValueError:
        return None
    return ResourceRef(connection_id, parts[1], unquote(parts[2]))


def issued_to(ref: ResourceRef, company_id: uuid.UUID, agent_id: uuid.UUID) -> bool:
    """Whether the gateway handed this link to this agent (the tag matches)."""
    expected = _tag(company_id, agent_id, ref.connection_id, ref.provider_uri)
    return hmac.compare_digest(expected, ref.tag)


def namespace_links(
    result: dict, company_id: uuid.UUID, agent_id: uuid.UUID, connection_id: uuid.UUID
) -> dict:
    """`result` with every `resource_link` block's URI namespaced (everything else as the provider said it)."""
    content = result.get("content")
    if not isinstance(content, list) or not any(_is_link(block) for block in content):
        return result
    rewritten = [
        {**block, "uri": namespaced(company_id, agent_id, connection_id, block["uri"])}
        if _is_link(block)
        else block
        for block in content
    ]
    return {**result, "content": rewritten}


def _is_link(block: object) -> bool:
    return (
        isinstance(block, dict) and block.get("type") == "resource_link" and isinstance(block.get("uri"), str)
    )
