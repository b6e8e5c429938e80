"""Agents: the list and an agent's Instructions tab."""

from flask import abort, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue

from app.extensions import db, htmx
from app.models import Agent, ToolConnection
from app.services.access.explain import Explanation, connection_choices, explain_access
from app.services.agent_runtime import ADAPTER_CHOICES
from app.services.agents import list_agents, update_agent_instructions
from app.web.apps.agent_section import agent_connection_instructions
from app.web.board import bp
from app.web.context import current_membership, load_scoped, parse_uuid, require_write
from app.web.forms import AgentInstructionsForm


@bp.get("/agents")
def agents() -> ResponseReturnValue:
    membership = current_membership()
    return render_template(
        "board/agents.html",
        agents=list_agents(membership.company_id),
        adapter_labels={choice.value: choice.label for choice in ADAPTER_CHOICES},
    )


@bp.get("/agents/<agent_id>")
def agent(agent_id: str) -> ResponseReturnValue:
    agent, membership = load_scoped(Agent, agent_id)
    return redirect(url_for("board.agent_instructions", agent_id=agent.id))


@bp.route("/agents/<agent_id>/instructions", methods=["GET", "POST"])
def agent_instructions(agent_id: str) -> ResponseReturnValue:
    agent, membership = load_scoped(Agent, agent_id)
    form = AgentInstructionsForm(instructions=agent.instructions)
    saved = False
    if form.is_submitted():
        require_write(membership)
        if form.validate():
            update_agent_instructions(membership, agent, form.instructions.data or "")
            saved = True
        else:
            status = 422
            template = "board/_agent_instructions_form.html" if htmx else "board/agent_instructions.html"
            return render_template(
                template,
                agent=agent,
                form=form,
                can_write=True,
                connection_instructions=agent_connection_instructions(agent),
                connections=connection_choices(agent.company_id),
            ), status
        if not htmx:
            return redirect(url_for("board.agent_instructions", agent_id=agent.id), code=303)
    template = (
        "board/_agent_instructions_form.html"
        if htmx and form.is_submitted()
        else "board/agent_instructions.html"
    )
    return render_template(
        template,
        agent=agent,
        form=form,
        saved=saved,
        can_write=membership.has_write_access,
        connection_instructions=agent_connection_instructions(agent),
        connections=connection_choices(agent.company_id),
    )


@bp.get("/agents/<agent_id>/access")
def agent_access(agent_id: str) -> ResponseReturnValue:
    """Why the agent can or cannot use a connection (the explainer), for runs the signed-in person is responsible
    for: the partial to htmx, the agent's page with the answer in place otherwise."""
    agent, membership = load_scoped(Agent, agent_id)
    connection = db.session.get(ToolConnection, parse_uuid(request.args.get("connection")))
    if connection is None or connection.company_id != agent.company_id:
        abort(404)
    tool = (request.args.get("tool") or "").strip()[:200] or None
    explanation: Explanation = explain_access(agent, membership.user_id, connection, tool)
    if htmx:
        return render_template("apps/_access_explanation.html", explanation=explanation)
    return render_template(
        "board/agent_instructions.html",
        agent=agent,
        form=AgentInstructionsForm(instructions=agent.instructions),
        can_write=membership.has_write_access,
        connection_instructions=agent_connection_instructions(agent),
        connections=connection_choices(agent.company_id),
        explanation=explanation,
    )
