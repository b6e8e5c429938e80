"""The explainer's `quarantine` and `limit` checks (issue 28's seams): a tool whose definition changed and waits for
review is named as quarantined (not as an unknown tool), and a call limit used up now is named with when it frees."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from app.models import ConnectionTool, GatewayCallCounter
from app.services.access.effective import connection_access
from app.services.access.explain import explain_access
from app.services.connections.audience import add_agent_install
from app.services.gateway.limits import _key


@pytest.fixture
def acme(make, db):
    company, owner, agent, _issue = make.team()
    return company, owner, agent


def first(explanation):
    failure = explanation.first_failure
    return None if failure is None else (failure.check, failure.reason)


def statuses(explanation):
    return {answer.name: answer.status for answer in explanation.checks}


def _quarantine(db, connection, *names):
    for tool in db.session.query(ConnectionTool).filter_by(connection_id=connection.id):
        if tool.name in names:
            tool.status = "quarantined"
            tool.pending_definition = {"description": "changed", "inputSchema": {}, "digest": "0" * 64}
    db.session.commit()


def test_a_quarantined_tool_is_named_as_quarantined(make, db, acme):
    company, owner, agent = acme
    connection = make.connection(
        company, name="Notion", grants=[("organization", None)], tools={"search": "allow", "save": None}
    )
    _quarantine(db, connection, "search")

    search = explain_access(agent, owner.id, connection, "search")
    assert not search.ready and first(search) == ("quarantine", "definition_changed")
    assert search.summary == (
        "Builder can't use search on Notion: search changed at the provider since a person last reviewed it, so "
        "it is quarantined: someone who can manage connections reviews and accepts the change on the "
        "connection's page."
    )
    assert statuses(search)["policy"] == "pass" and statuses(search)["quarantine"] == "fail"
    # The connection still has a usable tool: it is ready, and so is that tool.
    assert explain_access(agent, owner.id, connection).ready
    assert explain_access(agent, owner.id, connection, "save").ready
    # A tool that never existed is still an unknown tool.
    assert first(explain_access(agent, owner.id, connection, "nope")) == ("policy", "unknown_tool")


def test_a_connection_whose_every_tool_is_quarantined_says_quarantine(make, db, acme):
    company, owner, agent = acme
    connection = make.connection(
        company, name="Notion", grants=[("organization", None)], tools={"search": "allow", "save": None}
    )
    _quarantine(db, connection, "search", "save")

    explained = explain_access(agent, owner.id, connection)
    assert first(explained) == ("quarantine", "all_quarantined")
    assert explained.summary == (
        "Builder can't use Notion: Every tool this agent could use changed at the provider and waits for review "
        "(save, search): someone who can manage connections reviews and accepts the change on the connection's "
        "page."
    )
    # The hot path decides the same (not ready), by the policy check, since its SQL never reads quarantined tools.
    access = connection_access(company.id, agent.id, owner.id, connection.id)
    assert access is not None and not access.is_ready


def test_policy_and_scope_still_come_first_for_a_quarantined_tool(make, db, acme):
    company, owner, agent = acme
    connection = make.connection(
        company,
        name="Notion",
        grants=[("organization", None)],
        tools={"search": "allow", "drop": "block", "save": None},
        installed=False,
    )
    add_agent_install(connection, agent.id, None, tool_scope={"search": "allow", "drop": "allow"})
    db.session.commit()
    _quarantine(db, connection, "search", "drop", "save")

    assert first(explain_access(agent, owner.id, connection, "drop")) == ("policy", "blocked")
    assert first(explain_access(agent, owner.id, connection, "save")) == ("policy", "out_of_scope")
    assert first(explain_access(agent, owner.id, connection, "search")) == (
        "quarantine",
        "definition_changed",
    )
    assert first(explain_access(agent, owner.id, connection)) == ("quarantine", "all_quarantined")


def _use_up(db, connection, scope, subject, kind, window, count, frees_at):
    db.session.add(
        GatewayCallCounter(
            key=_key(scope, *subject, kind, window),
            connection_id=connection.id,
            expires_at=frees_at,
            count=count,
        )
    )
    db.session.commit()


def test_a_used_up_limit_is_named_with_when_it_frees(make, db, acme):
    company, owner, agent = acme
    connection = make.connection(
        company, name="Notion", grants=[("organization", None)], tools={"search": "allow", "save": "allow"}
    )
    db.session.query(ConnectionTool).filter_by(connection_id=connection.id, name="save").update(
        {"is_write": True}
    )
    db.session.commit()
    frees_at = int(time.time()) + 3600
    # The agent's 120 read calls per minute (the default) are used up.
    _use_up(db, connection, "agent", (connection.id, agent.id), "read", "minute", 120, frees_at)
    when = datetime.fromtimestamp(frees_at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")

    search = explain_access(agent, owner.id, connection, "search")
    assert first(search) == ("limit", "read_agent_minute")
    assert search.summary == (
        f"Builder can't use search on Notion: Notion allows 120 calls per minute from one agent, and they are used "
        f"up: the next call is refused until {when}."
    )
    # Writes are counted apart: the write tool, and so the connection, are still usable.
    assert explain_access(agent, owner.id, connection, "save").ready
    assert explain_access(agent, owner.id, connection).ready

    # The write tool's own per-tool limit used up too: now nothing is left, and the later window is named.
    _use_up(db, connection, "tool", (connection.id, "save"), "write", "minute", 40, frees_at + 60)
    later = datetime.fromtimestamp(frees_at + 60, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    save = explain_access(agent, owner.id, connection, "save")
    assert first(save) == ("limit", "write_tool_minute")
    assert save.first_failure.message == (
        f"Notion allows 40 write calls per minute to save, and they are used up: the next call is refused until "
        f"{later}."
    )
    # The connection-level answer reads no per-tool counters: the agent's writes are still free.
    assert explain_access(agent, owner.id, connection).ready


def test_an_ended_window_or_a_count_under_the_limit_passes(make, db, acme):
    company, owner, agent = acme
    connection = make.connection(
        company, name="Notion", grants=[("organization", None)], tools={"search": "allow"}
    )
    _use_up(
        db, connection, "agent", (connection.id, agent.id), "read", "minute", 119, int(time.time()) + 3600
    )
    _use_up(db, connection, "agent", (connection.id, agent.id), "read", "day", 10_000, int(time.time()) - 1)
    explained = explain_access(agent, owner.id, connection, "search")
    assert explained.ready and statuses(explained)["limit"] == "pass"


def test_the_identitys_used_up_limit_blocks_the_whole_connection(make, db, acme):
    company, owner, agent = acme
    connection = make.connection(
        company, name="Notion", grants=[("organization", None)], tools={"search": "allow"}
    )
    grant = connection_access(company.id, agent.id, owner.id, connection.id).grant
    _use_up(db, connection, "grant", (grant.id,), "read", "day", 20_000, int(time.time()) + 600)
    explained = explain_access(agent, owner.id, connection)
    assert first(explained) == ("limit", "read_grant_day")
    assert "20000 calls per day through this identity" in explained.first_failure.message
