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
transaction that has itself changed such rows builds afresh. A rebuild reads plain rows (`eligible_access`, one
statement), each with its app's catalog version, so the parsed catalog answers without another statement; and each
connection's part of the snapshot (its block but for the grant, its method and public context) is kept per
connection under everything it depends on (`_prepared`), so a rebuild after a change elsewhere decodes and renders
only the connections that changed. The composed text is the one `compose_snapshot` writes.

`prepare_invocation` builds the `Invocation` an adapter executes. It resolves once per turn and freezes the result on
the run (`context_snapshot["paperclipTurn"]`): preparing the same active turn again returns the same snapshot and
session decision, while the next turn sees later edits. Server-owned fields (`connectionInstructions`,
`paperclipConnectionInstructions`, `paperclipRuntimeTools`) are removed wherever a caller put them (agent config,
payload template, environment, wake context) and then written by the server."""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from sqlalchemy import Select, select

from app.catalog.loader import get_app_versions
from app.core.errors import Forbidden
from app.extensions import db
from app.models import AccessRevision, Agent, HeartbeatRun, Issue
from app.models.connections import config_method_key
from app.services.access.eligible import eligible_access
from app.services.access.revision import RevisionCache, changed_in_this_transaction, revision_column
from app.services.access.rows import ConnectionRow
from app.services.connections.instructions import (
    BlockParts,
    InstructionSource,
    block_parts,
    instruction_context,
    snapshot_of,
)

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


def clear_instruction_sources(*, prepared: bool = False) -> None:
    """Forget the resolutions (what an access change does to them); with `prepared`, each connection's part too."""
    _resolutions.clear()
    if prepared:
        _prepared_connections.clear()


def _build(run: HeartbeatRun) -> _Resolution:
    eligible = [
        (access.connection, access.grant)
        for access in eligible_access(run.company_id, run.agent_id, run.responsible_user_id)
        # `serves_instructions` implies a grant; the None test narrows the type for the checker.
        if access.grant is not None
        and access.serves_instructions
        and access.connection.agent_instructions_json is not None
    ]
    prepared = _prepared(row for row, _ in eligible)
    sources, blocks = [], []
    for connection, grant in eligible:
        found = prepared[connection.id]
        if found.setting is None:
            continue  # the column holds JSON null
        grant_id = str(grant.id)
        sources.append(
            InstructionSource(
                connection_id=found.connection_id,
                connection_name=connection.name,
                grant_id=grant_id,
                connector=connection.app_slug,
                method=found.method,
                setting=found.setting,
                context=found.context,
            )
        )
        if found.parts is not None:
            blocks.append((found.connection_id, found.parts.block(grant_id)))
    blocks.sort(key=lambda block: block[0])
    return _Resolution(sources=sources, snapshot=snapshot_of([block for _, block in blocks]))


@dataclass(frozen=True)
class _Prepared:
    """What one connection contributes whatever the grant (callers never modify `setting` or `context`)."""

    connection_id: str
    method: str | None
    setting: dict | None
    context: dict | None
    parts: BlockParts | None


# Per connection, keyed by everything its part of a snapshot depends on (its id, name, app, configuration and
# instructions as the database's text, and its app's catalog version): a resolution after an access change that
# left a connection alone composes it from here without decoding or rendering it again. The key names the content
# itself, so entries are filed under one constant revision (0) and never go stale, only out (least recently used).
PREPARED_CACHE_SIZE = 4096
_prepared_connections: RevisionCache[_Prepared] = RevisionCache(PREPARED_CACHE_SIZE)


def _prepared_key(row: ConnectionRow) -> tuple:
    return (row.id, row.name, row.app_slug, row.catalog_version, row.config_json, row.agent_instructions_json)


def _prepared(rows: Iterable[ConnectionRow]) -> dict[uuid.UUID, _Prepared]:
    found: dict[uuid.UUID, _Prepared] = {}
    missing = []
    for row in rows:
        hit = _prepared_connections.get(_prepared_key(row), 0)
        if hit is None:
            missing.append(row)
        else:
            found[row.id] = hit
    # Each row carries its app's catalog version: the parsed definitions answer without another statement.
    apps = get_app_versions(
        {(c.app_slug, c.catalog_version) for c in missing if c.catalog_version is not None}
    )
    for row in missing:
        config, setting = row.config, row.agent_instructions
        method = config_method_key(config)
        context = instruction_context(apps.get(row.app_slug), config or {})
        connection_id = str(row.id)
        parts = block_parts(connection_id, row.name, row.app_slug, method, setting, context)
        found[row.id] = _Prepared(connection_id, method, setting, context, parts)
        _prepared_connections.put(_prepared_key(row), 0, found[row.id])
    return found


def resolve_instructions_for_run(run: HeartbeatRun) -> dict | None:
    """The `{text, digest}` snapshot for this turn of the run, or None when no connection contributes."""
    snapshot = _resolution(run).snapshot
    return dict(snapshot) if snapshot is not None else None
