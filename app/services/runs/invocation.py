"""The shared wake prompt and the `Invocation` an adapter executes, frozen once per turn."""

from __future__ import annotations

from app.adapters import AGENT_CLI_ADAPTERS, Invocation
from app.extensions import db
from app.models import Agent, HeartbeatRun, Issue, ThreadInteraction
from app.models.base import as_utc, utcnow
from app.services.agent_runtime import agent_home, agent_secret_env
from app.services.runs.runtime_tools import runtime_tools_descriptor
from app.services.runs.sessions import session_for_turn
from app.services.runs.snapshot import _load_run_scope, resolve_instructions_for_run
from app.services.runs.wake_context import TURN_KEY, WAKE_KEY, _scrub_config, scrub_server_fields
from app.services.runtime.readiness import Readiness, readiness_for_run

# --- the shared wake prompt --------------------------------------------------------------------------------------


def _continuation_text(run: HeartbeatRun, context: dict) -> str | None:
    """Why a continuation woke. A connected card's tools are announced only when the service is ready for the run
    now (the card was answered earlier; the connection may have been disabled or its tools blocked since)."""
    interaction_id = context.get("interactionId")
    outcome = context.get("outcome")
    if not interaction_id or outcome not in ("connected", "declined", "expired"):
        return None
    interaction = None
    try:
        import uuid

        interaction = db.session.get(ThreadInteraction, uuid.UUID(str(interaction_id)))
    except ValueError:
        interaction = None
    if interaction is not None and interaction.company_id != run.company_id:
        interaction = None
    payload = (interaction.payload or {}) if interaction is not None else {}
    service = payload.get("serviceName") or "the requested service"
    if outcome == "expired":
        reason = (interaction.result or {}).get("reason") if interaction is not None else None
        return (
            f"The connection request for {service} ({interaction_id}) can no longer be answered: "
            f"{reason or 'it expired'}. Do not wait for it; if you still need {service}, look for it again with "
            "connections_search. This is a fresh session."
        )
    if outcome == "connected":
        slug = payload.get("serviceSlug")
        state = (
            readiness_for_run(run, slug)
            if isinstance(slug, str) and slug
            else Readiness("unavailable", "Connection is disabled or unavailable")
        )
        if state.state == "ready":
            return (
                f"The responsible person connected {service} for this task (connection request {interaction_id}). "
                "Its tools are available to you now within their permissions. Continue the task; this is a fresh "
                "session."
            )
        return (
            f"The responsible person connected {service} for this task (connection request {interaction_id}), "
            f"but its tools are not available to you now: {state.reason}. Do not rely on them in this run; continue "
            f"with what you can do without them, and tell the responsible person in the task if you still need "
            f"{service}. This is a fresh session."
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
    snapshot_in_prompt: bool = True,
) -> str:
    """The prompt every adapter receives: agent instructions, the task, why it woke, connection instructions (left
    out with `snapshot_in_prompt=False` for the agent CLIs, which receive them in their system prompt)."""
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
    if snapshot is not None and snapshot_in_prompt:
        parts.append(snapshot["text"])
    if runtime_tools is not None:
        parts.append(f"## Runtime tools\n\n{runtime_tools['guidance']}")
    return "\n\n".join(parts) + "\n"


# --- the invocation ----------------------------------------------------------------------------------------------


def prepare_invocation(run: HeartbeatRun) -> Invocation:
    """Build this turn's invocation; the first call of a turn freezes the snapshot and session on the run."""
    agent, issue, _revision = _load_run_scope(run)
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
    agent_cli = agent.adapter_type in AGENT_CLI_ADAPTERS
    prompt = render_wake_prompt(
        agent, issue, context, snapshot, runtime_tools, run=run, snapshot_in_prompt=not agent_cli
    )
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
        secret_env=agent_secret_env(agent) if agent_cli else {},
        agent_home=agent_home(agent) if agent_cli else None,
    )
