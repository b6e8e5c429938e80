"""A person's consent for an assistant, and what makes the assistant an agent of that person.

Consent for one client in one company creates (or reuses) an `AssistantGrant` that owns:
- an agent record, "Claude Code (Demo Owner)", whose access to connections is granted exactly as for any agent;
- a standing task, "Sessions of Claude Code (Demo Owner)", assigned to it with the person responsible;
- an open-ended heartbeat run on that task (`invocation_source` "assistant").

The gateway already serves run-bound callers with the whole rule set (audiences, identity, per-tool policy, approval
cards to the responsible person, activity); an assistant's access token therefore resolves to the claims of its
grant's run, and nothing downstream needs a second path. The run is never reaped as abandoned (no worker runs it) and
is reopened if it was ended; Disconnect ends it and revokes every token.
"""

from __future__ import annotations

import uuid

from sqlalchemy import select, update

from app.core.errors import Forbidden, NotFound
from app.extensions import db
from app.models import Agent, HeartbeatRun, Issue, Membership, User
from app.models.assistants import AssistantClient, AssistantGrant, AssistantToken
from app.models.base import utcnow
from app.services.activity import record_activity
from app.services.agents import create_agent
from app.services.runs import lifecycle
from app.services.runs.tokens import SCOPE as RUN_SCOPE
from app.services.runs.tokens import instance_id
from app.services.runtime.context import READ_ONLY_KEY
from app.services.work import create_issue

INVOCATION_SOURCE = "assistant"
ADMIN_ROLES = ("owner", "admin")


def assistant_name(client: AssistantClient, person: User) -> str:
    return f"{client.client_name} ({person.name})"[:120]


def consent(
    person: User, membership: Membership, client: AssistantClient, *, read_only: bool
) -> AssistantGrant:
    """Record the person's consent for the client in the membership's company (a viewer's assistant is always
    read-only); the assistant agent, its task and its live run exist afterwards."""
    if membership.user_id != person.id or membership.status != "active":
        raise Forbidden("Only a signed-in member of the company can connect an assistant")
    read_only = read_only or not membership.has_write_access
    grant = db.session.scalars(
        select(AssistantGrant).where(
            AssistantGrant.company_id == membership.company_id,
            AssistantGrant.user_id == person.id,
            AssistantGrant.client_pk == client.id,
        )
    ).one_or_none()
    now = utcnow()
    if grant is None:
        agent = create_agent(membership.company_id, name=assistant_name(client, person), title="Assistant")
        db.session.flush()
        grant = AssistantGrant(
            company_id=membership.company_id,
            user_id=person.id,
            client_pk=client.id,
            agent_id=agent.id,
            read_only=read_only,
        )
        db.session.add(grant)
    else:
        existing = db.session.get(Agent, grant.agent_id)
        if existing is not None:
            existing.status = "active"
        grant.read_only = read_only
        grant.disconnected_at = None
    grant.consented_at = now
    db.session.flush()
    run = live_run(grant)
    # The gateway reads the choice with the run it loads anyway (`gateway.calls`): no statement more per call.
    run.context_snapshot = {**(run.context_snapshot or {}), READ_ONLY_KEY: grant.read_only}
    record_activity(
        company_id=grant.company_id,
        actor_type="user",
        actor_id=person.id,
        action="assistant.connected",
        entity_type="agent",
        entity_id=grant.agent_id,
        agent_id=grant.agent_id,
        details={"client": client.client_name, "clientId": client.client_id, "readOnly": grant.read_only},
    )
    return grant


