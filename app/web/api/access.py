"""Board API: "why can't this agent use this connection?" (the explainer) and the policy dry run.

Both answer for runs the caller is responsible for (the caller stands in as the run's responsible person, which
decides whether a personal identity may serve). Neither writes anything nor contacts a provider.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from flask import abort
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, Field, StringConstraints

from app.extensions import db
from app.models import Agent, Membership, ToolConnection
from app.services.access.checks import CheckFailure
from app.services.access.explain import Explanation, explain_access
from app.services.gateway.dry_run import DryRun, dry_run_call
from app.web.api import bp
from app.web.api.validation import StrictBody, parse_body
from app.web.context import load_scoped, parse_uuid
from app.web.openapi.operations import (
    BAD_BODY,
    BOARD_WRITE,
    NOT_FOUND,
    THROTTLED,
    TOO_LARGE,
    UNAUTHENTICATED,
    Answer,
    board_read,
    documented,
)
from app.web.openapi.responses import respond

ToolName = Annotated[str, StringConstraints(strip_whitespace=True, min_length=1, max_length=200)]


class CheckFailureResponse(BaseModel):
    check: str
    reason: str
    message: str

    @classmethod
    def of(cls, failure: CheckFailure | None) -> CheckFailureResponse | None:
        return (
            None
            if failure is None
            else cls(check=failure.check, reason=failure.reason, message=failure.message)
        )


class CheckResponse(BaseModel):
    name: str
    label: str
    status: Literal["pass", "fail", "not_checked"]
    blocksTools: bool
    failure: CheckFailureResponse | None


class ExplanationResponse(BaseModel):
    """The checks of the access rule in its order; `ready` is the decision the gateway and search take, and
    `firstFailure` the first check that refuses (null when ready). `required_configuration` never blocks tools
    (`blocksTools` false); `not_checked` marks a slot no feature fills yet."""

    agentId: uuid.UUID
    connectionId: uuid.UUID
    tool: str | None
    ready: bool
    summary: str
    firstFailure: CheckFailureResponse | None
    action: Literal["allow", "ask_first", "block"] | None = Field(
        description="The named tool's action for this agent (its policy within an access card's scope)"
    )
    checks: list[CheckResponse]

    @classmethod
    def of(cls, explanation: Explanation) -> ExplanationResponse:
        return cls(
            agentId=explanation.agent_id,
            connectionId=explanation.connection_id,
            tool=explanation.tool_name,
            ready=explanation.ready,
            summary=explanation.summary,
            firstFailure=CheckFailureResponse.of(explanation.first_failure),
            action=explanation.action,
            checks=[
                CheckResponse(
                    name=a.name,
                    label=a.label,
                    status=a.status,
                    blocksTools=a.blocks_tools,
                    failure=CheckFailureResponse.of(a.failure),
                )
                for a in explanation.checks
            ],
        )


class DryRunBody(StrictBody):
    agentId: uuid.UUID
    tool: ToolName = Field(description="The tool's name at the provider (as on the connection's page)")
    arguments: dict[str, Any] = Field(default_factory=dict)


class DryRunResponse(BaseModel):
    decision: Literal["allowed", "allowed_by_rule", "ask_first", "blocked", "quarantined", "unavailable"]
    message: str
    trustRuleId: uuid.UUID | None = Field(
        default=None, description="The trust rule that would let an ask-first call through (allowed_by_rule)"
    )
    arguments: dict[str, Any] = Field(
        description="What the provider would receive: the caller's arguments with the managed ones applied "
        "(secret-marked values redacted)"
    )
    managedArguments: list[str] = Field(description="The arguments the connection's configuration sets")
    argumentsDigest: str | None = Field(
        description="SHA-256 of the canonical JSON of the projected arguments: what an approval is bound to"
    )
    explanation: ExplanationResponse

    @classmethod
    def of(cls, dry_run: DryRun) -> DryRunResponse:
        return cls(
            decision=dry_run.decision,
            message=dry_run.message,
            trustRuleId=dry_run.trust_rule.id if dry_run.trust_rule is not None else None,
            arguments=dry_run.arguments,
            managedArguments=dry_run.managed_argument_names,
            argumentsDigest=dry_run.arguments_digest,
            explanation=ExplanationResponse.of(dry_run.explanation),
        )


def load_agent_and_connection(
    connection_id: str, agent_id: object
) -> tuple[Agent, ToolConnection, Membership]:
    """The connection (the caller's company's, else 404) and an agent of the same company (else 404)."""
    connection, membership = load_scoped(ToolConnection, connection_id)
    agent = db.session.get(Agent, parse_uuid(agent_id))
    if agent is None or agent.company_id != connection.company_id:
        abort(404)
    return agent, connection, membership


EXPLAIN_DESCRIPTION = (
    "The access rule's checks in its order (grant, audience, identity owner, enabled, health, credentials, policy, "
    "quarantine, limit, required configuration), each with its answer, for runs of the agent that the caller is "
    "responsible for. Computed by the code the gateway and `connections_search` decide with."
)


@bp.get("/tool-connections/<connection_id>/access/<agent_id>")
@board_read(
    "Why an agent can or cannot use a connection", "connections", ExplanationResponse, EXPLAIN_DESCRIPTION
)
def explain_connection_access(connection_id: str, agent_id: str) -> ResponseReturnValue:
    agent, connection, membership = load_agent_and_connection(connection_id, agent_id)
    return respond(ExplanationResponse.of(explain_access(agent, membership.user_id, connection)))


@bp.get("/tool-connections/<connection_id>/access/<agent_id>/tools/<tool_name>")
@board_read(
    "Why an agent can or cannot use one tool of a connection",
    "connections",
    ExplanationResponse,
    EXPLAIN_DESCRIPTION + " The policy check is the named tool's (its name at the provider).",
)
def explain_tool_access(connection_id: str, agent_id: str, tool_name: str) -> ResponseReturnValue:
    agent, connection, membership = load_agent_and_connection(connection_id, agent_id)
    if len(tool_name) > 200:
        abort(404)
    return respond(ExplanationResponse.of(explain_access(agent, membership.user_id, connection, tool_name)))


@bp.post("/tool-connections/<connection_id>/dry-run")
@documented(
    "Policy dry run: what a tool call with these arguments would do",
    description=(
        "Answers allowed, ask first, blocked, or unavailable (with the explainer's reason) for a call of the tool "
        "by the agent on a run the caller is responsible for, with the managed arguments applied and the digest "
        "an approval would be bound to. Nothing is written and the provider is not called."
    ),
    tag="connections",
    security=BOARD_WRITE,
    body=DryRunBody,
    responses={
        200: Answer("What the call would do", (DryRunResponse,)),
        400: BAD_BODY,
        401: UNAUTHENTICATED,
        404: NOT_FOUND,
        413: TOO_LARGE,
        429: THROTTLED,
    },
)
def dry_run(connection_id: str) -> ResponseReturnValue:
    body = parse_body(DryRunBody)
    agent, connection, membership = load_agent_and_connection(connection_id, body.agentId)
    answer = dry_run_call(agent, membership.user_id, connection, body.tool, body.arguments)
    return respond(DryRunResponse.of(answer))
