"""An agent's Runtime tab: how the agent runs (its adapter and settings) and the secrets only its runs receive."""

from __future__ import annotations

import shlex

from flask import flash, redirect, render_template, url_for
from flask.typing import ResponseReturnValue

from app.adapters import AGENT_CLI_ADAPTERS
from app.core.errors import Unprocessable
from app.models import Agent, Membership
from app.services.agent_runtime import (
    ADAPTER_CHOICES,
    ASSISTANT_RUNTIME,
    CHOICES_BY_VALUE,
    CliRuntimeSettings,
    agent_secret_names,
    can_manage_agents,
    configure_agent_cli,
    is_assistant_agent,
    remove_agent_secret,
    require_manage_agents,
    require_own_runtime,
    set_adapter_type,
    set_agent_secret,
)
from app.web.board import bp
from app.web.context import load_scoped
from app.web.forms import AgentRuntimeForm, AgentSecretForm, EmptyForm


def _runtime_form(agent: Agent) -> AgentRuntimeForm:
    config = agent.adapter_config or {}
    cli = agent.adapter_type in AGENT_CLI_ADAPTERS
    env_value, extra_value = config.get("env"), config.get("extraArgs")
    env: dict = env_value if cli and isinstance(env_value, dict) else {}
    extra: list = extra_value if cli and isinstance(extra_value, list) else []
    form = AgentRuntimeForm(
        adapter_type=agent.adapter_type,
        binary=config.get("binary", "") if cli else "",
        model=config.get("model", "") if cli else "",
        base_url=config.get("baseUrl", "") if cli else "",
        cwd=config.get("cwd", "") if cli else "",
        extra_args=shlex.join(str(a) for a in extra),
        timeout_seconds=config.get("timeoutSeconds") if cli else None,
        env="\n".join(f"{k}={v}" for k, v in env.items()),
    )
    # Process and HTTP agents keep the settings they were created with: offered only to the agent that has them.
    form.adapter_type.choices = [
        (c.value, c.label)
        for c in ADAPTER_CHOICES
        if c.value not in ("process", "http") or c.value == agent.adapter_type
    ]
    return form


def _page(
    agent: Agent,
    membership: Membership,
    form: AgentRuntimeForm,
    secret_form: AgentSecretForm | None = None,
    status: int = 200,
) -> ResponseReturnValue:
    return render_template(
        "board/agent_runtime.html",
        agent=agent,
        form=form,
        secret_form=secret_form or AgentSecretForm(),
        remove_form=EmptyForm(),
        secrets=agent_secret_names(agent),
        choices=ADAPTER_CHOICES,
        current=CHOICES_BY_VALUE.get(agent.adapter_type),
        can_manage=can_manage_agents(membership),
        assistant_runtime=ASSISTANT_RUNTIME if is_assistant_agent(agent) else None,
    ), status


@bp.get("/agents/<agent_id>/runtime")
def agent_runtime(agent_id: str) -> ResponseReturnValue:
    agent, membership = load_scoped(Agent, agent_id)
    return _page(agent, membership, _runtime_form(agent))


@bp.post("/agents/<agent_id>/runtime")
def save_agent_runtime(agent_id: str) -> ResponseReturnValue:
    agent, membership = load_scoped(Agent, agent_id)
    require_manage_agents(membership)
    require_own_runtime(agent)
    form = _runtime_form(agent)  # bound to the submitted data (FlaskForm reads the POST)
    if not form.validate():
        return _page(agent, membership, form, status=422)
    adapter_type = form.adapter_type.data or "manual"
    try:
        if adapter_type in AGENT_CLI_ADAPTERS:
            configure_agent_cli(
                membership,
                agent,
                adapter_type,
                CliRuntimeSettings(
                    binary=form.binary.data or "",
                    model=form.model.data or "",
                    base_url=form.base_url.data or "",
                    cwd=form.cwd.data or "",
                    extra_args=form.extra_args.data or "",
                    timeout_seconds=form.timeout_seconds.data,
                    env=form.env.data or "",
                ),
            )
        else:
            set_adapter_type(membership, agent, adapter_type)
    except Unprocessable as exc:
        form.form_errors.append(exc.message)
        return _page(agent, membership, form, status=422)
    flash(f"{agent.name} now runs with {CHOICES_BY_VALUE[adapter_type].label}.")
    return redirect(url_for("board.agent_runtime", agent_id=agent.id), code=303)


@bp.post("/agents/<agent_id>/secrets")
def save_agent_secret(agent_id: str) -> ResponseReturnValue:
    agent, membership = load_scoped(Agent, agent_id)
    require_manage_agents(membership)
    secret_form = AgentSecretForm()
    if secret_form.validate():
        try:
            set_agent_secret(membership, agent, secret_form.name.data or "", secret_form.value.data or "")
        except Unprocessable as exc:
            secret_form.name.errors = [exc.message]
        else:
            flash(f"Secret {secret_form.name.data} saved. It is not shown again.")
            return redirect(url_for("board.agent_runtime", agent_id=agent.id), code=303)
    # The value is never echoed back, even on a failed save.
    secret_form.value.data = ""
    return _page(agent, membership, _runtime_form(agent), secret_form, status=422)


@bp.post("/agents/<agent_id>/secrets/<name>/remove")
def remove_agent_secret_view(agent_id: str, name: str) -> ResponseReturnValue:
    agent, membership = load_scoped(Agent, agent_id)
    require_manage_agents(membership)
    if remove_agent_secret(membership, agent, name):
        flash(f"Secret {name} removed.")
    return redirect(url_for("board.agent_runtime", agent_id=agent.id), code=303)