def live_run(grant: AssistantGrant) -> HeartbeatRun:
    """The grant's running session run, opened (with its task) when there is none."""
    run = db.session.get(HeartbeatRun, grant.run_id) if grant.run_id else None
    if run is not None and run.status == "running":
        return run
    issue = db.session.get(Issue, grant.issue_id) if grant.issue_id else None
    agent = db.session.get(Agent, grant.agent_id)
    if agent is None:
        raise NotFound("The assistant's agent was not found")
    if issue is None or issue.is_closed or issue.assignee_agent_id != agent.id:
        issue = create_issue(
            grant.company_id,
            title=f"Sessions of {agent.name}",
            description="The assistant's calls through the tool gateway belong to this task.",
            status="in_progress",
            assignee_agent_id=agent.id,
            responsible_user_id=grant.user_id,
        )
        db.session.flush()
        grant.issue_id = issue.id
    now = utcnow()
    run = HeartbeatRun(
        company_id=grant.company_id,
        agent_id=agent.id,
        issue_id=issue.id,
        responsible_user_id=grant.user_id,
        status="running",
        invocation_source=INVOCATION_SOURCE,
        context_snapshot={
            "issueId": str(issue.id),
            "taskId": str(issue.id),
            "assistantGrantId": str(grant.id),
            READ_ONLY_KEY: grant.read_only,
        },
        started_at=now,
    )
    db.session.add(run)
    db.session.flush()
    grant.run_id = run.id
    return run


def run_claims(grant: AssistantGrant, *, run_is_live: bool = False) -> dict:
    """The claims a run token of the grant's live run would carry: what the gateway validates on every call.
    `run_is_live`: the caller read the run's status as running (no need to load it)."""
    run_id = grant.run_id if run_is_live and grant.run_id else live_run(grant).id
    return {
        "sub": str(grant.agent_id),
        "company_id": str(grant.company_id),
        "run_id": str(run_id),
        "responsible_user_id": str(grant.user_id),
        "scope": RUN_SCOPE,
        "instance_id": instance_id(),
        "assistant_grant_id": str(grant.id),
    }


def revoke_tokens(grant_id: uuid.UUID) -> None:
    db.session.execute(
        update(AssistantToken)
        .where(AssistantToken.grant_id == grant_id, AssistantToken.revoked_at.is_(None))
        .values(revoked_at=utcnow())
    )


def disconnect(grant: AssistantGrant, by: User) -> None:
    """Revoke every token of the grant at once, end its run and pause its agent (kept for the activity trail)."""
    grant.disconnected_at = utcnow()
    revoke_tokens(grant.id)
    if grant.run_id:
        lifecycle.close_run(grant.run_id, "cancelled")
    agent = db.session.get(Agent, grant.agent_id)
    if agent is not None:
        agent.status = "paused"
    record_activity(
        company_id=grant.company_id,
        actor_type="user",
        actor_id=by.id,
        action="assistant.disconnected",
        entity_type="agent",
        entity_id=grant.agent_id,
        agent_id=grant.agent_id,
        details={"client": grant.client.client_name},
    )


def grant_for(membership: Membership, grant_id: uuid.UUID) -> AssistantGrant:
    """A grant the member may manage: their own, or any in the company for owners and admins (404 otherwise)."""
    grant = db.session.get(AssistantGrant, grant_id)
    if grant is None or grant.company_id != membership.company_id:
        raise NotFound("Assistant not found")
    if grant.user_id != membership.user_id and membership.role not in ADMIN_ROLES:
        raise NotFound("Assistant not found")
    return grant


def connected_assistants(membership: Membership) -> list[tuple[AssistantGrant, User, AssistantClient]]:
    """The member's connected assistants (owners and admins: the company's), newest first, each with its person and
    client, in one statement."""
    query = (
        select(AssistantGrant, User, AssistantClient)
        .join(User, User.id == AssistantGrant.user_id)
        .join(AssistantClient, AssistantClient.id == AssistantGrant.client_pk)
        .where(AssistantGrant.company_id == membership.company_id, AssistantGrant.disconnected_at.is_(None))
        .order_by(AssistantGrant.consented_at.desc())
    )
    if membership.role not in ADMIN_ROLES:
        query = query.where(AssistantGrant.user_id == membership.user_id)
    return [(row[0], row[1], row[2]) for row in db.session.execute(query).all()]
