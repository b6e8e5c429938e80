"""Activity as sentences for people ("Dana Owner connected Notion for Builder"); the raw code and ids stay
available behind a disclosure on the page.

Names are read in batches per page (people and agents, connections, tasks), so a longer page costs no more.
Details hold ids and codes only, never secrets; a sentence uses names and codes, never detail values it cannot
explain.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import InstrumentedAttribute

from app.extensions import db
from app.models import ActivityLog, Issue, ToolConnection, keys
from app.services.activity import actor_names

OUTCOME_WORDS: dict[str, str] = {
    "ok": "succeeded",
    "tool_error": "returned an error",
    "refused": "was refused",
    "provider_error": "failed at the provider",
    "provider_timeout": "timed out at the provider",
    "provider_busy": "found the provider busy",
    "provider_paused": "found the provider paused",
    "refused_by_provider": "was refused by the provider",
}
# Gateway calls refused by a connection's call limits (`services.gateway.limits`).
LIMIT_WORDS: dict[str, str] = {
    "rate_limited": "was refused by a rate limit",
    "loop_detected": "was stopped by the loop breaker",
}


@dataclass(frozen=True)
class Names:
    people_and_agents: dict[str, str]
    connections: dict[str, str]
    tasks: dict[str, str]

    def actor(self, row: ActivityLog) -> str:
        if row.actor_type == "system":
            return "Switchboard"
        return self.people_and_agents.get(row.actor_id, "Someone")

    def agent(self, row: ActivityLog) -> str:
        value = str(row.agent_id) if row.agent_id else (row.details or {}).get("requestingAgentId")
        return self.people_and_agents.get(str(value), "an agent") if value else "an agent"

    def connection(self, row: ActivityLog) -> str:
        details = row.details or {}
        key = str(
            details.get("connectionId") or (row.entity_id if row.entity_type == "tool_connection" else "")
        )
        return (
            self.connections.get(key) or details.get("connectionName") or details.get("app") or "a connection"
        )

    def task(self, row: ActivityLog) -> str:
        return self.tasks.get(row.entity_id, "a task") if row.entity_type == "issue" else "a task"


def load_names(rows: list[ActivityLog]) -> Names:
    agent_ids = {str(r.agent_id) for r in rows if r.agent_id}
    people_and_agents = actor_names(rows)
    missing_agents = [uuid.UUID(a) for a in agent_ids if a not in people_and_agents]
    if missing_agents:
        from app.models import Agent

        people_and_agents.update(
            {str(a.id): a.name for a in db.session.scalars(select(Agent).where(Agent.id.in_(missing_agents)))}
        )
    connection_ids = set()
    issue_ids = set()
    for row in rows:
        details = row.details or {}
        for value in (
            details.get("connectionId"),
            row.entity_id if row.entity_type == "tool_connection" else None,
        ):
            if value:
                connection_ids.add(str(value))
        if row.entity_type == "issue":
            issue_ids.add(row.entity_id)
    return Names(
        people_and_agents=people_and_agents,
        connections=_by_id(ToolConnection, ToolConnection.name, connection_ids),
        tasks=_by_id(Issue, Issue.identifier, issue_ids),
    )


def _by_id(
    model: type[ToolConnection | Issue], label_column: InstrumentedAttribute[str], ids: set[str]
) -> dict[str, str]:
    parsed = []
    for value in ids:
        try:
            parsed.append(uuid.UUID(value))
        except ValueError:
            continue
    if not parsed:
        return {}
    return {
        str(row_id): label
        for row_id, label in db.session.execute(select(model.id, label_column).where(model.id.in_(parsed)))
    }


# Sentences that only name who, the connection, the agent and the task: one template per event code.
TEMPLATES = {
    "tool_app.connected": "{who} started setting up {connection}",
    "tool_app.oauth_started": "{who} started signing in to {connection}",
    "tool_app.oauth_connected": "{who} signed in to {connection}",
    "tool_connection.reconnected": "{who} reconnected {connection}",
    "tool_connection.grant_delegated": "{who} let {agent} act with their own account on {connection}",
    "tool_connection.needs_reauthorization": "{connection} needs someone to sign in again",
    "tool_connection.reauthorization_recovered": "{connection} works again",
    "issue.connection_intent_connected": "{who} connected {connection} for {agent} on {task}",
    "issue.connection_intent_declined": "{who} declined {agent}'s connection request on {task}",
    "issue.comment_added": "{who} commented on {task}",
    "member.added": "{who} added a member",
    "member.updated": "{who} changed a member's role",
    "agent.updated": "{who} changed {agent}'s instructions",
    "webhook.created": "{who} added a webhook",
    "webhook.updated": "{who} changed a webhook",
    "webhook.disabled": "{who} disabled a webhook",
    "webhook.enabled": "{who} enabled a webhook again",
    "webhook.secret_rotated": "{who} rotated a webhook's signing secret",
    "webhook.deleted": "{who} deleted a webhook",
}


# Approvals, trust rules and tool definitions: each outcome in words of its own.
TRUST_PREFIXES = ("tool_approval.", "tool_trust_rule.", "tool_definition.", "tool_connection.tools_refreshed")
ENDED_BECAUSE = {
    "tool_definition_changed": "the provider changed the tool",
    "tool_removed": "the provider no longer offers the tool",
    "approved_tool_target_changed": "the arguments or the connection's configuration changed",
}


def _trust_sentence(row: ActivityLog, names: Names, who: str, connection: str) -> str:
    details = row.details or {}
    tool = details.get("tool") or "a tool"
    agent, task, action = names.agent(row), names.task(row), row.action
    if action == "tool_approval.approved":
        always = " and always allowed calls like it" if details.get("trustRuleId") else ""
        return f"{who} approved {agent}'s call of {tool} on {task}{always}"
    if action == "tool_approval.denied":
        return f"{who} denied {agent}'s call of {tool} on {task}"
    if action == "tool_approval.expired":
        return f"{agent}'s request to call {tool} on {task} expired"
    if action == "tool_approval.invalidated":
        why = ENDED_BECAUSE.get(str(details.get("reasonCode")), "its target changed")
        return f"{agent}'s approval to call {tool} on {task} ended: {why}"
    if action == "tool_trust_rule.created":
        return f"{who} always allowed {agent} to call {tool} on {connection}"
    if action == "tool_trust_rule.revoked":
        return f"{who} revoked {agent}'s trust rule for {tool} on {connection}"
    if action == "tool_definition.accepted":
        return f"{who} accepted the changed definition of {tool} on {connection}"
    if action == "tool_connection.tools_refreshed":
        counts = ", ".join(
            f"{len(details.get(key) or [])} {word}"
            for key, word in (("quarantined", "changed"), ("renamed", "renamed"), ("removed", "removed"))
        )
        return f"{who} refreshed the tools of {connection} ({counts})"
    return f"{who}: {action.replace('_', ' ').replace('.', ' · ')}"


def sentence(row: ActivityLog, names: Names) -> str:
    """What happened, in words, for one activity row."""
    details = row.details or {}
    who = names.actor(row)
    connection = names.connection(row)
    action = row.action
    if action in TEMPLATES:
        return TEMPLATES[action].format(
            who=who, connection=connection, agent=names.agent(row), task=names.task(row)
        )
    if action == "tool_app.finished":
        return f"{who} finished setting up {connection} ({details.get('toolCount', 0)} tools)"
    if action == "tool_app.oauth_failed":
        return f"{who}'s sign-in to {connection} did not finish ({details.get('reason', 'unknown reason')})"
    if action == "tool_connection.updated":
        fields = ", ".join(details.get("fields") or []) or "settings"
        return f"{who} changed {connection}: {fields}"
    if action == "issue.thread_interaction_created":
        kind = "an approval" if details.get("interactionKind") == keys.APPROVAL_CARD else "a connection"
        return f"{who} asked for {kind} on {names.task(row)}"
    if action == "issue.updated":
        changed = ", ".join(_change_words(details.get("changes") or {})) or "details"
        return f"{who} changed {names.task(row)}: {changed}"
    if action == "tool_gateway.call":
        code = str(details.get("outcome") or "ran")
        outcome = LIMIT_WORDS.get(str(details.get("decision")), OUTCOME_WORDS.get(code, code))
        return f"{who} called {details.get('toolName') or 'a tool'} on {connection}: {outcome}"
    if action == "tool_gateway.list":
        return f"{who} listed its gateway tools"
    if action == "tool_connection.call_limits_changed":
        return f"{who} changed the call limits of {connection}"
    if action == "tool_gateway.resource_read":
        code = str(details.get("outcome") or "ran")
        return f"{who} read a resource on {connection}: {OUTCOME_WORDS.get(code, code)}"
    if action.startswith(TRUST_PREFIXES):
        return _trust_sentence(row, names, who, connection)
    if action.startswith("run."):
        # Runs are started and finished by the worker: the sentence is about the agent whose run it is.
        agent = names.agent(row)
        return f"{agent[:1].upper() + agent[1:]}'s run {action.split('.', 1)[1].replace('_', ' ')}"
    return f"{who}: {action.replace('_', ' ').replace('.', ' · ')}"


def _change_words(changes: dict) -> list[str]:
    words = {"status": "status", "assigneeAgentId": "assignee", "responsibleUserId": "responsible person"}
    out = []
    for key, value in changes.items():
        label = words.get(key, key)
        if key == "status" and isinstance(value, list) and len(value) == 2:
            out.append(f"status {str(value[0]).replace('_', ' ')} → {str(value[1]).replace('_', ' ')}")
        else:
            out.append(label)
    return out
