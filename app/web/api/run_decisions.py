"""Board API for a run's gateway decision timeline (`services.gateway.timeline`): the run page's list as JSON."""

from __future__ import annotations

import uuid

from flask.typing import ResponseReturnValue
from pydantic import BaseModel, Field

from app.models import HeartbeatRun
from app.services.gateway.timeline import Decision, run_timeline
from app.web.api import bp
from app.web.context import load_scoped
from app.web.openapi.operations import board_read
from app.web.openapi.responses import Moment, respond


class DecisionResponse(BaseModel):
    sequence: int = Field(description="1 for the run's first decision, in the order they were made")
    at: Moment
    kind: str = Field(description="listed, called, resource_read, or approval (a person's answer to a card)")
    decision: str = Field(
        description="For a call: allowed, trusted, approved, approval_required, approval_denied, tool_blocked, "
        "rate_limited, loop_detected, unknown_tool, ...; for an answer: approved, denied, invalidated, ..."
    )
    summary: str
    tool: str | None
    connectionId: uuid.UUID | None
    connectionName: str | None
    outcome: str | None = Field(
        description="The provider's result status (ok, tool_error, provider_...) or refused"
    )
    latencyMs: int | None
    argumentsDigest: str | None = Field(
        description="SHA-256 of the canonical JSON of the projected arguments"
    )
    resultDigest: str | None = Field(
        description="SHA-256 of the canonical JSON of the result the agent received"
    )
    listingDigest: str | None
    approvalId: uuid.UUID | None
    trustRuleId: uuid.UUID | None
    retryAfterSeconds: int | None
    byUserId: uuid.UUID | None
    by: str | None = Field(description="The name of the person who answered an approval")

    @classmethod
    def of(cls, d: Decision) -> DecisionResponse:
        return cls(
            sequence=d.sequence,
            at=d.at,
            kind=d.kind,
            decision=d.decision,
            summary=d.summary,
            tool=d.tool,
            connectionId=_uuid(d.connection_id),
            connectionName=d.connection_name,
            outcome=d.outcome,
            latencyMs=d.latency_ms,
            argumentsDigest=d.arguments_digest,
            resultDigest=d.result_digest,
            listingDigest=d.listing_digest,
            approvalId=_uuid(d.approval_id),
            trustRuleId=_uuid(d.trust_rule_id),
            retryAfterSeconds=d.retry_after_seconds,
            byUserId=_uuid(d.by_user_id),
            by=d.by,
        )


def _uuid(value: str | None) -> uuid.UUID | None:
    try:
        return uuid.UUID(value) if value else None
    except ValueError:
        return None


class RunDecisionsResponse(BaseModel):
    runId: uuid.UUID
    decisions: list[DecisionResponse]
    truncated: bool = Field(description="True when the run made more decisions than the 2,000 listed")


@bp.get("/runs/<run_id>/decisions")
@board_read(
    "A run's gateway decision timeline",
    "tasks",
    RunDecisionsResponse,
    "Every decision the tool gateway made for the run, in order: listed, called (allowed by policy, an approval or "
    "a trust rule; asked; refused by a policy, a limit or quarantine), and people's answers to its approvals, with "
    "the provider's result status and latency. Arguments and results appear only as SHA-256 digests.",
)
def get_run_decisions(run_id: str) -> ResponseReturnValue:
    run, _membership = load_scoped(HeartbeatRun, run_id)
    timeline = run_timeline(run)
    return respond(
        RunDecisionsResponse(
            runId=timeline.run_id,
            decisions=[DecisionResponse.of(d) for d in timeline.decisions],
            truncated=timeline.truncated,
        )
    )
