"""The explainer: "why can't Builder use Notion?" for one agent and one connection (and optionally one tool).

It reads the connection the way the decisions do (`effective_access`, in its `explain` variant: installed and live
or not) and runs the same checks in the same order (`checks`, `ConnectionAccess.first_failure`): `ready` is the
decision itself, `first_failure` the check that refuses, and `checks` every check of the order with its own answer
(slots no feature fills yet say `not_checked`). The responsible person is the one a run would have: the explainer
answers for runs of `agent` that `responsible_user_id` is responsible for.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field, replace
from typing import Literal

from sqlalchemy import select

from app.catalog.loader import get_app
from app.extensions import db
from app.models import Agent, ToolConnection
from app.services.access.checks import (
    CHECK_ORDER,
    READY,
    CheckFailure,
    CheckSubject,
    label_of,
    registered,
)
from app.services.access.effective import effective_access
from app.services.access.rows import ConnectionAccess, ToolAccess

# The features that fill the quarantine and limit slots register their checks when imported; `create_app` imports
# them (importing them here would make the access package import its own users).

CheckStatus = Literal["pass", "fail", "not_checked"]


@dataclass(frozen=True)
class CheckAnswer:
    """One check of the order as the explainer shows it."""

    name: str
    label: str
    status: CheckStatus
    blocks_tools: bool = True
    failure: CheckFailure | None = None


@dataclass(frozen=True)
class Explanation:
    agent_id: uuid.UUID
    agent_name: str
    connection_id: uuid.UUID
    connection_name: str
    tool_name: str | None
    ready: bool
    first_failure: CheckFailure | None
    checks: list[CheckAnswer] = field(default_factory=list)
    # The named tool's action for this agent (its policy within the card's scope), when the tool is reachable.
    action: str | None = None
    # The access the checks ran over (the dry run reads the tool and the identity from it).
    access: ConnectionAccess | None = field(default=None, repr=False, compare=False)

    @property
    def summary(self) -> str:
        """One sentence: ready, or the first failing check's message."""
        what = f"{self.tool_name} on {self.connection_name}" if self.tool_name else self.connection_name
        if self.first_failure is None:
            return f"Ready: {self.agent_name} can use {what}."
        return f"{self.agent_name} can't use {what}: {self.first_failure.message}"

    @property
    def tool_access(self) -> ToolAccess | None:
        if self.access is None or self.tool_name is None:
            return None
        return next((t for t in self.access.tools if t.tool.name == self.tool_name), None)


def explain_access(
    agent: Agent,
    responsible_user_id: uuid.UUID | None,
    connection: ToolConnection,
    tool_name: str | None = None,
) -> Explanation:
    """Why `agent` can or cannot use `connection` (or its tool `tool_name`) on runs `responsible_user_id` is
    responsible for. The caller has checked that agent and connection belong to the same company."""
    if agent.company_id != connection.company_id:
        raise ValueError("The agent and the connection belong to different companies.")
    found = effective_access(
        connection.company_id,
        agent.id,
        responsible_user_id,
        connection_ids=[connection.id],
        explain=True,
        with_tools=True,
    )
    access = found[0]
    # The facts of the checks features fill (quarantined tools, used-up limits), which the hot paths do not read.
    for loading in registered(CHECK_ORDER):
        if loading.load is not None:
            loading.load([access], tool_name)
    # The decision as the hot paths take it (advisory checks left out: no app definition), with those facts.
    first = access.first_failure(READY, tool_name)
    subject = CheckSubject(access, tool_name, get_app(connection.app_slug))
    filled = {check.name: check for check in registered(CHECK_ORDER)}
    answers = []
    for name in CHECK_ORDER:
        check = filled.get(name)
        if check is None:
            answers.append(CheckAnswer(name, label_of(name), "not_checked"))
            continue
        failure = check.decide(subject)
        status: CheckStatus = "pass" if failure is None else "fail"
        answers.append(CheckAnswer(name, check.label, status, check.blocks_tools, failure))
    explanation = Explanation(
        agent_id=agent.id,
        agent_name=agent.name,
        connection_id=connection.id,
        connection_name=connection.name,
        tool_name=tool_name,
        ready=first is None,
        first_failure=first,
        checks=answers,
        access=access,
    )
    tool = explanation.tool_access
    return replace(explanation, action=tool.action) if tool is not None else explanation


def connection_choices(company_id: uuid.UUID) -> list[tuple[uuid.UUID, str]]:
    """The company's connections an explainer can be asked about (every one but deleted ones), by name."""
    rows = db.session.execute(
        select(ToolConnection.id, ToolConnection.name)
        .where(ToolConnection.company_id == company_id, ToolConnection.status != "archived")
        .order_by(ToolConnection.name, ToolConnection.id)
    )
    return [(row.id, row.name) for row in rows]
