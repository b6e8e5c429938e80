"""What a run is given: its connection-instruction snapshot, its runtime tools, and the shared wake prompt.

`resolve_instructions_for_run` reads the stored run's company, agent, task and responsible person, asks the one
access service (`effective_access`) which connections the agent may use and as whom, and composes the enabled
instructions of the eligible ones. A connection is eligible when its instructions are enabled, the agent may use at
least one of its cached tools (ask-first counts, blocked does not), an active identity grant was selected for this
run (a personal grant only while its person is an active member with write access), and every required public
configuration field is set. It reads persisted settings and the cached catalog only, never a provider, and runs on
every turn, so a revocation takes effect on the next turn.

`prepare_invocation` builds the `Invocation` an adapter executes. It resolves once per turn and freezes the result on
the run (`context_snapshot["paperclipTurn"]`): preparing the same active turn again returns the same snapshot and
session decision, while the next turn sees later edits. Server-owned fields (`connectionInstructions`,
`paperclipConnectionInstructions`, `paperclipRuntimeTools`) are removed wherever a caller put them (agent config,
payload template, environment, wake context) and then written by the server.
"""

from __future__ import annotations

import copy
from typing import Any

from flask import current_app

from app.adapters import Invocation
from app.catalog.loader import get_apps
from app.core.errors import Forbidden
from app.extensions import db
from app.models import Agent, HeartbeatRun, Issue, ThreadInteraction
from app.models.base import as_utc, utcnow
from app.services.access.effective import effective_access
from app.services.connections.instructions import InstructionSource, compose_snapshot, instruction_context

SERVER_OWNED_FIELDS = frozenset(
    {"connectionInstructions", "paperclipConnectionInstructions", "paperclipRuntimeTools"}
)
TURN_KEY = "paperclipTurn"
WAKE_KEY = "paperclipWake"


# --- scrubbing caller-supplied server fields ---------------------------------------------------------------------


def scrub_server_fields(value: Any) -> Any:
    """A deep copy of `value` without server-owned keys at any depth (and without the frozen-turn record)."""
    if isinstance(value, dict):
        return {
            k: scrub_server_fields(v)
            for k, v in value.items()
            if k not in SERVER_OWNED_FIELDS and k != TURN_KEY
        }
    if isinstance(value, list):
        return [scrub_server_fields(v) for v in value]
    return copy.deepcopy(value)


def _scrub_config(config: dict | None) -> dict:
    scrubbed = scrub_server_fields(config or {})
    env = scrubbed.get("env")
    if isinstance(env, dict):
        scrubbed["env"] = {k: v for k, v in env.items() if not str(k).startswith("PAPERCLIP_")}
    return scrubbed


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


def instruction_sources_for_run(run: HeartbeatRun) -> list[InstructionSource]:
    """The connections this run's agent may use with the grant selected for each (the eligible candidates)."""
    _load_run_scope(run)
    eligible = [
        access
        for access in effective_access(
            run.company_id, run.agent_id, run.responsible_user_id, with_tools=False
        )
        if access.grant is not None
        and access.grant.status == "active"
        and access.has_usable_tools
        and access.connection.agent_instructions is not None
    ]
    apps = get_apps(access.connection.app_slug for access in eligible)
    return [
        InstructionSource(
            connection_id=str(access.connection.id),
            connection_name=access.connection.name,
            grant_id=str(access.grant.id),
            connector=access.connection.app_slug,
            method=access.connection.method_key,
            setting=access.connection.agent_instructions,
            context=instruction_context(apps.get(access.connection.app_slug), access.connection.config or {}),
        )
        for access in eligible
    ]


def resolve_instructions_for_run(run: HeartbeatRun) -> dict | None:
    """The `{text, digest}` snapshot for this turn of the run, or None when no connection contributes."""
    return compose_snapshot(instruction_sources_for_run(run))


# --- runtime tools -----------------------------------------------------------------------------------------------


def runtime_tools_descriptor(run: HeartbeatRun) -> dict | None:
    """The descriptor of reference section 3, when the run has a responsible person and a public base URL."""
    if run.responsible_user_id is None or not current_app.config.get("PUBLIC_BASE_URL"):
        return None
    if not current_app.config.get("SECRET_KEY"):
        return None
    from app.services.run_tokens import mint_run_token
    from app.services.runtime_tools import runtime_descriptor

    descriptor = runtime_descriptor(mint_run_token(run))
    # The tool gateway sits next to the runtime tools and takes the same run-bound bearer token.
    descriptor["gatewayMcpEndpoint"] = str(current_app.config["PUBLIC_BASE_URL"]).rstrip("/") + "/mcp/gateway"
    return descriptor


