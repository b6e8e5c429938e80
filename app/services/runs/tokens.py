"""Runtime-tools tokens: short-lived, run-bound HS256 JWTs that let an agent call the connection runtime tools.

Each company has its own signing key, HMAC-SHA256(SECRET_KEY, `runtime-tools:<instanceId>:<companyId>`), so a token
minted for one company can never verify for another. The token only names the run; every use re-validates the run
itself (see `app.services.runtime.context.load_run_context`), so a token of an ended run stops working at once.

Also here: opening a task-bound heartbeat run by hand (`switchboard runs open`; closing is `lifecycle.close_run`).
"""

from __future__ import annotations

import hashlib
import hmac
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import jwt
from flask import current_app

from app.core.errors import ServiceError, Unprocessable
from app.extensions import db
from app.models import Agent, HeartbeatRun, Issue
from app.models.base import utcnow

SCOPE = "connection_intents"
TTL_SECONDS = 3600
ALGORITHM = "HS256"
TOKEN_INVALID = "Runtime tools token is missing, invalid, or expired"  # noqa: S105 (a message)
_REQUIRED_STRING_CLAIMS = ("sub", "company_id", "run_id", "responsible_user_id", "scope", "instance_id")


class TokenInvalid(ServiceError):
    """Missing, malformed, forged, foreign or expired token: always the same 401 answer."""

    status = 401

    def __init__(self) -> None:
        super().__init__(TOKEN_INVALID)


@dataclass(frozen=True)
class MintedToken:
    token: str
    expires_at: datetime

    @property
    def expires_at_iso(self) -> str:
        return self.expires_at.isoformat().replace("+00:00", "Z")


def _secret() -> bytes:
    return str(current_app.config["SECRET_KEY"]).encode()


def instance_id() -> str:
    """A stable id of this installation: configured, or derived from SECRET_KEY (so it survives restarts)."""
    configured = current_app.config.get("SWITCHBOARD_INSTANCE_ID")
    if configured:
        return str(configured)
    return hmac.new(_secret(), b"switchboard-instance-id", hashlib.sha256).hexdigest()[:32]


def company_key(company_id: uuid.UUID | str) -> bytes:
    message = f"runtime-tools:{instance_id()}:{company_id}".encode()
    return hmac.new(_secret(), message, hashlib.sha256).digest()


def mint_run_token(run: HeartbeatRun, *, now: datetime | None = None) -> MintedToken:
    """Sign a token for this run's agent, company and responsible person, valid for one hour."""
    issued = (now or utcnow()).replace(microsecond=0)
    expires = issued + timedelta(seconds=TTL_SECONDS)
    claims = {
        "sub": str(run.agent_id),
        "company_id": str(run.company_id),
        "run_id": str(run.id),
        "responsible_user_id": str(run.responsible_user_id) if run.responsible_user_id else "",
        "scope": SCOPE,
        "iat": int(issued.timestamp()),
        "exp": int(expires.timestamp()),
        "instance_id": instance_id(),
    }
    token = jwt.encode(claims, company_key(run.company_id), algorithm=ALGORITHM, headers={"typ": "JWT"})
    return MintedToken(token=token, expires_at=expires)


def verify_run_token(token: str | None) -> dict:
    """The verified claims, or TokenInvalid. Signature comparison is PyJWT's (constant time)."""
    if not token or token.count(".") != 2:
        raise TokenInvalid()
    try:
        header = jwt.get_unverified_header(token)
        if header.get("alg") != ALGORITHM:
            raise TokenInvalid()
        unverified = jwt.decode(token, options={"verify_signature": False})
        company_id = unverified.get("company_id")
        if not isinstance(company_id, str) or unverified.get("instance_id") != instance_id():
            raise TokenInvalid()
        claims = jwt.decode(
            token,
            company_key(company_id),
            algorithms=[ALGORITHM],
            options={"require": ["exp", "iat", "sub"], "verify_iat": False},
        )
    except jwt.PyJWTError:
        raise TokenInvalid() from None
    if any(not isinstance(claims.get(name), str) for name in _REQUIRED_STRING_CLAIMS):
        raise TokenInvalid()
    if claims["scope"] != SCOPE or claims["instance_id"] != instance_id():
        raise TokenInvalid()
    if not all(isinstance(claims.get(name), int | float) for name in ("iat", "exp")):
        raise TokenInvalid()
    if claims["exp"] <= datetime.now(UTC).timestamp():
        raise TokenInvalid()
    return claims


# --- opening runs by hand ------------------------------------------------------------------------------------------


def open_run(agent: Agent, issue: Issue, responsible_user_id: uuid.UUID | None = None) -> HeartbeatRun:
    """Start a `running` heartbeat run of the agent bound to the task (responsible: given, else the task's)."""
    if agent.company_id != issue.company_id:
        raise Unprocessable("The agent and the task belong to different companies")
    now = utcnow()
    run = HeartbeatRun(
        company_id=issue.company_id,
        agent_id=agent.id,
        issue_id=issue.id,
        responsible_user_id=responsible_user_id or issue.responsible_user_id,
        status="running",
        invocation_source="manual",
        context_snapshot={"issueId": str(issue.id), "taskId": str(issue.id)},
        started_at=now,
    )
    db.session.add(run)
    db.session.flush()
    return run
