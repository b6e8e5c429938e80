"""An assistant's access token at the gateway: the token (looked up by its hash) must be live, issued for the
gateway (RFC 8707), and its grant connected; it then stands for the claims of the grant's session run, and the
gateway applies exactly what it applies to any run (`app.services.runtime.context`)."""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import select

from app.extensions import db
from app.models import HeartbeatRun
from app.models.assistants import AssistantGrant, AssistantToken
from app.models.base import as_utc, utcnow
from app.services.assistants import grants, secrets, urls
from app.services.runs.tokens import TokenInvalid

# Last use is shown to a minute; writing it on every call would make each call a write.
LAST_USED_PRECISION = timedelta(minutes=1)


def is_assistant_token(token: str) -> bool:
    return token.startswith(secrets.ACCESS_PREFIX)


def claims_for_access_token(token: str, path: str) -> dict:
    """The run claims an access token stands for on `path`, else TokenInvalid (the same 401 as a bad run token)."""
    row = db.session.execute(
        select(AssistantToken, AssistantGrant, HeartbeatRun.status)
        .join(AssistantGrant, AssistantGrant.id == AssistantToken.grant_id)
        .outerjoin(HeartbeatRun, HeartbeatRun.id == AssistantGrant.run_id)
        .where(AssistantToken.access_token_hash == secrets.digest(token))
    ).first()
    if row is None:
        raise TokenInvalid()
    issued, grant, run_status = row
    now = utcnow()
    if (
        issued.revoked_at is not None
        or as_utc(issued.access_expires_at) <= now
        or grant.disconnected_at is not None
        or issued.resource != urls.gateway_resource()
        or not path.startswith(urls.GATEWAY_PATH)
    ):
        raise TokenInvalid()
    last = as_utc(grant.last_used_at)
    if last is None or now - last >= LAST_USED_PRECISION:
        grant.last_used_at = now
    # The session run is read with the token; only an ended one is reopened (and read again) here.
    return grants.run_claims(grant, run_is_live=run_status == "running")
