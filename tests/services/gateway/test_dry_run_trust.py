"""The policy dry run consults trust rules and quarantine (issue 28's seams): an ask-first call a live rule covers
is "allowed by" that rule (named), and a tool whose definition changed and waits for review is quarantined."""

from __future__ import annotations

from datetime import timedelta

import pytest

from app.models import ConnectionTool, ToolTrustRule
from app.models.base import utcnow
from app.services.connections.tool_definitions import reviewed_digest
from app.services.gateway.arguments import canonical_digest
from app.services.gateway.dry_run import dry_run_call


@pytest.fixture
def world(make, db):
    company, owner, agent, issue = make.team()
    connection = make.connection(
        company, name="Notion", grants=[("organization", None)], tools={"search": None, "save": "allow"}
    )
    search = db.session.query(ConnectionTool).filter_by(connection_id=connection.id, name="search").one()
    return company, owner, agent, issue, connection, search


def _rule(db, world, **values):
    company, owner, agent, _issue, connection, search = world
    rule = ToolTrustRule(
        company_id=company.id,
        connection_id=connection.id,
        tool_name="search",
        definition_digest=reviewed_digest(search),
        agent_id=agent.id,
        created_by_user_id=owner.id,
        **{"scope": "agent_connection", **values},
    )
    db.session.add(rule)
    db.session.commit()
    return rule


def test_an_ask_first_call_without_a_rule_asks_first(db, world):
    _company, owner, agent, _issue, connection, _search = world
    assert dry_run_call(agent, owner.id, connection, "search", {"q": "x"}).decision == "ask_first"


def test_a_live_rule_allows_the_call_and_is_named(db, world):
    _company, owner, agent, _issue, connection, _search = world
    rule = _rule(db, world, remaining_uses=3)
    answer = dry_run_call(agent, owner.id, connection, "search", {"q": "x"})
    assert answer.decision == "allowed_by_rule" and answer.trust_rule is not None
    assert answer.trust_rule.id == rule.id
    made = rule.created_at.strftime("%Y-%m-%d %H:%M")
    assert answer.message == (
        f"The call would run at once without asking: allowed by trust rule {rule.id} (made by "
        f"{owner.name} at {made} UTC, 3 calls left)."
    )
    # A dry run spends nothing.
    db.session.refresh(rule)
    assert rule.remaining_uses == 3 and rule.uses == 0


def test_rules_that_would_not_let_the_call_through_are_ignored(db, world):
    _company, owner, agent, issue, connection, search = world
    _rule(db, world, revoked_at=utcnow())
    _rule(db, world, expires_at=utcnow() - timedelta(minutes=1))
    _rule(db, world, remaining_uses=0)
    _rule(db, world, scope="task", issue_id=issue.id)  # a dry run is on no task
    _rule(db, world, arguments_digest=canonical_digest({"q": "other"}))
    stale = _rule(db, world)
    stale.definition_digest = "0" * 64  # made for a definition the tool no longer has
    db.session.commit()
    assert dry_run_call(agent, owner.id, connection, "search", {"q": "x"}).decision == "ask_first"
    # The argument-bound rule covers exactly its arguments.
    bound = dry_run_call(agent, owner.id, connection, "search", {"q": "other"})
    assert bound.decision == "allowed_by_rule" and "only these arguments" in bound.message


def test_an_allowed_tool_needs_no_rule(db, world):
    _company, owner, agent, _issue, connection, _search = world
    answer = dry_run_call(agent, owner.id, connection, "save", {})
    assert answer.decision == "allowed" and answer.trust_rule is None


def test_a_quarantined_tool_is_named_as_quarantined(db, world):
    _company, owner, agent, _issue, connection, search = world
    _rule(db, world)
    search.status = "quarantined"
    search.pending_definition = {"description": "changed", "inputSchema": {}, "digest": "1" * 64}
    db.session.commit()
    answer = dry_run_call(agent, owner.id, connection, "search", {"q": "x"})
    assert answer.decision == "quarantined" and answer.arguments_digest is None
    assert answer.message == (
        "The call would be refused: the tool changed at the provider and waits for review. search changed at the "
        "provider since a person last reviewed it, so it is quarantined: someone who can manage connections "
        "reviews and accepts the change on the connection's page."
    )