# --- the shared wake prompt --------------------------------------------------------------------------------------


def _continuation_text(run: HeartbeatRun, context: dict) -> str | None:
    interaction_id = context.get("interactionId")
    outcome = context.get("outcome")
    if not interaction_id or outcome not in ("connected", "declined"):
        return None
    interaction = None
    try:
        import uuid

        interaction = db.session.get(ThreadInteraction, uuid.UUID(str(interaction_id)))
    except ValueError:
        interaction = None
    if interaction is not None and interaction.company_id != run.company_id:
        interaction = None
    service = (interaction.payload or {}).get("serviceName") if interaction is not None else None
    service = service or "the requested service"
    if outcome == "connected":
        return (
            f"The responsible person connected {service} for this task (connection request {interaction_id}). "
            "Its tools are available to you now within their permissions. Continue the task; this is a fresh session."
        )
    return (
        f"The responsible person declined the connection request for {service} ({interaction_id}). "
        "Pursue alternatives; do not request it again in this continuation. This is a fresh session."
    )


def render_wake_prompt(
    agent: Agent,
    issue: Issue | None,
    context: dict,
    snapshot: dict | None,
    runtime_tools: dict | None,
    *,
    run: HeartbeatRun,
) -> str:
    """The prompt every adapter receives: agent instructions, the task, why it woke, connection instructions."""
    parts = [f"You are {agent.name}" + (f", {agent.title}" if agent.title else "") + "."]
    if agent.instructions.strip():
        parts.append(agent.instructions.strip())
    if issue is not None:
        task = f"## Task {issue.identifier}: {issue.title}\n\nStatus: {issue.status}"
        if issue.description.strip():
            task += f"\n\n{issue.description.strip()}"
        parts.append(task)
    reason = _continuation_text(run, context) or (
        f"You were woken ({run.invocation_source}"
        + (f": {context['wakeReason']}" if isinstance(context.get("wakeReason"), str) else "")
        + ")."
    )
    parts.append(f"## Why you were woken\n\n{reason}")
    if snapshot is not None:
        parts.append(snapshot["text"])
    if runtime_tools is not None:
        parts.append(f"## Runtime tools\n\n{runtime_tools['guidance']}")
    return "\n\n".join(parts) + "\n"


# --- the invocation ----------------------------------------------------------------------------------------------


def prepare_invocation(run: HeartbeatRun) -> Invocation:
    """Build this turn's invocation; the first call of a turn freezes the snapshot and session on the run."""
    from app.services.runs import session_for_turn

    agent, issue = _load_run_scope(run)
    stored = run.context_snapshot or {}
    turn = stored.get(TURN_KEY) if run.status == "running" else None
    context = scrub_server_fields(stored)
    if isinstance(turn, dict) and turn.get("frozen"):
        snapshot = turn.get("connectionInstructions")
        resume_session_id = turn.get("resumeSessionId")
    else:
        snapshot = resolve_instructions_for_run(run)
        digest = snapshot["digest"] if snapshot else None
        resume_session_id = session_for_turn(run, digest, force_fresh=bool(context.get("forceFreshSession")))
        turn = {
            "frozen": True,
            "connectionInstructions": snapshot,
            "resumeSessionId": resume_session_id,
            "preparedAt": as_utc(utcnow()).isoformat(),
        }
    runtime_tools = runtime_tools_descriptor(run)
    prompt = render_wake_prompt(agent, issue, context, snapshot, runtime_tools, run=run)
    wake = context.get(WAKE_KEY) if isinstance(context.get(WAKE_KEY), dict) else {}
    context[WAKE_KEY] = {**wake, "connectionInstructions": snapshot}
    context["connectionInstructions"] = snapshot
    # Persist the frozen turn (never the bearer token) so the active turn keeps what it started with.
    run.context_snapshot = {**context, TURN_KEY: turn}
    db.session.flush()
    config = _scrub_config(agent.adapter_config)
    config["paperclipConnectionInstructions"] = snapshot
    return Invocation(
        run_id=str(run.id),
        agent_id=str(agent.id),
        company_id=str(run.company_id),
        issue_id=str(issue.id) if issue is not None else None,
        adapter_type=agent.adapter_type,
        config=config,
        context=context,
        prompt=prompt,
        connection_instructions=snapshot,
        runtime_tools=runtime_tools,
        resume_session_id=resume_session_id,
    )
