"""The explainer names the first failing check of the access rule, in the rule's order, or says ready; its `ready`
is the decision the gateway and search take (`ConnectionAccess.first_failure`, the same loop)."""

from __future__ import annotations

import pytest

from app.models import ConnectionGrant
from app.services.access import checks
from app.services.access.effective import connection_access
from app.services.access.explain import explain_access
from app.services.connections.audience import add_agent_install


@pytest.fixture
def acme(make, db):
    company, owner, agent, _issue = make.team()
    return company, owner, agent


def first(explanation):
    failure = explanation.first_failure
    return None if failure is None else (failure.check, failure.reason)


def statuses(explanation):
    return {answer.name: answer.status for answer in explanation.checks}


def test_a_ready_connection_passes_every_check_in_order(make, acme):
    company, owner, agent = acme
    connection = make.connection(
        company,
        name="Notion",
        grants=[("organization", None)],
        config={
            "connectionMethodKey": "custom-api-key",
            "methodConfig": {"serverUrl": "https://mcp.example/"},
        },
        tools={"a": "allow"},
    )
    explained = explain_access(agent, owner.id, connection)
    assert explained.ready and first(explained) is None
    assert explained.summary == "Ready: Builder can use Notion."
    assert [a.name for a in explained.checks] == list(checks.CHECK_ORDER)
    assert statuses(explained) == {
        "grant": "pass",
        "audience": "pass",
        "identity_owner": "pass",
        "enabled": "pass",
        "health": "pass",
        "credentials": "pass",
        "policy": "pass",
        "quarantine": "pass",
        "limit": "pass",
        "required_configuration": "pass",
    }


def _grant(db, connection, kind, *, subject=None, status="active", default=False):
    grant = ConnectionGrant(
        company_id=connection.company_id,
        connection_id=connection.id,
        kind=kind,
        subject_user_id=subject.id if kind == "user" else None,
        subject_agent_id=subject.id if kind == "agent" else None,
        status=status,
        is_default=default,
    )
    db.session.add(grant)
    db.session.commit()
    return grant


def test_each_check_is_named_when_it_is_the_first_to_fail(make, db, acme):
    company, owner, agent = acme
    other = make.member(company, "member")
    viewer = make.member(company, "viewer")
    tools = {"a": "allow"}
    cases = {}
    cases["no grant"] = make.connection(company, tools=tools)
    cases["not installed"] = make.connection(
        company, grants=[("organization", None)], installed=False, tools=tools
    )
    cases["someone else's"] = make.connection(company, grants=[("user", other)], tools=tools)
    disabled = make.connection(company, grants=[("organization", None)], tools=tools)
    disabled.enabled = False
    cases["disabled"] = disabled
    disconnected = make.connection(company, grants=[("organization", None)], tools=tools)
    disconnected.status = "disconnected"
    cases["disconnected"] = disconnected
    cases["unhealthy"] = make.connection(
        company, grants=[("organization", None)], health_status="needs_reauthorization", tools=tools
    )
    expired = make.connection(company, tools=tools)
    _grant(db, expired, "organization", status="needs_reauthorization")
    cases["expired"] = expired
    ambiguous = make.connection(company, tools=tools)
    _grant(db, ambiguous, "organization")
    _grant(db, ambiguous, "organization")
    cases["ambiguous"] = ambiguous
    cases["no tools"] = make.connection(company, grants=[("organization", None)])
    cases["all blocked"] = make.connection(company, grants=[("organization", None)], tools={"a": "block"})
    # Everything wrong at once: the rule's order says which one is named.
    worst = make.connection(company, grants=[("user", other)], installed=False, health_status="error")
    worst.enabled = False
    cases["worst"] = worst
    db.session.commit()

    expected = {
        "no grant": ("grant", "no_identity"),
        "not installed": ("audience", "not_installed"),
        "someone else's": ("identity_owner", "someone_elses_identity"),
        "disabled": ("enabled", "disabled"),
        "disconnected": ("enabled", "disconnected"),
        "unhealthy": ("health", "needs_reauthorization"),
        "expired": ("credentials", "needs_reauthorization"),
        "ambiguous": ("credentials", "ambiguous"),
        "no tools": ("policy", "no_tools"),
        "all blocked": ("policy", "all_blocked"),
        "worst": ("audience", "not_installed"),
    }
    for case, connection in cases.items():
        explained = explain_access(agent, owner.id, connection)
        assert first(explained) == expected[case], case
        assert not explained.ready, case
        # The decisions the hot paths take agree: not ready (not even returned when not installed or not live).
        access = connection_access(company.id, agent.id, owner.id, connection.id)
        assert access is None or not access.is_ready, case

    # A personal identity serves only its owner's runs, and only while the owner may write.
    personal = make.connection(company, grants=[("user", viewer)], tools=tools)
    assert first(explain_access(agent, viewer.id, personal)) == ("identity_owner", "no_responsible_person")
    assert first(explain_access(agent, other.id, personal)) == ("identity_owner", "someone_elses_identity")


