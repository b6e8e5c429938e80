"""Board routes that answer a connection card: setup options, phase, complete, decline.

Only the person the card is addressed to may act (403 for other members); other companies' cards are 404.
"""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from flask.typing import ResponseReturnValue
from flask_login import current_user
from pydantic import BaseModel, ConfigDict, Field, StringConstraints
from pydantic.json_schema import JsonDict

from app.models import ThreadInteraction
from app.services import cards
from app.services.intents import card as intents_card
from app.services.intents import resolution
from app.web.api import bp
from app.web.api.validation import StrictBody, parse_body
from app.web.context import membership_for, parse_uuid
from app.web.openapi.operations import (
    BOARD_READ,
    READ_ANSWERS,
    Answer,
    board_write,
    documented,
    error,
)
from app.web.openapi.responses import DescribedService, Moment, ServiceState, respond
from app.web.unit_of_work import after_commit
from app.workers.continuations import deliver as deliver_continuation


def _phase_rule(schema: JsonDict) -> None:
    """What the card accepts; the model takes any text so that other values get the contract's 422 message."""
    schema.clear()
    schema.update({"enum": list(intents_card.PHASES), "type": "string"})


class PhaseBody(StrictBody):
    model_config = ConfigDict(json_schema_extra={"required": ["phase"]})

    phase: str | None = Field(default=None, json_schema_extra=_phase_rule)


class CompleteBody(StrictBody):
    connectionId: uuid.UUID


class DeclineBody(StrictBody):
    reason: Annotated[str, StringConstraints(max_length=4000)] | None = None


class InteractionResponse(BaseModel):
    id: uuid.UUID
    companyId: uuid.UUID
    issueId: uuid.UUID
    kind: str
    status: str
    title: str
    summary: str
    payload: dict[str, Any]
    result: dict[str, Any] | None
    addresseeUserId: uuid.UUID | None
    requestingAgentId: uuid.UUID | None
    sourceRunId: uuid.UUID | None
    resolvedByUserId: uuid.UUID | None
    resolvedAt: Moment | None
    createdAt: Moment | None
    updatedAt: Moment | None

    @classmethod
    def of(cls, interaction: ThreadInteraction) -> InteractionResponse:
        return cls(
            id=interaction.id,
            companyId=interaction.company_id,
            issueId=interaction.issue_id,
            kind=interaction.kind,
            status=interaction.status,
            title=interaction.title,
            summary=interaction.summary,
            payload=interaction.payload,
            result=interaction.result,
            addresseeUserId=interaction.addressee_user_id,
            requestingAgentId=interaction.requesting_agent_id,
            sourceRunId=interaction.source_run_id,
            resolvedByUserId=interaction.resolved_by_user_id,
            resolvedAt=interaction.resolved_at,
            createdAt=interaction.created_at,
            updatedAt=interaction.updated_at,
        )


class SetupServiceResponse(DescribedService):
    state: ServiceState
    connectionId: uuid.UUID | None


class ExistingConnectionResponse(BaseModel):
    id: uuid.UUID
    name: str
    status: str
    enabled: bool
    providerAccountLabel: str | None


# `resolution.setup_options` (the card dialog shows the same), with the card.
class SetupOptionsResponse(BaseModel):
    version: Literal[1]
    service: SetupServiceResponse
    existingConnections: list[ExistingConnectionResponse]
    requestedAgentId: str | None
    interaction: InteractionResponse


THE_CARD = {200: Answer("The card", (InteractionResponse,))}
THE_RESOLVED_CARD = {200: Answer("The resolved card", (InteractionResponse,))}


def _addressed_intent(interaction_id: str) -> ThreadInteraction:
    """Load (404) -> company check (404) -> addressee check (403)."""
    interaction = intents_card.get_connection_card(parse_uuid(interaction_id))
    membership_for(interaction.company_id)
    cards.assert_may_answer(interaction, current_user.id)
    return interaction


@bp.get("/connection-intents/<interaction_id>/setup-options")
@documented(
    "What the addressed person needs to answer a connection card",
    tag="intents",
    security=BOARD_READ,
    responses={
        200: Answer("Setup options", (SetupOptionsResponse,)),
        **READ_ANSWERS,
        403: error("The card is addressed to someone else"),
    },
)
def intent_setup_options(interaction_id: str) -> ResponseReturnValue:
    interaction = _addressed_intent(interaction_id)
    options = resolution.setup_options(interaction)
    return respond(
        SetupOptionsResponse.model_validate({**options, "interaction": InteractionResponse.of(interaction)})
    )


@bp.post("/connection-intents/<interaction_id>/phase")
@board_write("Record the setup phase the addressed person is in", "intents", PhaseBody, THE_CARD)
def intent_phase(interaction_id: str) -> ResponseReturnValue:
    interaction = _addressed_intent(interaction_id)
    body = parse_body(PhaseBody)
    updated = resolution.set_phase(interaction.id, current_user.id, body.phase or "")
    return respond(InteractionResponse.of(updated))


@bp.post("/connection-intents/<interaction_id>/complete")
@board_write("Answer a card with a connection (wakes the agent)", "intents", CompleteBody, THE_RESOLVED_CARD)
def intent_complete(interaction_id: str) -> ResponseReturnValue:
    interaction = _addressed_intent(interaction_id)
    body = parse_body(CompleteBody)
    resolved = resolution.complete_intent(interaction.id, current_user.id, body.connectionId)
    after_commit(lambda: deliver_continuation(resolved.id))
    return respond(InteractionResponse.of(resolved))


@bp.post("/connection-intents/<interaction_id>/decline")
@board_write("Decline a card (wakes the agent)", "intents", DeclineBody, THE_RESOLVED_CARD)
def intent_decline(interaction_id: str) -> ResponseReturnValue:
    interaction = _addressed_intent(interaction_id)
    body = parse_body(DeclineBody)
    resolved = resolution.decline_intent(interaction.id, current_user.id, body.reason)
    after_commit(lambda: deliver_continuation(resolved.id))
    return respond(InteractionResponse.of(resolved))
