"""What a run is given: its connection-instruction snapshot, its runtime tools, and the shared wake prompt.

`resolve_instructions_for_run` reads the stored run's company, agent, task and responsible person, asks the one
access service (`effective_access`) which connections the agent may use and as whom, and composes the enabled
instructions of the eligible ones. A connection is eligible when its instructions are enabled, the agent may use at
least one of its cached tools (ask-first counts, blocked does not), an active identity grant was selected for this
run (a personal grant only while its person is an active member with write access), and every required public
configuration field is set. It reads persisted settings and the cached catalog only, never a provider, and runs on
every turn, so a revocation takes effect on the next turn.

The eligible sources depend only on rows that raise the company's access revision (connections with their
instructions and configuration, grants, installs, tools, policies, memberships, the cached catalog), so a process
keeps them, and the snapshot composed from them, per audience (company, agent, responsible person) under that
revision: a turn after no access change costs one statement (the run scope's company checks and the revision). A
transaction that has itself changed such rows builds afresh. A rebuild reads plain rows (`eligible_access`), each
with its app's catalog version, so the parsed catalog answers without another statement.

`prepare_invocation` builds the `Invocation` an adapter executes. It resolves once per turn and freezes the result on
the run (`context_snapshot["paperclipTurn"]`): preparing the same active turn again returns the same snapshot and
session decision, while the next turn sees later edits. Server-owned fields (`connectionInstructions`,
`paperclipConnectionInstructions`, `paperclipRuntimeTools`) are removed wherever a caller put them (agent config,
payload template, environment, wake context) and then written by the server."""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, select

from app.catalog.loader import get_app_versions
from app.core.errors import Forbidden
from app.extensions import db
from app.models import AccessRevision, Agent, HeartbeatRun, Issue
from app.services.access.effective import eligible_access
from app.services.access.revision import RevisionCache, changed_in_this_transaction, revision_column
from app.services.connections.instructions import InstructionSource, compose_snapshot, instruction_context

# --- the resolver ------------------------------------------------------------------------------------------------


def _scope_statement(run: HeartbeatRun, agent: Any, issue: Any) -> Select[Any]:
    """`agent` and `issue` (entities or columns) of the run's agent and task, with the company's access revision."""
    return (
        select(agent, issue, revision_column())
        .select_from(Agent)
        .outerjoin(Issue, Issue.id == run.issue_id)
        .outerjoin(AccessRevision, AccessRevision.company_id == run.company_id)
        .where(Agent.id == run.agent_id)
    )


def _check_scope(
    run: HeartbeatRun, agent_company_id: uuid.UUID | None, issue_company_id: uuid.UUID | None
) -> None:
    """Refuse a run whose agent (None: missing) or task belongs to another company."""
    if agent_company_id != run.company_id:
        raise Forbidden("The run's agent does not belong to the run's company")
    if issue_company_id is not None and issue_company_id != run.company_id:
        raise Forbidden("The run's task does not belong to the run's company")


def _load_run_scope(run: HeartbeatRun) -> tuple[Agent, Issue | None, int]:
    """The run's agent and task, refusing records that do not belong to the run's company, and the company's
    access revision: one statement."""
    row = db.session.execute(_scope_statement(run, Agent, Issue)).first()
    agent, issue, revision = row if row is not None else (None, None, 0)
    _check_scope(run, agent.company_id if agent else None, issue.company_id if issue else None)
    assert agent is not None  # `_check_scope` refused a missing agent
    return agent, issue, revision


def _run_revision(run: HeartbeatRun) -> int:
    """`_load_run_scope`'s checks and revision without loading the agent and task (the resolver needs neither)."""
    row = db.session.execute(_scope_statement(run, Agent.company_id, Issue.company_id)).first()
    agent_company_id, issue_company_id, revision = row if row is not None else (None, None, 0)
    _check_scope(run, agent_company_id, issue_company_id)
    return int(revision)


@dataclass(frozen=True)
class _Resolution:
    sources: list[InstructionSource]
    snapshot: dict | None


SOURCES_CACHE_SIZE = 256
# The eligible sources and the snapshot composed from them, per audience, under the company's access revision.
_resolutions: RevisionCache[_Resolution] = RevisionCache(SOURCES_CACHE_SIZE)


def _resolution(run: HeartbeatRun) -> _Resolution:
    revision = _run_revision(run)
    if changed_in_this_transaction(run.company_id):
        return _build(run)
    return _resolutions.get_or_build(
        (run.company_id, run.agent_id, run.responsible_user_id), revision, lambda: _build(run)
    )


def instruction_sources_for_run(run: HeartbeatRun) -> list[InstructionSource]:
    """The connections this run's agent may use with the grant selected for each (the eligible candidates)."""
    return list(_resolution(run).sources)


def clear_instruction_sources() -> None:
    _resolutions.clear()


def _build(run: HeartbeatRun) -> _Resolution:
    sources = _build_sources(run)
    return _Resolution(sources=sources, snapshot=compose_snapshot(sources))


def _build_sources(run: HeartbeatRun) -> list[InstructionSource]:
    eligible = [
        (access.connection, access.grant)
        for access in eligible_access(run.company_id, run.agent_id, run.responsible_user_id)
        # `serves_instructions` implies a grant; the None test narrows the type for the checker.
        if access.grant is not None
        and access.serves_instructions
        and access.connection.agent_instructions is not None
    ]
    # Each row carries its app's catalog version: the parsed definitions answer without another statement.
    apps = get_app_versions(
        {(c.app_slug, c.catalog_version) for c, _ in eligible if c.catalog_version is not None}
    )
    return [
        InstructionSource(
            connection_id=str(connection.id),
            connection_name=connection.name,
            grant_id=str(grant.id),
            connector=connection.app_slug,
            method=connection.method_key,
            setting=connection.agent_instructions,
            context=instruction_context(apps.get(connection.app_slug), connection.config or {}),
        )
        for connection, grant in eligible
    ]


def resolve_instructions_for_run(run: HeartbeatRun) -> dict | None:
    """The `{text, digest}` snapshot for this turn of the run, or None when no connection contributes."""
    snapshot = _resolution(run).snapshot
    return dict(snapshot) if snapshot is not None else None
