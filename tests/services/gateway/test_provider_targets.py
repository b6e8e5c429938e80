"""Gateway calls reuse the provider target built from unchanged inputs, and see every change to them at once.

Credential rows do not raise the access revision, so the tool a call names stays resolved while its identity's key
is replaced behind it: the next call must still reach the provider with the key now stored
(`app/services/gateway/targets.py`). A change to the identity itself raises the revision (the tool is resolved
afresh), and so does any change to the connection.
"""

from __future__ import annotations

import uuid

from sqlalchemy import select

from app.models import ConnectionGrant
from app.services.access.revision import current_revision
from app.services.connections.setup import _store_secret
from app.services.gateway import targets
from tests.doors import refusal_fields
from tests.peers.mcp_servers import NOTES_KEY
from tests.services.gateway import test_gateway
from tests.services.gateway.test_gateway import connect, rpc

world = test_gateway.world


def call(world, note_id="n1"):
    response = rpc(
        world.client,
        world.token,
        "tools/call",
        {"name": "notes-1__get_note", "arguments": {"note_id": note_id}},
    )
    assert response.status_code == 200 and "result" in response.json, response.json
    return response.json["result"]


def grant_of(db, connection_id: str) -> ConnectionGrant:
    db.session.expire_all()
    return db.session.scalars(
        select(ConnectionGrant).where(ConnectionGrant.connection_id == uuid.UUID(connection_id))
    ).one()


def kept(db, connection_id: str):
    """The target the process keeps for the connection's identity (None when none is kept)."""
    grant = grant_of(db, connection_id)
    entry = targets._kept_targets().get((grant.connection_id, grant.id))
    return entry.target if entry is not None else None


def test_a_repeated_call_reuses_the_target(app, db, world, notes_server):
    notes = connect(world, "github", NOTES_KEY, name="Notes 1")
    assert call(world)["isError"] is False
    first = kept(db, notes["id"])
    assert first is not None and first.headers == {"Authorization": f"Bearer {NOTES_KEY}"}
    assert call(world, "n2")["isError"] is False
    assert kept(db, notes["id"]) is first
    assert [args for tool, args in notes_server.calls if tool == "get_note"] == [
        {"note_id": "n1"},
        {"note_id": "n2"},
    ]


def test_a_replaced_key_is_used_by_the_next_call(app, db, world, notes_server):
    notes = connect(world, "github", NOTES_KEY, name="Notes 1")
    assert call(world)["isError"] is False
    revision = current_revision(world.company.id)
    _store_secret(grant_of(db, notes["id"]), "authorization", "not-the-notes-key")
    db.session.commit()
    assert current_revision(world.company.id) == revision  # the tool stays resolved: only the key changed

    refused = call(world, "n2")
    assert refused["isError"] is True and refusal_fields(refused)["reasonCode"] == "provider_error"
    assert "not-the-notes-key" not in str(refused)
    assert kept(db, notes["id"]).headers == {"Authorization": "Bearer not-the-notes-key"}

    _store_secret(grant_of(db, notes["id"]), "authorization", NOTES_KEY)
    db.session.commit()
    again = call(world, "n2")
    assert again["isError"] is False, again
    assert kept(db, notes["id"]).headers == {"Authorization": f"Bearer {NOTES_KEY}"}
    assert [args["note_id"] for tool, args in notes_server.calls if tool == "get_note"] == ["n1", "n2"]


def test_another_server_url_setting_builds_a_new_target(app, db, world, notes_server, monkeypatch):
    notes = connect(world, "github", NOTES_KEY, name="Notes 1")
    assert call(world)["isError"] is False
    before = kept(db, notes["id"])
    monkeypatch.setitem(app.config, "PROVIDER_SERVER_URLS", {"github": notes_server.url + "?again=1"})
    assert call(world, "n2")["isError"] is False
    after = kept(db, notes["id"])
    assert after is not before and after.url == notes_server.url + "?again=1"
