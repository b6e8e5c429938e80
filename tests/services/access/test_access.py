"""Effective access: identity order, personal identities, installs, policies, membership, and company boundaries."""

import pytest

from app.models import (
    GrantDelegation,
)
from app.services.access.effective import effective_access
from tests.conftest import count_statements
from tests.factories import Factory


def live_connection(
    db, company, *, name="Conn", install="company", agent=None, tools=(("read_it", "allow"),)
):
    return Factory(db).connection(
        company,
        name=name,
        config={"connectionMethodKey": "custom-api-key", "methodConfig": {}},
        install_for=agent if install == "agent" else None,
        tools=dict(tools),
        describe_tools=True,
        version_hash="h",
    )


def grant(db, connection, kind, *, user=None, agent=None, default=False, status="active"):
    return Factory(db).grant(connection, kind, subject=user or agent, default=default, status=status)


@pytest.fixture
def world(db, make):
    company = make.company("Acme")
    owner = make.member(company, "owner")
    member = make.member(company, "member")
    agent = make.agent(company, "Builder")
    return company, owner, member, agent


def only(accesses):
    assert len(accesses) == 1
    return accesses[0]


def test_identity_order_agent_then_responsible_then_organization(db, world):
    company, owner, member, agent = world
    connection = live_connection(db, company)
    org = grant(db, connection, "organization", default=True)
    assert only(effective_access(company.id, agent.id, owner.id)).grant.id == org.id
    member_grant = grant(db, connection, "user", user=member)
    assert only(effective_access(company.id, agent.id, owner.id)).grant.id == org.id
    # A delegation does not lend the member's identity to the owner's runs.
    db.session.add(GrantDelegation(company_id=company.id, grant_id=member_grant.id, agent_id=agent.id))
    db.session.commit()
    assert only(effective_access(company.id, agent.id, owner.id)).grant.id == org.id
    assert only(effective_access(company.id, agent.id, member.id)).grant.id == member_grant.id
    owner_grant = grant(db, connection, "user", user=owner)
    assert only(effective_access(company.id, agent.id, owner.id)).grant.id == owner_grant.id
    agent_grant = grant(db, connection, "agent", agent=agent)
    assert only(effective_access(company.id, agent.id, owner.id)).grant.id == agent_grant.id


def test_a_personal_grant_serves_only_its_owners_runs_even_when_delegated(db, make, world):
    company, owner, member, agent = world
    connection = live_connection(db, company)
    member_grant = grant(db, connection, "user", user=member)
    db.session.add(GrantDelegation(company_id=company.id, grant_id=member_grant.id, agent_id=agent.id))
    db.session.commit()
    refused = only(effective_access(company.id, agent.id, owner.id))
    assert refused.grant is None and not refused.is_ready
    assert only(effective_access(company.id, agent.id, None)).grant is None
    assert only(effective_access(company.id, agent.id, member.id)).is_ready
    make.membership(company, member).role = "viewer"
    db.session.commit()
    access = only(effective_access(company.id, agent.id, member.id))
    assert access.grant is None and not access.is_ready


def test_responsible_persons_grant_needs_active_write_membership(db, make, world):
    company, owner, member, agent = world
    connection = live_connection(db, company)
    grant(db, connection, "user", user=member)
    assert only(effective_access(company.id, agent.id, member.id)).is_ready
    make.membership(company, member).status = "suspended"
    db.session.commit()
    assert only(effective_access(company.id, agent.id, member.id)).grant is None


def test_ambiguous_organization_grants_fail_closed(db, world):
    company, owner, _member, agent = world
    connection = live_connection(db, company)
    grant(db, connection, "organization")
    grant(db, connection, "organization")
    assert only(effective_access(company.id, agent.id, owner.id)).grant is None


def test_revoked_grants_and_blocked_tools_are_not_ready(db, world):
    company, owner, _member, agent = world
    connection = live_connection(db, company, tools=(("read_it", "block"),))
    org = grant(db, connection, "organization", default=True)
    access = only(effective_access(company.id, agent.id, owner.id))
    assert access.grant.id == org.id and access.usable_tools == [] and not access.is_ready
    ask = live_connection(db, company, name="Ask", tools=(("write_it", "ask_first"),))
    grant(db, ask, "organization", default=True)
    by_id = {a.connection.id: a for a in effective_access(company.id, agent.id, owner.id)}
    assert by_id[ask.id].is_ready
    org.status = "revoked"
    db.session.commit()
    by_id = {a.connection.id: a for a in effective_access(company.id, agent.id, owner.id)}
    assert by_id[connection.id].grant is None


def test_installs_disabled_and_other_companies(db, make, world):
    company, owner, _member, agent = world
    other_agent = make.agent(company, "Researcher")
    mine = live_connection(db, company, install="agent", agent=agent)
    grant(db, mine, "organization", default=True)
    assert only(effective_access(company.id, agent.id, owner.id)).connection.id == mine.id
    assert effective_access(company.id, other_agent.id, owner.id) == []
    elsewhere = make.company("Elsewhere")
    assert effective_access(elsewhere.id, agent.id, owner.id) == []
    mine.enabled = False
    db.session.commit()
    assert effective_access(company.id, agent.id, owner.id) == []


def test_statement_count_is_constant_as_connections_grow(db, world):
    company, owner, member, agent = world

    def count_for(n_new):
        for i in range(n_new):
            c = live_connection(
                db, company, name=f"C{count_for.total + i}", tools=(("a", "allow"), ("b", "block"))
            )
            g = grant(db, c, "user", user=member)
            db.session.add(GrantDelegation(company_id=company.id, grant_id=g.id, agent_id=agent.id))
        count_for.total += n_new
        db.session.commit()
        with count_statements(db.engine) as statements:
            result = effective_access(company.id, agent.id, owner.id)
        assert len(result) == count_for.total
        return len(statements)

    count_for.total = 0
    small = count_for(2)
    large = count_for(20)
    assert small == large


def test_counts_only_mode_agrees_with_full_tools(db, world):
    company, owner, _member, agent = world
    blocked = live_connection(db, company, name="Blocked", tools=(("a", "block"),))
    asks = live_connection(db, company, name="Asks", tools=(("b", "ask_first"), ("c", "block")))
    empty = live_connection(db, company, name="Empty", tools=())
    for connection in (blocked, asks, empty):
        grant(db, connection, "organization", default=True)
    full = {a.connection.id: a for a in effective_access(company.id, agent.id, owner.id)}
    counts = {a.connection.id: a for a in effective_access(company.id, agent.id, owner.id, with_tools=False)}
    for connection_id, access in full.items():
        summary = counts[connection_id]
        assert summary.tools == [] and summary.tool_count == len(access.tools)
        assert (summary.has_tools, summary.has_usable_tools, summary.is_ready) == (
            access.has_tools,
            access.has_usable_tools,
            access.is_ready,
        )
    assert [counts[c.id].is_ready for c in (blocked, asks, empty)] == [False, True, False]
