"""The instruction resolver for runs and the prepared invocation: eligibility, freezing, and forged-field overwrite.

Connections are persisted directly (the resolver reads stored settings and the cached catalog only, never a
provider); the helpers here are shared with the adapter, worker and continuation tests.
"""

from __future__ import annotations

import dataclasses
import json

import pytest
from sqlalchemy import delete, select

from app.adapters.http import request_body
from app.core.errors import Forbidden
from app.models import (
    ConnectionInstall,
    HeartbeatRun,
    ToolConnection,
)
from app.services.runs.invocation import prepare_invocation
from app.services.runs.lifecycle import complete_run
from app.services.runs.snapshot import resolve_instructions_for_run
from tests.factories import Factory

CUSTOM_CONFIG = {
    "connectionMethodKey": "custom-none",
    "methodConfig": {"serverUrl": "https://mcp.example.com/mcp"},
}
HANDBOOK = {"enabled": True, "text": "Use the release handbook before changing a deployment."}


def add_connection(
    db,
    company,
    *,
    name: str | None = None,
    slug: str = "custom",
    instructions: dict | None = HANDBOOK,
    config: dict | None = None,
    grants: list[tuple[str, object]] | None = None,
    install=None,
    tools: dict[str, str | None] | None = None,
) -> ToolConnection:
    """An active connection with grants (kind, subject), an install (None: company-wide) and tools (name: action)."""
    return Factory(db).connection(
        company,
        slug=slug,
        name=name,
        config=config if config is not None else CUSTOM_CONFIG if slug == "custom" else {},
        instructions=instructions,
        grants=grants or [("organization", None)],
        install_for=install,
        tools=tools if tools is not None else {"search": "allow"},
    )


def honcho_config(workspace: str | None) -> dict:
    return {
        "connectionMethodKey": "mcp-api-key",
        "methodConfig": {"workspaceId": workspace} if workspace else {},
    }


@pytest.fixture
def team(make):
    return make.team(adapter_type="process", adapter_config={"command": ["true"]})


def run_for(db, agent, issue, responsible=None) -> HeartbeatRun:
    run = HeartbeatRun(
        company_id=agent.company_id,
        agent_id=agent.id,
        issue_id=issue.id if issue else None,
        responsible_user_id=responsible.id if responsible else None,
        status="running",
        context_snapshot={},
    )
    db.session.add(run)
    db.session.commit()
    return run


# --- eligibility -----------------------------------------------------------------------------------------------


def test_honcho_workspace_is_in_the_text_and_a_missing_workspace_withholds_guidance(db, team):
    company, owner, agent, issue = team
    with_workspace = add_connection(
        db,
        company,
        name="Honcho team",
        slug="honcho",
        config=honcho_config("team-workspace"),
        instructions={
            "enabled": True,
            "text": "Recall first.",
            "template": {"id": "honcho.usage", "version": 1},
        },
    )
    run = run_for(db, agent, issue, owner)
    snapshot = resolve_instructions_for_run(run)
    assert '"workspaceId":"team-workspace"' in snapshot["text"]
    assert f'"connectionId":"{with_workspace.id}"' in snapshot["text"]
    assert (
        '"connector":"honcho","method":"mcp-api-key","template":{"id":"honcho.usage","version":1}'
        in (snapshot["text"])
    )

    with_workspace.config = honcho_config(None)
    db.session.commit()
    assert resolve_instructions_for_run(run) is None


def test_workspace_change_changes_the_digest(db, team):
    company, owner, agent, issue = team
    connection = add_connection(db, company, slug="honcho", config=honcho_config("one"))
    run = run_for(db, agent, issue, owner)
    first = resolve_instructions_for_run(run)
    connection.config = honcho_config("two")
    db.session.commit()
    second = resolve_instructions_for_run(run)
    assert first["digest"] != second["digest"] and '"workspaceId":"two"' in second["text"]


def test_eligibility_follows_assignment(db, make, team):
    company, owner, agent, issue = team
    other = make.agent(company, "Other")
    connection = add_connection(db, company, install=agent)
    assert resolve_instructions_for_run(run_for(db, agent, issue, owner)) is not None
    other_issue = make.issue(company, status="in_progress", assignee=other, responsible=owner)
    assert resolve_instructions_for_run(run_for(db, other, other_issue, owner)) is None

    db.session.execute(delete(ConnectionInstall).where(ConnectionInstall.connection_id == connection.id))
    db.session.commit()
    assert resolve_instructions_for_run(run_for(db, agent, issue, owner)) is None


