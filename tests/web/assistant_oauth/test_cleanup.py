"""What assistant sign-ins leave behind is swept on write (issue 29): expired authorization codes and device codes
(after a grace hour), and registered clients nobody used for a day; a registration through `/register` sweeps."""

from __future__ import annotations

import uuid
from datetime import timedelta

from sqlalchemy import select

from app.models.assistants import (
    AssistantClient,
    AssistantCode,
    AssistantDeviceCode,
    AssistantGrant,
)
from app.models.base import utcnow
from app.services.assistants.cleanup import sweep_expired
from tests.web.assistant_oauth.flow import register


def _client(db, name, *, kind="registered", age=timedelta(days=2)):
    row = AssistantClient(
        client_id=f"{name}-{uuid.uuid4()}" if kind == "registered" else f"https://{name}.example/client.json",
        kind=kind,
        client_name=name,
        redirect_uris=["http://127.0.0.1:8765/callback"],
        grant_types=["authorization_code"],
        created_at=utcnow() - age,
    )
    db.session.add(row)
    db.session.flush()
    return row


def _world(make, db):
    company, owner, agent, _issue = make.team()
    unused = _client(db, "unused")
    used = _client(db, "used")
    fresh = _client(db, "fresh", age=timedelta(minutes=5))
    documented = _client(db, "documented", kind="metadata_document")
    polling = _client(db, "polling")
    grant = AssistantGrant(company_id=company.id, user_id=owner.id, client_pk=used.id, agent_id=agent.id)
    db.session.add(grant)
    db.session.flush()
    now = utcnow()
    for name, expires in (("old-code", now - timedelta(hours=2)), ("late-code", now - timedelta(minutes=10))):
        db.session.add(
            AssistantCode(
                code_hash=name.ljust(64, "0"),
                grant_id=grant.id,
                client_id=used.client_id,
                redirect_uri="http://127.0.0.1:8765/callback",
                resource="http://127.0.0.1:5000/mcp/gateway",
                code_challenge="c" * 43,
                code_challenge_method="S256",
                expires_at=expires,
            )
        )
    for name, client_id, expires in (
        ("old-dev", "gone-client", now - timedelta(hours=2)),
        ("live-dev", polling.client_id, now + timedelta(minutes=10)),
    ):
        db.session.add(
            AssistantDeviceCode(
                device_code_hash=name.ljust(64, "0"),
                user_code=name.upper()[:8],
                client_id=client_id,
                resource="http://127.0.0.1:5000/mcp/gateway",
                expires_at=expires,
            )
        )
    db.session.commit()
    return {"unused": unused, "used": used, "fresh": fresh, "documented": documented, "polling": polling}


def _left(db):
    return (
        set(db.session.scalars(select(AssistantClient.client_name))),
        {h[:8].rstrip("0") for h in db.session.scalars(select(AssistantCode.code_hash))},
        {h[:8].rstrip("0") for h in db.session.scalars(select(AssistantDeviceCode.device_code_hash))},
    )


def test_the_sweep_deletes_what_expired_and_unused_registrations(make, db):
    _world(make, db)
    assert sweep_expired() == {"codes": 1, "device_codes": 1, "clients": 1}
    db.session.commit()
    clients, codes, devices = _left(db)
    assert clients == {"used", "fresh", "documented", "polling"}
    assert codes == {"late-cod"} and devices == {"live-dev"}
    assert sweep_expired() == {"codes": 0, "device_codes": 0, "clients": 0}


def test_a_registration_sweeps(make, db, client):
    _world(make, db)
    register(client, name="Newcomer")
    clients, codes, devices = _left(db)
    assert "unused" not in clients and {"used", "Newcomer"} <= clients
    assert codes == {"late-cod"} and devices == {"live-dev"}
