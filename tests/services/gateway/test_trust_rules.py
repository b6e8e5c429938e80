"""Approvals people can live with (issue 28 item 1): "Always allow" trust rules made on the approval card, bound
to the tool's definition digest, and answered only from a person's board session.

The agent is the official MCP SDK client against `/mcp/gateway` (or the gateway door with its run token); the
provider is the Honcho-like SDK server on loopback, which records what it actually executed.
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import select

from app.models import ToolTrustRule
from app.models.base import utcnow
from app.services.notifications import card_data
from tests.conftest import serving
from tests.doors import bearer, refusal_fields, rpc
from tests.peers.mcp_servers import HONCHO_KEY
from tests.services.gateway.test_gateway import URL, approve, cards, connect, gateway_activity, run_agent

SAVE = "honcho__save_memory"


@pytest.fixture
def live_server(app, db):
    with serving(app) as base:
        yield f"{base}{URL}"


@pytest.fixture
def world(make, client, providers):
    """Acme: an owner (the task's responsible person), Builder running on it, a board client signed in as owner."""
    return make.task_run(client=client)


def always_allow(world, approval_id, client=None, csrf=None, **choice):
    data = {"scope": "task", "expires_in": "never", **choice}
    return (client or world.client).post(
        f"/approvals/{approval_id}/always-allow",
        data=data,
        headers={"X-CSRFToken": csrf or world.csrf, "HX-Request": "true"},
    )


def call(world, content, token=None, tool=SAVE):
    answer = rpc(
        world.client, token or world.token, "tools/call", {"name": tool, "arguments": {"content": content}}
    )
    assert answer.status_code == 200, answer.get_data(as_text=True)
    return answer.json["result"]


def reason(result) -> str | None:
    return refusal_fields(result).get("reasonCode") if result.get("isError") else None


def rules(db):
    db.session.expire_all()
    return db.session.scalars(select(ToolTrustRule).order_by(ToolTrustRule.created_at)).all()


def test_thirty_writes_in_one_task_need_one_card_with_a_task_rule(
    db, make, world, live_server, honcho_server
):
    """The issue's example: an agent saves 30 memories in one task; the person answers one card with "Always
    allow" for this task, and the other 29 calls run without asking."""
    connect(world, "honcho", HONCHO_KEY)
    state = {}

    async def scenario(session):
        first = await session.call_tool(SAVE, {"content": "memory 0"})
        assert first.is_error and refusal_fields(first)["reasonCode"] == "approval_required"
        answered = always_allow(world, refusal_fields(first)["approvalId"])
        assert answered.status_code == 200
        html = answered.get_data(as_text=True)
        assert "<html" not in html and "Always allowed by" in html
        state["approval_id"] = refusal_fields(first)["approvalId"]
        results = [await session.call_tool(SAVE, {"content": f"memory {i}"}) for i in range(30)]
        return results

    results = run_agent(live_server, world.token, scenario)
    assert [r.is_error for r in results] == [False] * 30
    assert [args["content"] for _tool, args in honcho_server.calls] == [f"memory {i}" for i in range(30)]
    all_cards = cards(db)
    assert len(all_cards) == 1 and all_cards[0].status == "consumed"
    decisions = [r.details["decision"] for r in gateway_activity(db)]
    assert decisions == ["approval_required", "approved"] + ["allowed_by_trust_rule"] * 29
    [rule] = rules(db)
    assert (rule.scope, rule.issue_id, rule.agent_id, rule.uses) == (
        "task",
        world.issue.id,
        world.agent.id,
        29,
    )
    assert rule.created_by_user_id == world.owner.id and rule.source_interaction_id == all_cards[0].id
    assert all_cards[0].payload["definitionDigest"] == rule.definition_digest
    assert {r.details.get("trustRuleId") for r in gateway_activity(db)[2:]} == {str(rule.id)}
    # Another task of the same agent is not covered by a task rule.
    assert reason(call(world, "elsewhere", other_task_token(make, world))) == "approval_required"


def other_task_token(make, world) -> str:
    """A run token of the same agent on another task of the same person."""
    issue = make.issue(world.company, assignee=world.agent, responsible=world.owner, status="in_progress")
    return make.run(world.agent, issue, world.owner)[1]


def test_agent_connection_scope_reaches_other_tasks_and_argument_binding_holds(
    db, make, world, honcho_server
):
    connect(world, "honcho", HONCHO_KEY)
    first = call(world, "exact words")
    assert (
        always_allow(
            world, refusal_fields(first)["approvalId"], scope="agent_connection", only_these_arguments="y"
        ).status_code
        == 200
    )
    assert reason(call(world, "exact words")) is None  # the approved card itself
    assert reason(call(world, "exact words")) is None  # the rule
    assert reason(call(world, "other words")) == "approval_required"
    assert reason(call(world, "exact words", other_task_token(make, world))) is None
    [rule] = rules(db)
    assert rule.scope == "agent_connection" and rule.issue_id is None and rule.arguments_digest is not None
    assert rule.uses == 2


def test_a_counted_rule_runs_out_and_an_expired_rule_allows_nothing(db, world, honcho_server):
    connect(world, "honcho", HONCHO_KEY)
    first = call(world, "a")
    assert always_allow(world, refusal_fields(first)["approvalId"], max_uses="2").status_code == 200
    assert [reason(call(world, c)) for c in ("a", "b", "c", "d")] == [None, None, None, "approval_required"]
    [rule] = rules(db)
    assert (rule.remaining_uses, rule.uses) == (0, 2)
    # A second rule, expired since.
    pending = refusal_fields(call(world, "e"))["approvalId"]
    assert always_allow(world, pending, expires_in="1h").status_code == 200
    assert reason(call(world, "e")) is None
    assert reason(call(world, "f")) is None
    later = rules(db)[1]
    later.expires_at = utcnow() - timedelta(seconds=1)
    db.session.commit()
    assert reason(call(world, "g")) == "approval_required"


def test_invalid_choices_are_refused_and_make_no_rule(db, world, honcho_server):
    connect(world, "honcho", HONCHO_KEY)
    approval_id = refusal_fields(call(world, "x"))["approvalId"]
    for bad in ({"scope": "company"}, {"expires_in": "forever"}, {"max_uses": "0"}, {"max_uses": "99999"}):
        answered = always_allow(world, approval_id, **bad)
        assert answered.status_code == 400, bad
    assert rules(db) == [] and cards(db)[0].status == "pending"


@pytest.mark.parametrize("action", ["approve", "deny", "always-allow"])
def test_an_agent_token_never_answers_an_approval(db, world, honcho_server, action):
    """Only a person's board session approves: the agent's own run token gets 403, even with a session cookie."""
    connect(world, "honcho", HONCHO_KEY)
    approval_id = refusal_fields(call(world, "x"))["approvalId"]
    answered = world.client.post(
        f"/approvals/{approval_id}/{action}",
        data={"csrf_token": world.csrf, "scope": "task"},
        headers=bearer(world.token),
    )
    assert answered.status_code == 403
    assert "Only a person signed in to the board can answer an approval" in answered.get_data(as_text=True)
    assert cards(db)[0].status == "pending" and rules(db) == []


def test_only_the_addressee_makes_a_rule(db, make, world, client, honcho_server):
    from tests.conftest import sign_in

    connect(world, "honcho", HONCHO_KEY)
    approval_id = refusal_fields(call(world, "x"))["approvalId"]
    other = make.member(world.company, "owner")
    other_client = client.application.test_client()
    other_csrf = sign_in(other_client, other)
    assert always_allow(world, approval_id, client=other_client, csrf=other_csrf).status_code == 403
    assert rules(db) == []


def test_outcomes_stay_distinct_in_the_card_the_webhook_data_and_the_wake(db, world, honcho_server):
    connect(world, "honcho", HONCHO_KEY)
    denied_id = refusal_fields(call(world, "deny me"))["approvalId"]
    assert approve(world, denied_id, "deny").status_code == 200
    approved_id = refusal_fields(call(world, "approve me"))["approvalId"]
    assert approve(world, approved_id).status_code == 200
    by_id = {str(c.id): c for c in cards(db)}
    assert card_data(by_id[denied_id])["outcome"] == "denied"
    assert card_data(by_id[approved_id])["outcome"] == "approved"
    assert "reason" not in card_data(by_id[approved_id])


def test_expired_is_an_outcome_of_its_own(db, world, honcho_server):
    """A card nobody answered in time, or an approved call not retried in time, ends as `expired`: in the tool
    result, the card, the webhook's data, the activity and the wake."""
    import sys

    from app.models import ActivityLog, WakeupRequest

    world.agent.adapter_type = "process"  # an agent the board can wake
    world.agent.adapter_config = {"command": [sys.executable, "-c", "print('ok')"]}
    db.session.commit()
    connect(world, "honcho", HONCHO_KEY)
    stale_id = refusal_fields(call(world, "stale"))["approvalId"]
    approved_id = refusal_fields(call(world, "approved"))["approvalId"]
    assert approve(world, approved_id).status_code == 200
    by_id = {str(c.id): c for c in cards(db)}
    by_id[stale_id].created_at = utcnow() - timedelta(days=2)
    by_id[approved_id].resolved_at = utcnow() - timedelta(days=2)
    db.session.commit()

    retried = call(world, "approved")
    assert reason(retried) == "approval_expired" and refusal_fields(retried)["approvalId"] == approved_id
    # Answering the stale card: it expires instead of being approved, and the agent is woken to read so.
    answered = approve(world, stale_id)
    assert answered.status_code == 200 and "Expired: nobody answered in time" in answered.get_data(
        as_text=True
    )
    by_id = {str(c.id): c for c in cards(db)}
    for card_id in (stale_id, approved_id):
        assert by_id[card_id].status == "expired"
        assert card_data(by_id[card_id])["outcome"] == "expired"
        assert card_data(by_id[card_id])["reason"] == "approval_expired"
    expired_rows = db.session.scalars(
        select(ActivityLog).where(ActivityLog.action == "tool_approval.expired")
    ).all()
    assert sorted(r.details["interactionId"] for r in expired_rows) == sorted([stale_id, approved_id])
    wakes = db.session.scalars(select(WakeupRequest).where(WakeupRequest.source == "tool_approval")).all()
    assert [w.reason for w in wakes] == [
        "Your request to call save_memory was answered: approved.",
        "Your request to call save_memory was answered: expired (nobody answered in time; call the tool again "
        "to ask anew).",
    ]
    # The agent's next identical call asks anew.
    again = call(world, "stale")
    assert reason(again) == "approval_required" and refusal_fields(again)["approvalId"] not in (
        stale_id,
        approved_id,
    )


def test_the_activity_page_tells_the_outcomes_apart(db, world, honcho_server):
    connect(world, "honcho", HONCHO_KEY)
    owner = world.owner.name
    denied_id = refusal_fields(call(world, "no"))["approvalId"]
    assert approve(world, denied_id, "deny").status_code == 200
    allowed_id = refusal_fields(call(world, "yes"))["approvalId"]
    assert always_allow(world, allowed_id).status_code == 200
    rule = rules(db)[0]
    revoked = world.client.post(
        f"/apps/{rule.connection_id}/trust-rules/{rule.id}/revoke",
        headers={"X-CSRFToken": world.csrf, "HX-Request": "true"},
    )
    assert revoked.status_code == 200 and f"revoked by {owner}" in revoked.get_data(as_text=True)
    page = world.client.get("/activity").get_data(as_text=True)
    for line in (
        f"{owner} denied Builder&#39;s call of save_memory on",
        f"{owner} approved Builder&#39;s call of save_memory on",
        "and always allowed calls like it",
        f"{owner} always allowed Builder to call save_memory on Honcho",
        f"{owner} revoked Builder&#39;s trust rule for save_memory on Honcho",
    ):
        assert line in page, line


def test_allowing_on_every_task_is_for_those_who_configure_the_connection(
    db, make, world, client, honcho_server
):
    """A member responsible for one task allows calls on that task; every task of the agent (tasks others answer
    for) needs someone who can configure the connection (its creator, or tools:manage_connections)."""
    from tests.conftest import sign_in

    connect(world, "honcho", HONCHO_KEY)  # made by the owner
    member = make.member(world.company, "member")
    issue = make.issue(world.company, assignee=world.agent, responsible=member, status="in_progress")
    _run, token = make.run(world.agent, issue, member)
    member_client = client.application.test_client()
    member_csrf = sign_in(member_client, member)
    approval_id = refusal_fields(call(world, "x", token))["approvalId"]
    card_html = member_client.get(f"/tasks/{issue.id}").get_data(as_text=True)
    assert 'value="agent_connection"' not in card_html
    assert "Allowing it on every task is for someone who can configure Honcho." in card_html
    refused = always_allow(world, approval_id, member_client, member_csrf, scope="agent_connection")
    assert refused.status_code == 403 and rules(db) == [] and cards(db)[0].status == "pending"
    assert always_allow(world, approval_id, member_client, member_csrf, scope="task").status_code == 200
    [rule] = rules(db)
    assert rule.scope == "task" and rule.issue_id == issue.id and rule.created_by_user_id == member.id
    # The owner (who made the connection) is offered both on a card of theirs.
    call(world, "y")
    assert 'value="agent_connection"' in world.client.get(f"/tasks/{world.issue.id}").get_data(as_text=True)


def test_a_call_a_rule_allows_costs_a_constant_few_statements(db, world, honcho_server):
    """Warm, an ask-first call that a rule lets through reads the approval cards of this call (none approved), the
    matching rule, spends one use, and otherwise costs what an allowed call costs; the count does not grow with the
    rule's uses."""
    from tests.services.gateway.test_gateway_call_statements import counting, shape

    connect(world, "honcho", HONCHO_KEY)
    approval_id = refusal_fields(call(world, "first"))["approvalId"]
    assert always_allow(world, approval_id).status_code == 200
    call(world, "first")  # the approved card itself
    call(world, "warm")

    def measured(content):
        with counting(db.engine) as (statements, commits):
            result = call(world, content)
        assert result["isError"] is False
        return [
            f"UPDATE {s.split()[1]}" if s.lstrip().upper().startswith("UPDATE") else shape(s)
            for s in statements
        ], len(commits)

    shapes, commits = measured("one")
    assert shapes == [
        "SELECT heartbeat_runs",  # run context
        "SELECT thread_interactions",  # approval cards for this very call
        "SELECT tool_trust_rules",  # a rule that covers it
        "UPDATE tool_trust_rules",  # one use spent
        "SELECT tool_connections",  # the provider target's inputs
        "INSERT activity_log",
    ]
    # As after a used-up approval: the spent use is committed before the provider is prepared (an OAuth refresh
    # commits on a connection of its own), then the request's transaction ends before the provider is called.
    assert commits == 2
    for i in range(5):
        call(world, f"more {i}")
    assert measured("later") == (shapes, commits)


def test_a_rule_is_revoked_by_its_maker_or_a_configurer_only(db, make, world, client, honcho_server):
    from tests.conftest import sign_in

    cid = connect(world, "honcho", HONCHO_KEY)["id"]
    assert always_allow(world, refusal_fields(call(world, "x"))["approvalId"]).status_code == 200
    [rule] = rules(db)
    revoke_url = f"/apps/{cid}/trust-rules/{rule.id}/revoke"
    for role in ("viewer", "member"):
        person = make.member(world.company, role)
        other = client.application.test_client()
        other_csrf = sign_in(other, person)
        page = other.get(f"/apps/{cid}/permissions").get_data(as_text=True)
        assert f'data-rule="{rule.id}"' in page and revoke_url not in page
        refused = other.post(revoke_url, headers={"X-CSRFToken": other_csrf, "HX-Request": "true"})
        assert refused.status_code == 403, role
    assert rules(db)[0].revoked_at is None
    assert revoke_url in world.client.get(f"/apps/{cid}/permissions").get_data(as_text=True)
    stranger_world = make.task_run("Globex", client=client.application.test_client())
    assert (
        stranger_world.client.post(
            revoke_url, headers={"X-CSRFToken": stranger_world.csrf, "HX-Request": "true"}
        ).status_code
        == 404
    )
