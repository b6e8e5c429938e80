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
keeps them per audience (company, agent, responsible person) under that revision: a turn after no access change
costs the run scope and the revision read. A transaction that has itself changed such rows builds afresh.

`prepare_invocation` builds the `Invocation` an adapter executes. It resolves once per turn and freezes the result on
the run (`context_snapshot["paperclipTurn"]`): preparing the same active turn again returns the same snapshot and
session decision, while the next turn sees later edits. Server-owned fields (`connectionInstructions`,
`paperclipConnectionInstructions`, `paperclipRuntimeTools`) are removed wherever a caller put them (agent config,
payload template, environment, wake context) and then written by the server."""

from __future__ import annotations

from app.catalog.loader import get_apps
from app.core.errors import Forbidden
from app.extensions import db
from app.models import Agent, HeartbeatRun, Issue
from app.services.access.effective import effective_access
from app.services.access.revision import RevisionCache, changed_in_this_transaction, current_revision
from app.services.connections.instructions import InstructionSource, compose_snapshot, instruction_context

# --- the resolver ------------------------------------------------------------------------------------------------


def _load_run_scope(run: HeartbeatRun) -> tuple[Agent, Issue | None]:
    """The run's agent and task, refusing records that do not belong to the run's company."""
    agent = db.session.get(Agent, run.agent_id)
    if agent is None or agent.company_id != run.company_id:
        raise Forbidden("The run's agent does not belong to the run's company")
    issue = db.session.get(Issue, run.issue_id) if run.issue_id else None
    if issue is not None and issue.company_id != run.company_id:
        raise Forbidden("The run's task does not belong to the run's company")
    return agent, issue


SOURCES_CACHE_SIZE = 256
_sources: RevisionCache[list[InstructionSource]] = RevisionCache(SOURCES_CACHE_SIZE)


def instruction_sources_for_run(run: HeartbeatRun) -> list[InstructionSource]:
    """The connections this run's agent may use with the grant selected for each (the eligible candidates)."""
    _load_run_scope(run)
    if changed_in_this_transaction(run.company_id):
        return _build_sources(run)
    return list(
        _sources.get_or_build(
            (run.company_id, run.agent_id, run.responsible_user_id),
            current_revision(run.company_id),
            lambda: _build_sources(run),
        )
    )


def clear_instruction_sources() -> None:
    _sources.clear()


def _build_sources(run: HeartbeatRun) -> list[InstructionSource]:
    eligible = [
        (access, access.grant)
        for access in effective_access(
            run.company_id, run.agent_id, run.responsible_user_id, with_tools=False
        )
        # `serves_instructions` implies a grant; the None test narrows the type for the checker.
        if access.grant is not None
        and access.serves_instructions
        and access.connection.agent_instructions is not None
    ]
    apps = get_apps(access.connection.app_slug for access, _ in eligible)
    return [
        InstructionSource(
            connection_id=str(access.connection.id),
            connection_name=access.connection.name,
            grant_id=str(grant.id),
            connector=access.connection.app_slug,
            method=access.connection.method_key,
            setting=access.connection.agent_instructions,
            context=instruction_context(apps.get(access.connection.app_slug), access.connection.config or {}),
        )
        for access, grant in eligible
    ]


def resolve_instructions_for_run(run: HeartbeatRun) -> dict | None:
    """The `{text, digest}` snapshot for this turn of the run, or None when no connection contributes."""
    return compose_snapshot(instruction_sources_for_run(run))