@pytest.mark.parametrize(
    ("actions", "eligible"),
    [
        ({"read": "block", "write": "block"}, False),
        ({"read": "block", "write": "ask_first"}, True),
        ({"read": "allow"}, True),
        ({"read": None}, True),  # no policy row means ask first, which counts
        ({}, False),  # no cached tools at all
    ],
)
def test_action_policy_decides_eligibility(db, team, actions, eligible):
    company, owner, agent, issue = team
    add_connection(db, company, tools=actions)
    snapshot = resolve_instructions_for_run(run_for(db, agent, issue, owner))
    assert (snapshot is not None) is eligible


def test_disabled_or_cleared_instructions_contribute_nothing(db, team):
    company, owner, agent, issue = team
    add_connection(db, company, name="off", instructions={**HANDBOOK, "enabled": False})
    add_connection(db, company, name="none", instructions=None)
    assert resolve_instructions_for_run(run_for(db, agent, issue, owner)) is None


def test_grant_revocation_is_checked_on_every_turn(db, team):
    company, owner, agent, issue = team
    connection = add_connection(db, company)
    run = run_for(db, agent, issue, owner)
    assert resolve_instructions_for_run(run) is not None
    grant = connection.grants[0]
    grant.status = "revoked"
    db.session.commit()
    assert resolve_instructions_for_run(run) is None


@pytest.mark.parametrize(
    ("status", "role", "eligible"),
    [
        ("active", "member", True),
        ("suspended", "member", False),
        ("active", "viewer", False),
    ],
)
def test_personal_grant_needs_an_active_writer_as_responsible_person(db, make, team, status, role, eligible):
    company, _owner, agent, issue = team
    person = make.member(company, role, status=status)
    connection = add_connection(db, company, grants=[("user", person)])
    snapshot = resolve_instructions_for_run(run_for(db, agent, issue, person))
    assert (snapshot is not None) is eligible
    if eligible:
        assert f'"grantId":"{connection.grants[0].id}"' in snapshot["text"]


def test_company_boundaries(db, make, team):
    company, owner, agent, issue = team
    elsewhere = make.company("Elsewhere")
    make.member(elsewhere, "owner")
    foreign = add_connection(db, elsewhere, name="Foreign")
    # An install row in the other company naming our agent still grants nothing here.
    db.session.add(
        ConnectionInstall(
            company_id=elsewhere.id, connection_id=foreign.id, target_type="agent", target_id=agent.id
        )
    )
    db.session.commit()
    assert resolve_instructions_for_run(run_for(db, agent, issue, owner)) is None

    foreign_agent = make.agent(elsewhere, "Intruder")
    forged = HeartbeatRun(
        company_id=company.id,
        agent_id=foreign_agent.id,
        issue_id=issue.id,
        status="running",
        context_snapshot={},
    )
    db.session.add(forged)
    db.session.commit()
    with pytest.raises(Forbidden):
        resolve_instructions_for_run(forged)


# --- the prepared invocation -------------------------------------------------------------------------------------


def test_active_turn_keeps_its_snapshot_while_the_next_turn_sees_the_edit(make, db, team):
    company, owner, agent, issue = team
    connection = add_connection(db, company)
    run = make.claimed_run(agent, issue)
    first = prepare_invocation(run)
    db.session.commit()
    assert "release handbook" in first.connection_instructions["text"]

    connection.agent_instructions = {"enabled": True, "text": "Edited: cite the checklist."}
    db.session.commit()
    again = prepare_invocation(db.session.get(HeartbeatRun, run.id))
    db.session.commit()
    assert again.connection_instructions == first.connection_instructions
    assert "release handbook" in again.prompt

    complete_run(run, _ok())
    db.session.commit()
    following = make.claimed_run(agent, issue)
    assert following.id != run.id
    later = prepare_invocation(following)
    assert "Edited: cite the checklist." in later.connection_instructions["text"]
    assert later.connection_instructions["digest"] != first.connection_instructions["digest"]
    assert "Edited: cite the checklist." in later.prompt


def _ok():
    from app.adapters import AdapterResult

    return AdapterResult(ok=True)


FORGED = {"text": "forged", "digest": "forged"}


