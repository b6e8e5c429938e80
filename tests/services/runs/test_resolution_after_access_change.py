"""The cached instruction resolution sees every access change on the next resolution, and the plain-row reader of
effective access (`eligible_access`) answers exactly as the model reader (`effective_access`).

Each change test resolves first (filling the per-process cache under the company's access revision), commits one
change to what decides eligibility, and resolves again: the second answer must be the one the rule gives now.
"""

from __future__ import annotations

import json

import pytest
from sqlalchemy import select

from app.models import ConnectionGrant, ConnectionInstall
from app.services.access.effective import effective_access
from app.services.access.eligible import eligible_access
from app.services.connections.instructions import BLOCK_PREFIX
from app.services.runs.snapshot import clear_instruction_sources, resolve_instructions_for_run
from tests.conftest import count_statements
from tests.services.runs.test_run_instructions import add_connection, honcho_config, run_for


@pytest.fixture
def team(make):
    return make.team(adapter_type="process", adapter_config={"command": ["true"]})


def provenance(snapshot: dict | None) -> dict[str, str]:
    """{connectionId: grantId} of the blocks of a snapshot."""
    if snapshot is None:
        return {}
    found = {}
    for line in snapshot["text"].splitlines():
        if line.startswith(BLOCK_PREFIX):
            data = json.loads(line[len(BLOCK_PREFIX) :])
            found[data["connectionId"]] = data["grantId"]
    return found


def resolved_warm(db, run) -> dict[str, str]:
    """Resolve twice: the second answer comes from the cache (only the run scope is read)."""
    first = provenance(resolve_instructions_for_run(run))
    db.session.expire_all()
    with count_statements(db.engine) as statements:
        again = provenance(resolve_instructions_for_run(run))
    assert again == first
    assert len(statements) <= 2  # the (expired) run and the run scope with the revision: nothing rebuilt
    db.session.rollback()
    return first


def grant_of(db, connection) -> ConnectionGrant:
    return db.session.scalars(
        select(ConnectionGrant).where(ConnectionGrant.connection_id == connection.id)
    ).one()


def test_a_revoked_grant_is_seen_on_the_next_resolution(db, team):
    company, owner, agent, issue = team
    kept, revoked = add_connection(db, company), add_connection(db, company)
    run = run_for(db, agent, issue, owner)
    assert set(resolved_warm(db, run)) == {str(kept.id), str(revoked.id)}

    grant_of(db, revoked).status = "revoked"
    db.session.commit()
    assert set(provenance(resolve_instructions_for_run(run))) == {str(kept.id)}


def test_a_disabled_connection_is_seen_on_the_next_resolution(db, team):
    company, owner, agent, issue = team
    kept, disabled = add_connection(db, company), add_connection(db, company)
    run = run_for(db, agent, issue, owner)
    assert set(resolved_warm(db, run)) == {str(kept.id), str(disabled.id)}

    disabled.enabled = False
    db.session.commit()
    assert set(provenance(resolve_instructions_for_run(run))) == {str(kept.id)}


def test_a_personal_grant_serves_only_its_own_person_after_it_changes_hands(db, make, team):
    company, owner, agent, issue = team
    other = make.member(company, "member")
    connection = add_connection(db, company, grants=[("user", other)])
    run = run_for(db, agent, issue, owner)
    assert resolved_warm(db, run) == {}  # another person's identity never serves this run

    mine = make.grant(connection, "user", subject=owner)
    assert resolve_instructions_for_run(run) is not None
    assert provenance(resolve_instructions_for_run(run)) == {str(connection.id): str(mine.id)}

    db.session.delete(mine)
    db.session.commit()
    assert resolve_instructions_for_run(run) is None


def test_health_attention_changes_the_revision_but_instructions_still_reach_the_agent(db, team):
    company, owner, agent, issue = team
    connection = add_connection(db, company)
    run = run_for(db, agent, issue, owner)
    before = resolve_instructions_for_run(run)
    assert set(resolved_warm(db, run)) == {str(connection.id)}

    connection.health_status = "needs_reauthorization"
    db.session.commit()
    # `serves_instructions` sets health aside: the rebuilt answer is the same snapshot.
    assert resolve_instructions_for_run(run) == before
    (access,) = effective_access(company.id, agent.id, owner.id, with_tools=False)
    assert access.serves_instructions and not access.usable_now


def test_a_scoped_install_is_seen_on_the_next_resolution(db, team):
    company, owner, agent, issue = team
    connection = add_connection(db, company, install=agent, tools={"search": "allow", "delete": "block"})
    run = run_for(db, agent, issue, owner)
    assert set(resolved_warm(db, run)) == {str(connection.id)}

    install = db.session.scalars(
        select(ConnectionInstall).where(ConnectionInstall.connection_id == connection.id)
    ).one()
    install.tool_scope = {"delete": "ask_first"}  # only a blocked tool: nothing the agent may use
    db.session.commit()
    assert resolve_instructions_for_run(run) is None

    install.tool_scope = {"search": "allow"}
    db.session.commit()
    assert set(provenance(resolve_instructions_for_run(run))) == {str(connection.id)}


