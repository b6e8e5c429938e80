"""The card kinds (`ThreadInteraction.kind`), and the idempotency keys of connection cards and of the wakes they
lead to: the one place that spells them.

Both keys start with the same prefix, which the partial unique index on live wakes (`WakeupRequest`) matches, so a
continuation wake exists at most once while live.
"""

from __future__ import annotations

import hashlib
import json
import uuid

# A connection card: an agent asks the task's responsible person for a service (the wire name of the specs).
CONNECTION_CARD = "connection_intent"
# A tool approval card: a call the policy says to ask about first.
APPROVAL_CARD = "tool_approval"

CONNECTION_INTENT_KEY_PREFIX = "connection-intent:"


def card_key(run_id: uuid.UUID, user_id: uuid.UUID, slug: str, access_request: dict | None = None) -> str:
    """One pending card per run, addressed person, service and access request:
    `connection-intent:<runId>:<userId>:<slug>`, and for an access request `…:access:<digest>`, where the digest
    names the connection and the set of tools asked for (`access_request_digest`)."""
    key = f"{CONNECTION_INTENT_KEY_PREFIX}{run_id}:{user_id}:{slug}"
    return f"{key}:access:{access_request_digest(access_request)}" if access_request else key


def access_request_digest(access_request: dict | None) -> str | None:
    """What an access request asks for, as a short digest: its connection and its tools' names (in any order).
    None for a card that is not an access request. Two requests with one digest ask for the same thing."""
    if not access_request:
        return None
    names = sorted(
        str(tool.get("toolName"))
        for tool in access_request.get("tools") or []
        if isinstance(tool, dict) and tool.get("toolName")
    )
    identity = json.dumps([str(access_request.get("connectionId")), names], separators=(",", ":"))
    return hashlib.sha256(identity.encode()).hexdigest()[:32]


REPAIR_MARK = ":repair:"


def repair_key(key: str, answered_id: uuid.UUID) -> str:
    """The key of a new card that repairs the connection an accepted card gave (the same run asks again after it
    stopped working): `<card key>:repair:<answered card id>`, so no card is replaced under the key it was answered
    with."""
    return f"{key}{REPAIR_MARK}{answered_id}"


def repaired_card_id(key: str | None) -> str | None:
    """The answered card a repair card's key names, or None for a first card."""
    if not key or REPAIR_MARK not in key:
        return None
    return key.rsplit(REPAIR_MARK, 1)[1]


def wake_key(interaction_id: uuid.UUID | str, outcome: str) -> str:
    """The continuation wake of a resolved card: `connection-intent:<interactionId>:<connected|declined|expired>`."""
    return f"{CONNECTION_INTENT_KEY_PREFIX}{interaction_id}:{outcome}"
