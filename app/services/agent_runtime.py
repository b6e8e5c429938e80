"""How an agent runs: its adapter and settings, and the secrets only its runs receive.

Choosing an adapter chooses a program the worker starts on the server, so only owners and admins may (`agents:manage`).
Secrets (a model API key, for example) are encrypted at rest, written once and never shown again: pages list their
names only, and activity records names, never values.
"""

from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path
from typing import Any

from flask import current_app
from sqlalchemy import select

from app.adapters import AGENT_CLI_ADAPTERS
from app.core.errors import Forbidden, Unprocessable
from app.extensions import db
from app.models import Agent, AgentSecret, Membership
from app.models.agents import AdapterType
from app.models.assistants import AssistantGrant
from app.models.tenancy import MANAGE_AGENTS
from app.services import secrets_box
from app.services.activity import record_activity

MANAGE_FORBIDDEN = "Only owners and admins can change how an agent runs."
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,119}$")
# Names the server sets for every turn: an agent cannot shadow them with a variable or a secret of its own.
RESERVED_PREFIXES = ("PAPERCLIP_", "SWITCHBOARD_")
RESERVED_NAMES = {"PATH", "HOME", "CLAUDE_CONFIG_DIR", "CODEX_HOME", "GEMINI_CLI_HOME"}
SECRET_MAX_LENGTH = 8192
ENV_MAX_ENTRIES = 50
TIMEOUT_MAX_SECONDS = 24 * 3600


@dataclass(frozen=True)
class AdapterChoice:
    value: str
    label: str
    explanation: str
    key_name: str | None = None  # the model key's variable, for the agent CLIs


ADAPTER_CHOICES = (
    AdapterChoice(
        "claude_code",
        "Claude Code",
        "Runs Anthropic's Claude Code CLI (claude -p) on the worker with Switchboard's runtime tools and gateway as "
        "its MCP servers and the connection instructions in its system prompt.",
        "ANTHROPIC_API_KEY",
    ),
    AdapterChoice(
        "codex",
        "Codex",
        "Runs OpenAI's Codex CLI (codex exec) on the worker with Switchboard's runtime tools and gateway as its MCP "
        "servers and the connection instructions as developer instructions.",
        "OPENAI_API_KEY",
    ),
    AdapterChoice(
        "gemini",
        "Gemini CLI",
        "Runs Google's Gemini CLI (gemini, headless) on the worker with Switchboard's runtime tools and gateway as its "
        "MCP servers and the connection instructions appended to its system prompt.",
        "GEMINI_API_KEY",
    ),
    AdapterChoice(
        "process",
        "Process",
        "Runs any local command; it reads the wake prompt on stdin and the runtime tools from PAPERCLIP_* variables.",
    ),
    AdapterChoice(
        "http",
        "HTTP",
        "POSTs each turn to an agent service you run, with the prompt, the instructions and the runtime tools.",
    ),
    AdapterChoice("manual", "Manual", "Switchboard starts nothing: you drive the agent's runs yourself."),
)
CHOICES_BY_VALUE = {choice.value: choice for choice in ADAPTER_CHOICES}


def can_manage_agents(membership: Membership | None) -> bool:
    return membership is not None and membership.has_permission(MANAGE_AGENTS)


ASSISTANT_RUNTIME = (
    "This agent is a person's own assistant: it runs in their MCP client (Claude Code, Cursor, ChatGPT, ...), which "
    "signed in to Switchboard, so it has no adapter to change here."
)


def is_assistant_agent(agent: Agent) -> bool:
    """Whether the agent is a person's assistant (a consent made it, `services.assistants.grants`): it runs in the
    person's own MCP client, never started by Switchboard, so how it runs is not Switchboard's to choose."""
    found = db.session.scalar(select(AssistantGrant.id).where(AssistantGrant.agent_id == agent.id).limit(1))
    return found is not None


def require_own_runtime(agent: Agent) -> None:
    """An assistant's agent keeps the adapter it was created with (`ASSISTANT_RUNTIME`)."""
    if is_assistant_agent(agent):
        raise Forbidden(ASSISTANT_RUNTIME)


def require_manage_agents(membership: Membership) -> None:
    if not can_manage_agents(membership):
        raise Forbidden(MANAGE_FORBIDDEN)


def _agent_activity(actor: Membership, agent: Agent, action: str, details: dict[str, Any]) -> None:
    """One activity row about the agent, by the person who changed it (details never hold a secret's value)."""
    record_activity(
        company_id=agent.company_id,
        actor_type="user",
        actor_id=actor.user_id,
        action=action,
        entity_type="agent",
        entity_id=agent.id,
        agent_id=agent.id,
        details=details,
    )


# --- settings ----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class CliRuntimeSettings:
    """What the Agents page saves for an agent CLI (`app.adapters.agents.runner.CliSettings` reads it back)."""

    binary: str = ""
    model: str = ""
    base_url: str = ""
    cwd: str = ""
    extra_args: str = ""  # as typed: split like a shell would
    timeout_seconds: int | None = None
    env: str = ""  # NAME=value lines (not secret)


def parse_env_lines(text: str) -> dict[str, str]:
    env: dict[str, str] = {}
    for number, raw in enumerate((text or "").splitlines(), start=1):
        line = raw.strip()
        if not line or line.startswith("#"):
            continue
        name, sep, value = line.partition("=")
        name = name.strip()
        if not sep or not ENV_NAME.match(name):
            raise Unprocessable(f"Environment line {number} must read NAME=value.")
        check_variable_name(name)
        env[name] = value.strip()
    if len(env) > ENV_MAX_ENTRIES:
        raise Unprocessable(f"At most {ENV_MAX_ENTRIES} environment variables.")
    return env


