"""Runtime search answers from a per-audience index cached per process, valid while the company's access revision
is unchanged: every write that changes an answer must raise the revision in its own transaction."""

from __future__ import annotations

import json
import shutil

from sqlalchemy import delete, select

from app.catalog.loader import DEFINITIONS_DIR, ingest_definitions
from app.models import AccessRevision, ConnectionInstall
from app.services.access import revision as access_revision
from app.services.runtime.search import clear_search_indexes
from tests.conftest import count_statements
from tests.doors import search
from tests.services.runtime import test_runtime_rest
from tests.services.runtime.test_runtime_rest import board_api, connect, honcho_body

providers = test_runtime_rest.providers  # the shared fixture


def revision(db, company_id) -> int:
    db.session.expire_all()
    return (
        db.session.scalar(select(AccessRevision.revision).where(AccessRevision.company_id == company_id)) or 0
    )


def honcho_state(client, world) -> dict:
    return search(client, world.token, "honcho").json["results"][0]


def test_every_access_write_changes_the_next_answer(app, client, db, world, providers):
    assert honcho_state(client, world)["state"] == "available"
    assert honcho_state(client, world)["state"] == "available"  # answered from the index

    created = connect(app, world.owner, world.company, honcho_body())
    assert honcho_state(client, world)["state"] == "ready"

    board = app.test_client()
    url = f"/api/tool-connections/{created['id']}"
    blocked = {t["name"]: "block" for t in created["tools"]}
    assert board_api(board, world.owner, "PATCH", url, {"toolPolicies": blocked}).status_code == 200
    assert honcho_state(client, world)["state"] == "unavailable"

    allowed = {t["name"]: "allow" for t in created["tools"]}
    assert board_api(board, world.owner, "PATCH", url, {"toolPolicies": allowed}).status_code == 200
    assert honcho_state(client, world)["state"] == "ready"

    # Narrowing the audience deletes installs with a bulk statement.
    other_agents = {"audience": {"allAgents": False, "agentIds": []}}
    assert board_api(board, world.owner, "PATCH", url, other_agents).status_code == 200
    assert honcho_state(client, world)["state"] == "needs_user_action"

    assert board_api(board, world.owner, "PATCH", url, {"audience": {"allAgents": True}}).status_code == 200
    assert honcho_state(client, world)["state"] == "ready"
    assert board_api(board, world.owner, "PATCH", url, {"enabled": False}).status_code == 200
    assert honcho_state(client, world)["state"] == "needs_user_action"


def test_a_repeated_search_costs_only_run_validation(client, db, world):
    for query in ("github", "notion pages"):  # parse these definitions once in this process
        search(client, world.token, query)
    clear_search_indexes()
    with count_statements(db.engine) as cold:
        assert search(client, world.token, "notion pages").status_code == 200
    with count_statements(db.engine) as warm:
        assert search(client, world.token, "github").status_code == 200
    # The address's shared count of failed authentications (issue 31), then the run.
    assert len(warm) == 2 and "throttle_hits" in warm[0] and "heartbeat_runs" in warm[1]
    assert len(cold) > len(warm)


def test_revisions_rise_with_the_commit_and_not_with_a_rollback(db, make, world):
    company = world.company
    before = revision(db, company.id)
    make.agent(company, "Helper")  # agents do not change what search finds
    db.session.commit()
    assert revision(db, company.id) == before

    member = make.member(company, "member")  # a membership does
    db.session.commit()
    after_member = revision(db, company.id)
    assert after_member == before + 1

    member_row = db.session.merge(member)
    db.session.delete(db.session.scalar(select(type(member_row)).where(type(member_row).id == member_row.id)))
    db.session.rollback()
    assert revision(db, company.id) == after_member

    other = make.company("Other Co")
    db.session.commit()
    other_before = revision(db, other.id)
    access_revision.touch(company.id)
    db.session.commit()
    assert revision(db, company.id) == after_member + 1
    assert revision(db, other.id) == other_before  # only the named company moves


def test_bulk_statements_and_catalog_changes_move_every_company(db, make, world, real_catalog_restored):
    other = make.company("Other Co")
    db.session.commit()
    before = (revision(db, world.company.id), revision(db, other.id))

    # A bulk DELETE names its rows by criteria, so it moves every company (through the session, ORM or Core form).
    db.session.execute(delete(ConnectionInstall).where(ConnectionInstall.company_id == other.id))
    db.session.commit()
    bulk = (revision(db, world.company.id), revision(db, other.id))
    assert bulk == (before[0] + 1, before[1] + 1)
    db.session.execute(ConnectionInstall.__table__.delete().where(ConnectionInstall.company_id == other.id))
    db.session.commit()
    bulk = (revision(db, world.company.id), revision(db, other.id))
    assert bulk == (before[0] + 2, before[1] + 2)

    ingest_definitions()  # unchanged files: nothing written, nothing moves
    db.session.commit()
    assert (revision(db, world.company.id), revision(db, other.id)) == bulk


def test_a_catalog_change_reaches_cached_answers(client, db, world, tmp_path, real_catalog_restored):
    assert search(client, world.token, "zep").json["results"][0]["name"] == "Zep"
    before = revision(db, world.company.id)
    definitions = tmp_path / "definitions"
    shutil.copytree(DEFINITIONS_DIR, definitions)
    zep = json.loads((definitions / "zep.json").read_text(encoding="utf-8"))
    zep["name"] = "Zep Memory Cloud"
    (definitions / "zep.json").write_text(json.dumps(zep), encoding="utf-8")
    assert ingest_definitions(definitions)["updated"] == ["zep"]
    db.session.commit()
    assert revision(db, world.company.id) == before + 1
    assert search(client, world.token, "zep").json["results"][0]["name"] == "Zep Memory Cloud"


def test_token_bookkeeping_on_a_grant_leaves_the_revision_alone(db, make, world):
    from app.models import ConnectionGrant, ToolConnection

    connection = ToolConnection(
        company_id=world.company.id, app_slug="notion", name="Notion", status="active", enabled=True
    )
    db.session.add(connection)
    db.session.flush()
    grant = ConnectionGrant(
        company_id=world.company.id, connection_id=connection.id, kind="organization", status="active"
    )
    db.session.add(grant)
    db.session.commit()
    before = revision(db, world.company.id)

    grant = db.session.get(ConnectionGrant, grant.id)
    grant.provider_tenant = {"expiresAt": 2_000_000_000, "refreshedAt": 1}  # what an OAuth refresh writes
    grant.scopes = ["read"]
    db.session.commit()
    assert revision(db, world.company.id) == before

    grant = db.session.get(ConnectionGrant, grant.id)
    grant.status = "needs_reauthorization"  # what answers read
    db.session.commit()
    assert revision(db, world.company.id) == before + 1