def test_a_named_tool_is_checked_against_its_policy_and_the_cards_scope(make, db, acme):
    company, owner, agent = acme
    connection = make.connection(
        company,
        name="Notion",
        grants=[("organization", None)],
        tools={"search": "allow", "save": None, "drop": "block"},
        installed=False,
    )
    add_agent_install(connection, agent.id, None, tool_scope={"search": "allow", "drop": "allow"})
    db.session.commit()
    search = explain_access(agent, owner.id, connection, "search")
    assert search.ready and search.action == "allow"
    blocked = explain_access(agent, owner.id, connection, "drop")
    assert first(blocked) == ("policy", "blocked")
    assert blocked.summary == (
        "Builder can't use drop on Notion: An administrator blocked drop for agents on this connection."
    )
    assert first(explain_access(agent, owner.id, connection, "save")) == ("policy", "out_of_scope")
    assert first(explain_access(agent, owner.id, connection, "nope")) == ("policy", "out_of_scope")


def test_an_unknown_tool_is_named_as_such(make, acme):
    company, owner, agent = acme
    connection = make.connection(company, grants=[("organization", None)], tools={"a": None})
    explained = explain_access(agent, owner.id, connection, "b")
    assert first(explained) == ("policy", "unknown_tool")
    asked = explain_access(agent, owner.id, connection, "a")
    assert asked.ready and asked.action == "ask_first"


def test_missing_required_settings_are_advisory(make, acme):
    """The Permissions page promises that existing tools remain available without a required setting: the check
    fails and is shown, but the connection stays ready (its instructions are what it holds back)."""
    company, owner, agent = acme
    connection = make.connection(
        company,
        slug="honcho",
        grants=[("organization", None)],
        config={"connectionMethodKey": "mcp-api-key", "methodConfig": {}},
        tools={"a": "allow"},
    )
    explained = explain_access(agent, owner.id, connection)
    assert explained.ready and first(explained) is None
    advisory = next(a for a in explained.checks if a.name == "required_configuration")
    assert advisory.status == "fail" and advisory.blocks_tools is False
    assert advisory.failure is not None and advisory.failure.reason == "missing_settings"


def test_a_feature_fills_a_slot_and_takes_part_in_every_decision(make, acme):
    """The extension point: a check registered into the `quarantine` slot refuses in its place in the order,
    for the explainer and for the decisions alike."""
    company, owner, agent = acme
    connection = make.connection(company, grants=[("organization", None)], tools={"a": "allow"})

    def quarantine(subject):
        return checks.CheckFailure("quarantine", "changed", "A tool changed and waits for review.")

    with pytest.raises(ValueError):
        checks.register_check("nonsense", quarantine, label="Nonsense")
    previous = checks._registered.get("quarantine")
    checks.register_check("quarantine", quarantine, label="Quarantine")
    try:
        explained = explain_access(agent, owner.id, connection)
        assert first(explained) == ("quarantine", "changed")
        assert statuses(explained)["quarantine"] == "fail"
        access = connection_access(company.id, agent.id, owner.id, connection.id)
        assert access is not None and access.usable_now and not access.is_ready
    finally:
        checks._registered.pop("quarantine")
        if previous is not None:  # the quarantine feature's own check, registered at import
            checks._registered["quarantine"] = previous
        checks._by_names.clear()
    assert explain_access(agent, owner.id, connection).ready
