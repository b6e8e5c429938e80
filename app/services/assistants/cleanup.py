"""Cleaning up what assistant sign-ins leave behind (issue 29): expired authorization codes, expired device codes,
and dynamically registered clients nobody ever used.

Swept on write rather than by a worker: each new registration, authorization code and device code first deletes
what has expired (three bounded DELETEs in the same unit of work), so the tables never grow past what open
registration and its throttle (`/register`) let in. Codes and device codes are kept for `GRACE` after they expire,
so a late reuse or poll is still recognised as such (a reused code revokes what it gave). A registered client is
unused when it is older than `UNUSED_CLIENT_TTL` and no grant and no live device code names it; clients known by a
metadata document are kept (their id is their URL, fetched again on use).
"""

from __future__ import annotations

from datetime import timedelta

from sqlalchemy import delete, exists, select

from app.extensions import db
from app.models.assistants import (
    AssistantClient,
    AssistantCode,
    AssistantDeviceCode,
    AssistantGrant,
    ClientKind,
)
from app.models.base import rowcount, utcnow

GRACE = timedelta(hours=1)
UNUSED_CLIENT_TTL = timedelta(days=1)


def sweep_expired() -> dict[str, int]:
    """Delete expired codes, expired device codes and unused registrations; how many of each went."""
    now = utcnow()
    codes = db.session.execute(delete(AssistantCode).where(AssistantCode.expires_at <= now - GRACE))
    devices = db.session.execute(
        delete(AssistantDeviceCode).where(AssistantDeviceCode.expires_at <= now - GRACE)
    )
    granted = exists(select(AssistantGrant.id).where(AssistantGrant.client_pk == AssistantClient.id))
    polling = exists(
        select(AssistantDeviceCode.id).where(AssistantDeviceCode.client_id == AssistantClient.client_id)
    )
    clients = db.session.execute(
        delete(AssistantClient)
        .where(
            AssistantClient.kind == ClientKind.REGISTERED,
            AssistantClient.created_at <= now - UNUSED_CLIENT_TTL,
            ~granted,
            ~polling,
        )
        .execution_options(synchronize_session=False)
    )
    return {"codes": rowcount(codes), "device_codes": rowcount(devices), "clients": rowcount(clients)}
