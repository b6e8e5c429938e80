"""Property (hypothesis): over random identities, audiences, policies, scopes and connection states, the three
answers to "can Builder use this connection?" agree:

- `connections_search` says the service is `ready` (over the runtime door, as the agent asks),
- the gateway's `tools/list` lists at least one of the connection's tools (over the gateway door),
- the explainer says ready, and names a failing check exactly when it does not.

Each example is a company of its own with one Notion connection, so the service's state and the listing speak of
that connection alone.
"""

from __future__ import annotations

import itertools

from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from app.models import ConnectionGrant, ConnectionInstall, ConnectionTool, ToolConnection, ToolPolicy
from app.services.access import checks
from app.services.access.explain import explain_access
from tests.doors import rpc, search

PROPERTY = settings(
    max_examples=80,
    deadline=None,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
_companies = itertools.count()

# Weighted toward live, healthy, active, so that later checks (credentials, policy) are reached often.
STATUSES = st.sampled_from(["active"] * 6 + ["draft", "disconnected", "archived"])
HEALTH = st.sampled_from(["healthy"] * 4 + ["unchecked", "needs_attention", "error", "needs_reauthorization"])
GRANT_STATUS = st.sampled_from(["active"] * 3 + ["revoked", "expired", "needs_reauthorization"])
ACTIONS = st.sampled_from([None, "allow", "ask_first", "block"])
TOOL_NAMES = ["search", "read", "write"]
optional_status = st.none() | GRANT_STATUS

states = st.fixed_dictionaries(
    {
        "status": STATUSES,
        "enabled": st.sampled_from([True] * 5 + [False]),
        "health": HEALTH,
        # Organization identities: (status, is default); at most one default (the database says so).
        "organization": st.lists(st.tuples(GRANT_STATUS, st.booleans()), max_size=2),
        "owner": optional_status,  # the task's responsible person's own identity
        "member": optional_status,  # another member's
        "builder": optional_status,  # the agent's own
        "helper": optional_status,  # another agent's
        "responsible": st.sampled_from(["owner", "member"]),
        "company_wide": st.sampled_from([True, True, False]),
        # The agent's own install: none, every tool, or an access card's scope (tool: permission).
        "agent_install": st.none()
        | st.just("all")
        | st.dictionaries(st.sampled_from(TOOL_NAMES), st.sampled_from(["allow", "ask_first"])),
        "tools": st.dictionaries(st.sampled_from(TOOL_NAMES), ACTIONS),
        # Tools whose definition changed at the provider and wait for review (among `tools`).
        "quarantined": st.sets(st.sampled_from(TOOL_NAMES)),
    }
)


def _build(make, db, client, state):
    world = make.task_run(f"Company {next(_companies)}")
    company, owner, agent, issue = world.company, world.owner, world.agent, world.issue
    member = make.member(company, "member")
    helper = make.agent(company, "Helper")
    responsible = owner if state["responsible"] == "owner" else member
    run, token = make.run(agent, issue, responsible)
    connection = ToolConnection(
        company_id=company.id,
        app_slug="notion",
        name="Notion",
        status=state["status"],
        enabled=state["enabled"],
        health_status=state["health"],
        auth_kind="api_key",
        config={},
    )
    db.session.add(connection)
    db.session.flush()
    grants = []
    default_taken = False
    for status, default in state["organization"]:
        grants.append(dict(kind="organization", status=status, is_default=default and not default_taken))
        default_taken = default_taken or default
    for key, kind, subject in (
        ("owner", "user", owner),
        ("member", "user", member),
        ("builder", "agent", agent),
        ("helper", "agent", helper),
    ):
        if state[key] is not None:
            grants.append(
                dict(
                    kind=kind,
                    status=state[key],
                    subject_user_id=subject.id if kind == "user" else None,
                    subject_agent_id=subject.id if kind == "agent" else None,
                )
            )
    for values in grants:
        db.session.add(ConnectionGrant(company_id=company.id, connection_id=connection.id, **values))
    if state["company_wide"]:
        db.session.add(
            ConnectionInstall(
                company_id=company.id,
                connection_id=connection.id,
                target_type="company",
                target_id=company.id,
            )
        )
    if state["agent_install"] is not None:
        scope = None if state["agent_install"] == "all" else state["agent_install"]
        db.session.add(
            ConnectionInstall(
                company_id=company.id,
                connection_id=connection.id,
                target_type="agent",
                target_id=agent.id,
                tool_scope=scope,
            )
        )
    for name, action in state["tools"].items():
        db.session.add(
            ConnectionTool(
                company_id=company.id,
                connection_id=connection.id,
                name=name,
                description=f"{name} pages",
                version_hash="v1",
                is_write=name == "write",
                status="quarantined" if name in state.get("quarantined", ()) else "active",
            )
        )
        if action is not None:
            db.session.add(
                ToolPolicy(company_id=company.id, connection_id=connection.id, tool_name=name, action=action)
            )
    db.session.commit()
    return agent, responsible, connection, token


LIVE = {
    "status": "active",
    "enabled": True,
    "health": "healthy",
    "organization": [("active", True)],
    "owner": None,
    "member": None,
    "builder": None,
    "helper": None,
    "responsible": "owner",
    "company_wide": True,
    "agent_install": None,
}


@PROPERTY
@given(state=states)
# The policy check's answers, besides what the draw finds: ready, every tool blocked, a card's scope that leaves the
# tools out, no tools at all, and someone else's personal identity.
@example(state={**LIVE, "tools": {"search": "allow", "write": None}})
@example(state={**LIVE, "tools": {"search": "block", "write": "block"}})
@example(
    state={**LIVE, "company_wide": False, "agent_install": {"read": "allow"}, "tools": {"search": "allow"}}
)
@example(state={**LIVE, "tools": {}})
@example(state={**LIVE, "organization": [], "member": "active", "tools": {"search": "allow"}})
# Quarantined tools: one of two, every one, and the only unblocked one.
@example(state={**LIVE, "tools": {"search": "allow", "write": None}, "quarantined": {"search"}})
@example(state={**LIVE, "tools": {"search": "allow", "write": None}, "quarantined": {"search", "write"}})
@example(state={**LIVE, "tools": {"search": "allow", "write": "block"}, "quarantined": {"search"}})
def test_search_the_gateway_and_the_explainer_agree(make, db, client, state):
    agent, responsible, connection, token = _build(make, db, client, state)

    found = search(client, token, "notion")
    assert found.status_code == 200, found.json
    notion = next(r for r in found.json["results"] if r["service"] == "notion")
    search_ready = notion["state"] == "ready"

    listed = rpc(client, token, "tools/list")
    assert listed.status_code == 200, listed.json
    names = [t["name"] for t in listed.json["result"]["tools"]]
    assert all(n.startswith("notion__") for n in names)
    gateway_lists = bool(names)

    explained = explain_access(agent, responsible.id, connection)
    assert search_ready == gateway_lists == explained.ready, (state, notion, names, explained.first_failure)
    assert (explained.first_failure is None) == explained.ready
    if search_ready:
        assert notion["connectionId"] == str(connection.id)
    else:
        failed = explained.first_failure
        assert failed is not None and failed.check in checks.CHECK_ORDER
        # It is the first of the checks that fail, in the rule's order (the advisory one never decides).
        failing = [a.name for a in explained.checks if a.status == "fail" and a.blocks_tools]
        assert failing[0] == failed.check

    # A named tool: listed by the gateway exactly when the explainer says that tool is ready.
    for name in TOOL_NAMES:
        one = explain_access(agent, responsible.id, connection, name)
        assert one.ready == (f"notion__{name}" in names), (state, name, one.first_failure)
        # A quarantined tool is never listed; when the checks reach the tool, quarantine is what they name.
        if name in state.get("quarantined", ()) and name in state["tools"]:
            failed = one.first_failure
            assert failed is not None and failed.reason != "unknown_tool", (state, name, failed)
            if failed.check == "policy":
                assert failed.reason in ("blocked", "out_of_scope"), (state, name, failed)