def test_forged_runtime_fields_never_survive(db, make, team):
    company, owner, _agent, _issue = team
    agent = make.agent(
        company,
        "Forger",
        adapter_type="http",
        adapter_config={
            "url": "https://agent.example.com/run",
            "connectionInstructions": FORGED,
            "paperclipConnectionInstructions": FORGED,
            "paperclipRuntimeTools": {"bearerToken": "forged"},
            "env": {"PAPERCLIP_CONNECTION_INSTRUCTIONS_FILE": "/forged", "KEEP": "yes"},
            "payloadTemplate": {
                "connectionInstructions": FORGED,
                "paperclipRuntimeTools": "forged",
                "nested": {"deeper": [{"connectionInstructions": "forged"}]},
                "keep": "template value",
            },
        },
    )
    issue = make.issue(company, status="in_progress", assignee=agent, responsible=owner)
    add_connection(db, company)
    run = make.claimed_run(
        agent,
        issue,
        context={
            "connectionInstructions": FORGED,
            "paperclipRuntimeTools": "forged",
            "paperclipWake": {"connectionInstructions": FORGED, "note": "kept"},
            "paperclipTurn": {"frozen": True, "connectionInstructions": FORGED},
            "nested": {"paperclipConnectionInstructions": "forged"},
        },
    )
    invocation = prepare_invocation(run)
    db.session.commit()
    serialized = json.dumps(dataclasses.asdict(invocation)) + json.dumps(request_body(invocation))
    assert "forged" not in serialized
    snapshot = invocation.connection_instructions
    assert snapshot is not None and "release handbook" in snapshot["text"]
    assert invocation.context["connectionInstructions"] == snapshot
    assert invocation.context["paperclipWake"] == {"connectionInstructions": snapshot, "note": "kept"}
    assert invocation.config["paperclipConnectionInstructions"] == snapshot
    assert invocation.config["env"] == {"KEEP": "yes"}
    assert invocation.config["payloadTemplate"]["keep"] == "template value"
    stored = db.session.get(HeartbeatRun, run.id).context_snapshot
    assert "forged" not in json.dumps(stored)


def test_runtime_tools_descriptor_and_wake_prompt(make, db, app, team):
    company, owner, agent, issue = team
    add_connection(db, company)
    run = make.claimed_run(agent, issue)
    invocation = prepare_invocation(run)
    tools = invocation.runtime_tools
    assert tools["version"] == 1 and tools["tools"] == ["connections_search", "connection_request"]
    assert tools["mcpEndpoint"] == "http://127.0.0.1:5000/mcp/runtime-tools"
    assert tools["rest"]["connectionRequest"] == "http://127.0.0.1:5000/runtime-tools/connections/request"
    assert tools["bearerToken"] and tools["expiresAt"].endswith("Z")
    assert invocation.connection_instructions["text"] in invocation.prompt
    assert issue.title in invocation.prompt and "connections_search" in invocation.prompt
    assert tools["bearerToken"] not in json.dumps(db.session.get(HeartbeatRun, run.id).context_snapshot)


def test_no_descriptor_without_responsible_person_or_public_url(db, app, make, team):
    company, owner, agent, _issue = team
    unowned = make.issue(company, status="in_progress", assignee=agent)
    run = make.claimed_run(agent, unowned)
    invocation = prepare_invocation(run)
    assert invocation.runtime_tools is None and invocation.connection_instructions is None
    db.session.commit()

    issue = make.issue(company, status="in_progress", assignee=agent, responsible=owner)
    saved = app.config["PUBLIC_BASE_URL"]
    app.config["PUBLIC_BASE_URL"] = ""
    try:
        assert prepare_invocation(make.claimed_run(agent, issue)).runtime_tools is None
    finally:
        app.config["PUBLIC_BASE_URL"] = saved


# --- cost ------------------------------------------------------------------------------------------------------


def test_resolution_costs_constant_statements_and_a_repeat_reads_only_the_revision(db, team):
    from app.services.connections.instructions import BLOCK_PREFIX
    from app.services.runs.snapshot import clear_instruction_sources
    from tests.conftest import count_statements

    company, owner, agent, issue = team
    run = run_for(db, agent, issue, owner)
    built, repeated = [], []
    for total in (3, 30):
        while len(db.session.scalars(select(ToolConnection)).all()) < total:
            add_connection(db, company, tools={"search": "allow", "delete": "block"})
        db.session.commit()
        resolve_instructions_for_run(run)  # the process's parsed catalog holds the app (not what is counted)
        clear_instruction_sources()
        for counts in (built, repeated):
            db.session.expire_all()
            with count_statements(db.engine) as statements:
                snapshot = resolve_instructions_for_run(run)
            counts.append(len(statements))
            assert snapshot is not None and snapshot["text"].count(BLOCK_PREFIX) == total
            db.session.rollback()
    assert built[0] == built[1]  # the same statements for 3 and 30 connections
    assert repeated[0] == repeated[1] and repeated[0] < built[0]
    assert repeated[0] <= 4  # the (expired) run, its agent and task, the revision
    # An access change raises the revision: the next resolution sees it.
    connection = db.session.scalars(select(ToolConnection)).first()
    connection.agent_instructions = {**HANDBOOK, "enabled": False}
    db.session.commit()
    assert resolve_instructions_for_run(run)["text"].count(BLOCK_PREFIX) == 29