def check_variable_name(name: str) -> None:
    if not ENV_NAME.match(name):
        raise Unprocessable(
            "A variable name has letters, digits and underscores, and does not start with a digit."
        )
    if name.upper().startswith(RESERVED_PREFIXES) or name.upper() in RESERVED_NAMES:
        raise Unprocessable(f"{name} is set by Switchboard for every run; choose another name.")


def cli_config(settings: CliRuntimeSettings) -> dict[str, Any]:
    config: dict[str, Any] = {}
    if settings.binary.strip():
        config["binary"] = settings.binary.strip()
    if settings.model.strip():
        config["model"] = settings.model.strip()
    if settings.base_url.strip():
        url = settings.base_url.strip()
        if not url.startswith(("http://", "https://")):
            raise Unprocessable("The model API base URL must start with http:// or https://.")
        config["baseUrl"] = url
    if settings.cwd.strip():
        if not os.path.isabs(settings.cwd.strip()):
            raise Unprocessable("The working directory must be an absolute path.")
        config["cwd"] = settings.cwd.strip()
    if settings.extra_args.strip():
        try:
            config["extraArgs"] = shlex.split(settings.extra_args)
        except ValueError as exc:
            raise Unprocessable(f"Extra arguments: {exc}.") from exc
    if settings.timeout_seconds is not None:
        if not 1 <= settings.timeout_seconds <= TIMEOUT_MAX_SECONDS:
            raise Unprocessable(f"The timeout is between 1 and {TIMEOUT_MAX_SECONDS} seconds.")
        config["timeoutSeconds"] = settings.timeout_seconds
    env = parse_env_lines(settings.env)
    if env:
        config["env"] = env
    return config


def configure_agent_cli(
    actor: Membership, agent: Agent, adapter_type: str, settings: CliRuntimeSettings
) -> Agent:
    """Make the agent a Claude Code, Codex or Gemini CLI agent with these settings (replacing its adapter
    configuration)."""
    require_manage_agents(actor)
    require_own_runtime(agent)
    if adapter_type not in AGENT_CLI_ADAPTERS:
        raise Unprocessable("Choose Claude Code, Codex or Gemini CLI.")
    config = cli_config(settings)
    changed = agent.adapter_type != adapter_type or agent.adapter_config != config
    agent.adapter_type = adapter_type
    agent.adapter_config = config
    if changed:
        _agent_activity(
            actor,
            agent,
            "agent.updated",
            {"fields": ["adapter"], "adapterType": adapter_type, "settings": sorted(config)},
        )
    return agent


def set_adapter_type(actor: Membership, agent: Agent, adapter_type: str) -> Agent:
    """Switch to an adapter without settings of its own here (manual), or back to a kept configuration."""
    require_manage_agents(actor)
    require_own_runtime(agent)
    if adapter_type not in AdapterType.values():
        raise Unprocessable("Unknown adapter type.")
    if adapter_type != agent.adapter_type:
        agent.adapter_type = adapter_type
        _agent_activity(actor, agent, "agent.updated", {"fields": ["adapter"], "adapterType": adapter_type})
    return agent


# --- secrets -----------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class SecretName:
    name: str
    updated_at: datetime


def agent_secret_names(agent: Agent) -> list[SecretName]:
    rows = db.session.execute(
        select(AgentSecret.name, AgentSecret.updated_at)
        .where(AgentSecret.agent_id == agent.id)
        .order_by(AgentSecret.name)
    )
    return [SecretName(name, updated_at) for name, updated_at in rows]


def set_agent_secret(actor: Membership, agent: Agent, name: str, value: str) -> None:
    """Store (or replace) one secret of the agent, encrypted; the value is never shown again."""
    require_manage_agents(actor)
    name = (name or "").strip()
    check_variable_name(name)
    if not value or len(value) > SECRET_MAX_LENGTH:
        raise Unprocessable(f"The secret's value is 1 to {SECRET_MAX_LENGTH} characters.")
    row = db.session.scalar(
        select(AgentSecret).where(AgentSecret.agent_id == agent.id, AgentSecret.name == name)
    )
    if row is None:
        row = AgentSecret(company_id=agent.company_id, agent_id=agent.id, name=name, ciphertext="")
        db.session.add(row)
    row.ciphertext = secrets_box.encrypt(value)
    _agent_activity(actor, agent, "agent.secret_set", {"name": name})
    db.session.flush()


def remove_agent_secret(actor: Membership, agent: Agent, name: str) -> bool:
    require_manage_agents(actor)
    row = db.session.scalar(
        select(AgentSecret).where(AgentSecret.agent_id == agent.id, AgentSecret.name == name)
    )
    if row is None:
        return False
    db.session.delete(row)
    _agent_activity(actor, agent, "agent.secret_removed", {"name": name})
    db.session.flush()
    return True


def agent_secret_env(agent: Agent) -> dict[str, str]:
    """The agent's secrets, decrypted, for its own turn only (`Invocation.secret_env`; never persisted)."""
    rows = db.session.execute(
        select(AgentSecret.name, AgentSecret.ciphertext).where(AgentSecret.agent_id == agent.id)
    )
    return {name: secrets_box.decrypt(ciphertext) for name, ciphertext in rows}


def agent_home(agent: Agent) -> str:
    """The agent's private folder (mode 0700) where its CLI keeps its config home and sessions between turns."""
    path = Path(current_app.config["AGENT_HOME_ROOT"]) / str(agent.id)
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    return str(path)