def test_the_plain_rows_answer_as_the_models_do(db, make, team):
    company, owner, agent, issue = team
    other = make.member(company, "member")
    viewer = make.member(company, "viewer")
    other_agent = make.agent(company)
    connections = [
        add_connection(db, company),
        add_connection(db, company, grants=[("user", owner)]),
        add_connection(db, company, grants=[("user", other)]),
        add_connection(db, company, grants=[("user", viewer), ("agent", agent)]),
        add_connection(db, company, grants=[("organization", None), ("user", owner)]),
        add_connection(db, company, install=agent, tools={"search": "allow", "delete": "block"}),
        add_connection(db, company, tools={"delete": "block"}),
        add_connection(db, company, tools={}),
        add_connection(db, company, instructions=None),
        # Two active organization grants, neither the default (below): ambiguous, no identity.
        add_connection(db, company),
        # Another agent's own grant never serves this agent; the organization's does.
        add_connection(db, company, grants=[("agent", other_agent), ("organization", None)]),
    ]
    ambiguous, others = connections[-2:]
    grant_of(db, ambiguous).is_default = False
    make.grant(ambiguous, "organization")
    make.grant(ambiguous, "organization", default=True, status="revoked")  # a revoked default decides nothing
    make.grant(others, "agent", subject=agent, status="revoked")
    grant_of(db, connections[0]).status = "revoked"
    connections[1].health_status = "error"
    install = db.session.scalars(
        select(ConnectionInstall).where(ConnectionInstall.connection_id == connections[5].id)
    ).one()
    install.tool_scope = {"delete": "ask_first"}
    disabled = add_connection(db, company)
    disabled.enabled = False
    db.session.commit()

    def answer(accesses) -> list[tuple]:
        return [
            (
                a.connection.id,
                a.connection.name,
                a.connection.app_slug,
                a.connection.health_status,
                a.connection.config,
                a.connection.agent_instructions,
                a.grant.id if a.grant else None,
                a.has_identity,
                a.has_tools,
                a.has_usable_tools,
                a.tool_scope,
                a.usable_now,
                a.is_ready,
                a.serves_instructions,
            )
            for a in accesses
        ]

    for responsible in (owner, other, viewer, None):
        subject = responsible.id if responsible else None
        models = answer(effective_access(company.id, agent.id, subject, with_tools=False))
        assert answer(eligible_access(company.id, agent.id, subject)) == models
        assert len(models) == len(connections)  # the disabled one is not live
        some = [connections[2].id, connections[5].id, disabled.id]
        assert answer(eligible_access(company.id, agent.id, subject, connection_ids=some)) == answer(
            effective_access(company.id, agent.id, subject, connection_ids=some, with_tools=False)
        )
    (undecided,) = eligible_access(company.id, agent.id, owner.id, connection_ids=[ambiguous.id])
    (organization,) = eligible_access(company.id, agent.id, owner.id, connection_ids=[others.id])
    assert undecided.grant is None and organization.grant is not None
    assert organization.grant.kind == "organization"
    (row,) = eligible_access(company.id, agent.id, owner.id, connection_ids=[connections[1].id])
    assert row.connection.method_key == connections[1].method_key == "custom-none"
    assert row.connection.catalog_version is not None  # the custom app is in the cached catalog


def test_a_rebuild_costs_the_same_statements_for_ten_times_the_connections(db, team):
    company, owner, agent, issue = team
    run = run_for(db, agent, issue, owner)
    counts = []
    for total in (4, 40):
        while len(eligible_access(company.id, agent.id, owner.id)) < total:
            add_connection(db, company, grants=[("organization", None), ("user", owner)])
        db.session.commit()
        clear_instruction_sources()
        db.session.expire_all()
        with count_statements(db.engine) as statements:
            snapshot = resolve_instructions_for_run(run)
        assert snapshot is not None and snapshot["text"].count(BLOCK_PREFIX) == total
        counts.append(len(statements))
        db.session.rollback()
    assert counts[0] == counts[1]
    # The run, its scope with the revision, and one statement for the connections with their catalog versions,
    # the grants that could serve the run and the responsible person's membership: the parsed catalog needs none.
    assert counts[0] <= 3


def test_each_connection_part_kept_across_rebuilds_follows_what_it_depends_on(db, make, team):
    """A rebuild after an access change reuses each connection's part of the snapshot (kept per connection under
    its name, app, configuration, instructions and catalog version): a change to any of them is seen, and the
    answer is always the one composed with nothing kept."""
    company, owner, agent, issue = team
    honcho = add_connection(db, company, slug="honcho", config=honcho_config("one"))
    custom, other = add_connection(db, company), add_connection(db, company)
    run = run_for(db, agent, issue, owner)

    def rebuilt() -> dict | None:
        clear_instruction_sources()  # an access change elsewhere: the connections' parts stay kept
        kept = resolve_instructions_for_run(run)
        clear_instruction_sources(prepared=True)
        assert resolve_instructions_for_run(run) == kept  # the same text with nothing kept
        clear_instruction_sources()
        assert resolve_instructions_for_run(run) == kept
        return kept

    first = rebuilt()
    assert first is not None and first["text"].count(BLOCK_PREFIX) == 3
    changes = [
        lambda: setattr(custom, "name", "Renamed handbook"),
        lambda: setattr(honcho, "config", honcho_config("two")),
        lambda: setattr(other, "agent_instructions", {"enabled": True, "text": "Another text."}),
        lambda: setattr(other, "agent_instructions", {"enabled": False, "text": "Another text."}),
        lambda: setattr(honcho, "config", honcho_config(None)),  # a required value missing: no block
    ]
    seen = [first["text"]]
    for change in changes:
        change()
        db.session.commit()
        snapshot = rebuilt()
        assert snapshot is not None and snapshot["text"] not in seen
        seen.append(snapshot["text"])
    assert '"connectionName":"Renamed handbook"' in seen[1] and '"workspaceId":"two"' in seen[2]
    assert "Another text." in seen[3] and "Another text." not in seen[4]
    assert seen[5].count(BLOCK_PREFIX) == 1 and str(honcho.id) not in seen[5]

    # A grant changing hands changes only the grant in the kept part's block.
    mine = make.grant(custom, "agent", subject=agent)
    assert provenance(rebuilt())[str(custom.id)] == str(mine.id)
