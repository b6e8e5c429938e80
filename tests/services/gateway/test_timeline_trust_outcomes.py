"""The decision timeline labels issue 28's trust outcomes (a call let through by a trust rule, named; an expired
approval; a changed tool definition; a read-only assistant's write) and the ends of approval cards nobody answered,
as the gateway and the approval services record them in the activity log."""

from __future__ import annotations

import uuid

from app.services.activity import record_activity
from app.services.gateway.timeline import run_timeline

RULE = uuid.UUID("1a2b3c4d-0000-4000-8000-000000000001")


def _record(run, action, details, actor_type="agent", actor_id=None):
    record_activity(
        company_id=run.company_id,
        actor_type=actor_type,
        actor_id=actor_id or str(run.agent_id),
        action=action,
        entity_type="heartbeat_run",
        entity_id=run.id,
        agent_id=run.agent_id,
        run_id=run.id,
        details=details,
    )


def test_trust_outcomes_have_their_own_words(make, db):
    company, owner, agent, issue = make.team()
    run, _token = make.run(agent, issue, owner)
    call = {"tool": "notion__search", "connectionName": "Notion"}
    _record(run, "tool_gateway.call", {**call, "decision": "allowed_by_trust_rule", "trustRuleId": str(RULE)})
    _record(run, "tool_gateway.call", {**call, "decision": "approval_expired"})
    _record(run, "tool_gateway.call", {**call, "decision": "tool_definition_changed"})
    _record(run, "tool_gateway.call", {**call, "decision": "read_only_assistant"})
    _record(
        run,
        "tool_approval.invalidated",
        {"tool": "search", "reasonCode": "tool_definition_changed"},
        actor_type="system",
        actor_id="tool_approval",
    )
    _record(
        run,
        "tool_approval.invalidated",
        {"tool": "search", "reasonCode": "approved_tool_target_changed"},
        actor_type="system",
        actor_id="tool_approval",
    )
    _record(
        run,
        "tool_approval.expired",
        {"tool": "search", "reasonCode": "approval_expired"},
        actor_type="system",
        actor_id="tool_approval",
    )
    _record(
        run,
        "tool_approval.approved",
        {"tool": "search", "trustRuleId": str(RULE)},
        actor_type="user",
        actor_id=str(owner.id),
    )
    db.session.commit()

    decisions = run_timeline(run).decisions
    assert [(d.decision, d.summary) for d in decisions] == [
        ("allowed_by_trust_rule", "Allowed by trust rule 1a2b3c4d"),
        ("approval_expired", "Refused: the approval expired"),
        ("tool_definition_changed", "Refused: the tool's definition changed since the approval"),
        ("read_only_assistant", "Refused: the assistant is connected read-only"),
        ("invalidated", "Invalidated: the tool's definition changed"),
        ("invalidated", "Invalidated: the approved call changed"),
        ("expired", "Expired: nobody answered in time"),
        ("approved", f"Approved by {owner.name}, and made trust rule 1a2b3c4d"),
    ]
    assert decisions[0].trust_rule_id == str(RULE) and decisions[-1].trust_rule_id == str(RULE)
