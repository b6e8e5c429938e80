"""The one predicate "can this agent use this connection now" agrees with what each caller used to compose itself.

A grid of connections (live or not, healthy or not, each identity kind and status, tools allowed, asking first,
blocked, none, scoped by an access card) is read through `effective_access`; for every connection the predicate's
answer is compared with the caller's former expression, written out here as it stood in the caller:
the gateway's listing and calls, readiness, the continuation worker, the instruction snapshot, access requests and
card completion. The SQL statement counts of `effective_access` are asserted in `tests/services/access/test_access.py`.
"""

from __future__ import annotations

import itertools

import pytest

from app.models import ConnectionGrant, ConnectionInstall, ConnectionTool, ToolConnection, ToolPolicy
from app.models.connections import ATTENTION_HEALTH
from app.services.access.effective import (
    connection_access,
    connection_is_live,
    effective_access,
    usable_connections,
)
from app.services.access.rows import connection_is_healthy
from app.services.intents.service import grant_in_audience, reusable_by

HEALTH = ("healthy", "unchecked", "needs_attention", "error")
IDENTITIES = (
    None,
    ("organization", "active"),
    ("organization", "revoked"),
    ("user", "active"),
    ("agent", "active"),
)
TOOLSETS = ((), (("read_it", "allow"),), (("write_it", "ask_first"),), (("drop_it", "block"),))
SCOPES = (None, {"read_it": "allow", "write_it": "allow"})


def _connection(db, company, agent, index, *, status, enabled, health, identity, tools, scope, person):
    connection = ToolConnection(
        company_id=company.id,
        app_slug="custom",
        name=f"Conn {index}",
        status=status,
        enabled=enabled,
        health_status=health,
        auth_kind="api_key",
        config={"connectionMethodKey": "custom-api-key", "methodConfig": {}},
    )
    db.session.add(connection)
    db.session.flush()
    db.session.add(
        ConnectionInstall(
            company_id=company.id,
            connection_id=connection.id,
            target_type="agent",
            target_id=agent.id,
            tool_scope=scope,
        )
    )
    if identity is not None:
        kind, grant_status = identity
        db.session.add(
            ConnectionGrant(
                company_id=company.id,
                connection_id=connection.id,
                kind=kind,
                subject_user_id=person.id if kind == "user" else None,
                subject_agent_id=agent.id if kind == "agent" else None,
                status=grant_status,
            )
        )
    for tool_name, action in tools:
        db.session.add(
            ConnectionTool(
                company_id=company.id,
                connection_id=connection.id,
                name=tool_name,
                description=tool_name,
                version_hash="h",
                is_write=tool_name != "read_it",
            )
        )
        db.session.add(
            ToolPolicy(company_id=company.id, connection_id=connection.id, tool_name=tool_name, action=action)
        )
    return connection


@pytest.fixture
def grid(db, make):
    company = make.company("Acme")
    person = make.member(company, "owner")
    agent = make.agent(company, "Builder")
    connections = []
    for index, (health, identity, tools, scope) in enumerate(
        itertools.product(HEALTH, IDENTITIES, TOOLSETS, SCOPES)
    ):
        connections.append(
            _connection(
                db,
                company,
                agent,
                index,
                status="active",
                enabled=True,
                health=health,
                identity=identity,
                tools=tools,
                scope=scope,
                person=person,
            )
        )
    for index, (status, enabled) in enumerate(
        (("draft", True), ("disconnected", True), ("archived", True), ("active", False)),
        start=len(connections),
    ):
        connections.append(
            _connection(
                db,
                company,
                agent,
                index,
                status=status,
                enabled=enabled,
                health="healthy",
                identity=("organization", "active"),
                tools=(("read_it", "allow"),),
                scope=None,
                person=person,
            )
        )
    db.session.commit()
    return company, person, agent, connections


def test_the_grid_covers_every_answer(grid):
    company, person, agent, _ = grid
    accesses = effective_access(company.id, agent.id, person.id)
    assert {a.usable_now for a in accesses} == {True, False}
    assert {a.is_ready for a in accesses} == {True, False}
    assert {a.serves_instructions for a in accesses} == {True, False}
    assert any(a.usable_now and not a.is_ready for a in accesses)
    assert any(a.serves_instructions and not a.is_healthy for a in accesses)


def test_the_gateway_lists_what_it_used_to(grid):
    company, person, agent, _ = grid
    accesses = effective_access(company.id, agent.id, person.id)
    former = [a for a in accesses if a.grant is not None and a.grant.status == "active" and a.is_healthy]
    assert [a.connection.id for a in usable_connections(accesses)] == [a.connection.id for a in former]
    for access in accesses:
        assert access.usable_now == (access in former)


@pytest.mark.parametrize("with_tools", [True, False])
def test_readiness_and_the_continuation_worker_agree(grid, with_tools):
    company, person, agent, connections = grid
    accesses = {
        a.connection.id: a for a in effective_access(company.id, agent.id, person.id, with_tools=with_tools)
    }
    for connection in connections:
        access = accesses.get(connection.id)
        former = (
            access is not None and access.grant is not None and access.is_healthy and access.has_usable_tools
        )
        assert (access is not None and access.is_ready) == former, connection.name
        one = connection_access(company.id, agent.id, person.id, connection.id)
        assert (one is not None and one.is_ready) == former, connection.name


def test_the_instruction_snapshot_takes_what_it_used_to(grid):
    company, person, agent, _ = grid
    for access in effective_access(company.id, agent.id, person.id, with_tools=False):
        former = access.grant is not None and access.grant.status == "active" and access.has_usable_tools
        assert access.serves_instructions == former, access.connection.name


def test_an_access_request_sees_the_tools_it_used_to(grid):
    company, person, agent, connections = grid
    for connection in connections:
        current = effective_access(company.id, agent.id, person.id, connection_ids=[connection.id])
        former = {
            t.tool.name for a in current if a.grant is not None and a.is_healthy for t in a.usable_tools
        }
        one = connection_access(company.id, agent.id, person.id, connection.id, with_tools=True)
        assert (one.callable_tool_names if one is not None else set()) == former, connection.name
        targets = [a.connection for a in current if a.grant is not None]
        assert [a.connection for a in current if a.has_identity] == targets


def test_card_completion_and_reuse_agree(grid):
    company, person, agent, connections = grid
    for connection in connections:
        former_live = (
            connection.status == "active"
            and connection.enabled
            and connection.health_status not in ATTENTION_HEALTH
        )
        assert (connection_is_live(connection) and connection_is_healthy(connection)) == former_live
        former_reusable = (
            connection.status == "active"
            and connection.enabled
            and any(grant_in_audience(g, person.id, agent.id) for g in connection.grants)
        )
        assert reusable_by(connection, person.id, agent.id) == former_reusable, connection.name
        access = connection_access(company.id, agent.id, person.id, connection.id)
        former = effective_access(
            company.id, agent.id, person.id, connection_ids=[connection.id], with_tools=False
        )
        assert (access is None) == (not former)
        if access is not None:
            assert access.has_usable_tools == former[0].has_usable_tools
            assert access.has_identity == (former[0].grant is not None)
