"""The continuation of a connected card says what is true when it starts (issue 26 item 6).

Delivery wakes the agent once the connection is ready; the connection can still be disabled (or its tools blocked)
before the continuation runs. The prompt is built when the run starts, from the one readiness rule, so it never says
the tools are available when they are not.
"""

from __future__ import annotations

import pytest
from sqlalchemy import select

from app.models import HeartbeatRun, Membership
from app.services.connections import settings
from app.services.intents import resolution
from app.services.management import lifecycle as management
from app.services.runs.invocation import prepare_invocation
from app.workers.continuations import WOKEN, sweep_pending
from tests.factories import Factory
from tests.services.runs.test_run_instructions import add_connection


@pytest.fixture
def team(make):
    return make.team(adapter_type="manual")


def _why(prompt: str) -> str:
    """The whole "Why you were woken" paragraph of a prompt."""
    return prompt.split("## Why you were woken\n\n", 1)[1].split("\n\n", 1)[0]


def _connected_continuation(db, team):
    """A Notion card connected with a ready connection and its continuation run (queued), committed."""
    company, owner, agent, issue = team
    connection = add_connection(db, company, slug="notion", name="Notion", config={})
    interaction = Factory(db).card(issue, agent, owner, "notion", run_finished=True)
    resolution.complete_intent(interaction.id, owner.id, connection.id)
    db.session.commit()
    assert sweep_pending() == {WOKEN: 1}
    run = db.session.scalars(
        select(HeartbeatRun).where(HeartbeatRun.agent_id == agent.id, HeartbeatRun.status == "queued")
    ).one()
    return connection, interaction, run


def _owner_membership(db, company, owner) -> Membership:
    return db.session.scalar(
        select(Membership).where(Membership.company_id == company.id, Membership.user_id == owner.id)
    )


def test_a_ready_connection_is_announced_as_available(db, team):
    _connection, interaction, run = _connected_continuation(db, team)
    assert _why(prepare_invocation(run).prompt) == (
        f"The responsible person connected Notion for this task (connection request {interaction.id}). "
        "Its tools are available to you now within their permissions. Continue the task; this is a fresh session."
    )


def test_a_connection_disabled_before_the_continuation_is_not_announced_as_available(db, team):
    company, owner, _agent, _issue = team
    connection, interaction, run = _connected_continuation(db, team)
    assert management.set_enabled(_owner_membership(db, company, owner), connection, False)
    db.session.commit()

    prompt = prepare_invocation(run).prompt

    assert _why(prompt) == (
        f"The responsible person connected Notion for this task (connection request {interaction.id}), "
        # The reason is the runtime tools' own (reference.md 5.3): the company has a Notion connection this agent
        # cannot use now.
        "but its tools are not available to you now: Review identity and access for this agent. "
        "Do not rely on them in this run; continue with what you can do without them, and tell the responsible "
        "person in the task if you still need Notion. This is a fresh session."
    )
    assert "available to you now within" not in prompt


def test_tools_blocked_before_the_continuation_are_not_announced_as_available(db, team):
    company, owner, _agent, _issue = team
    connection, interaction, run = _connected_continuation(db, team)
    settings.update_connection(
        _owner_membership(db, company, owner), connection, None, tool_policies={"search": "block"}
    )
    db.session.commit()

    assert _why(prepare_invocation(run).prompt) == (
        f"The responsible person connected Notion for this task (connection request {interaction.id}), "
        "but its tools are not available to you now: An administrator has not permitted executable tools for "
        "this agent; reconnecting cannot grant that permission. "
        "Do not rely on them in this run; continue with what you can do without them, and tell the responsible "
        "person in the task if you still need Notion. This is a fresh session."
    )


def test_a_declined_card_keeps_its_text(db, team):
    _company, owner, agent, issue = team
    interaction = Factory(db).card(issue, agent, owner, "notion", run_finished=True)
    resolution.decline_intent(interaction.id, owner.id, "Not now")
    db.session.commit()
    assert sweep_pending() == {WOKEN: 1}
    run = db.session.scalars(
        select(HeartbeatRun).where(HeartbeatRun.agent_id == agent.id, HeartbeatRun.status == "queued")
    ).one()
    assert _why(prepare_invocation(run).prompt) == (
        f"The responsible person declined the connection request for Notion ({interaction.id}). "
        "Pursue alternatives; do not request it again in this continuation. This is a fresh session."
    )
