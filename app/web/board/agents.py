"""Agents: the list and an agent's Instructions tab."""

from flask import redirect, render_template, url_for
from flask.typing import ResponseReturnValue

from app.extensions import htmx
from app.models import Agent
from app.services.agent_runtime import ADAPTER_CHOICES
from app.services.agents import list_agents, update_agent_instructions
from app.web.apps.agent_section import agent_connection_instructions
from app.web.board import bp
from app.web.context import current_membership, load_scoped, require_write
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
    )
