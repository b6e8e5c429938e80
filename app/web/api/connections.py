"""Board API for tool connections: connect (start + optional finish), finish/reconnect, patch, list, read."""

from __future__ import annotations

import uuid
from typing import Annotated, Any, Literal

from flask import abort, jsonify
from flask.typing import ResponseReturnValue
from pydantic import BaseModel, ConfigDict, Field, StrictBool, StrictInt, StringConstraints

from app.catalog.loader import get_app
from app.catalog.schema import AppDefinition
from app.core.errors import NotFound, ProviderRefused
from app.extensions import db
from app.models import Membership, ThreadInteraction, ToolConnection
from app.services.access.effective import ToolAccess, tools_with_policies
from app.services.connections.audience import Audience, audience_of
from app.services.connections.settings import UNSET, Unset, list_connections, update_connection
from app.services.connections.setup import record_setup_failed, start_connection
from app.services.intents import card as intents_card
from app.services.intents import resolution
from app.services.intents import setup as intent_setup
from app.services.management import lifecycle
from app.web.api import bp
from app.web.api.validation import Omittable, StrictBody, parse_body
from app.web.context import load_scoped, membership_for, parse_uuid
from app.web.unit_of_work import Reason, after_commit, commit_point
from app.workers.continuations import deliver as deliver_continuation

ShortText = Annotated[str, StringConstraints(strip_whitespace=True, max_length=2000)]
# A method config value: text, a flag, or null (which clears the setting). Booleans are never coerced from text.
ConfigValue = ShortText | StrictBool | None


class AudienceBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    allAgents: StrictBool = True
    agentIds: list[uuid.UUID] = Field(default_factory=list, max_length=500)

    def to_audience(self) -> Audience:
        return Audience(self.allAgents, tuple(dict.fromkeys(self.agentIds)))


class TemplateRefBody(BaseModel):
    model_config = ConfigDict(extra="forbid")

    id: str
    version: StrictInt


class InstructionsBody(BaseModel):
    """Shape check only; the instructions service owns the rules (trimming, 1-2000 characters)."""

    model_config = ConfigDict(extra="forbid")

    enabled: StrictBool
    text: str = Field(max_length=20000)
    template: TemplateRefBody | None = None


class ConnectBody(StrictBody):
    appSlug: Annotated[str, StringConstraints(min_length=1, max_length=80)]
    methodKey: Annotated[str, StringConstraints(min_length=1, max_length=80)] | None = None
    name: Annotated[str, StringConstraints(max_length=200)] | None = None
    identity: Literal["organization", "user"] = "user"
    credentials: dict[str, ShortText] = Field(default_factory=dict, max_length=20)
    methodConfig: dict[str, ConfigValue] = Field(default_factory=dict, max_length=50)
    audience: AudienceBody | None = None
    agentInstructions: InstructionsBody | None = None
    # A pending card to resolve when this draft is finished: the audience is saved on the card (default: the
    # requesting agent only), never on the draft.
    interactionId: uuid.UUID | None = None


class FinishBody(StrictBody):
    """Fields left out keep their saved values; only `agentInstructions` may be null (no instructions)."""

    credentials: dict[str, ShortText] = Field(default_factory=dict, max_length=20)
    methodConfig: dict[str, ConfigValue] = Omittable(max_length=50)
    audience: AudienceBody = Omittable()
    agentInstructions: InstructionsBody | None = None


class PatchBody(StrictBody):
    """Fields left out are unchanged; only `agentInstructions` may be null (removes the instructions)."""

    # At least one field (the service refuses an empty change); said here so the document says it too.
    model_config = ConfigDict(json_schema_extra={"minProperties": 1})

    name: Annotated[str, StringConstraints(max_length=200)] = Omittable()
    enabled: StrictBool = Omittable()
    agentInstructions: InstructionsBody | None = None
    methodConfig: dict[str, ConfigValue] = Omittable(max_length=50)
    audience: AudienceBody = Omittable()
    toolPolicies: dict[str, Literal["allow", "ask_first", "block"]] = Omittable(max_length=2000)


def _instructions_arg(body: ConnectBody | FinishBody | PatchBody) -> dict | None | Unset:
    """UNSET when the field was not sent; None (no instructions) when sent as null; the setting otherwise."""
    if "agentInstructions" not in body.model_fields_set:
        return UNSET
    value = body.agentInstructions
    return None if value is None else value.model_dump(exclude_none=True)


def connection_json(connection: ToolConnection, tools: list[ToolAccess] | None = None) -> dict:
    tools = tools if tools is not None else tools_with_policies([connection.id]).get(connection.id, [])
    config = connection.config or {}
    return {
        "id": str(connection.id),
        "companyId": str(connection.company_id),
        "appSlug": connection.app_slug,
        "name": connection.name,
        "status": connection.status,
        "enabled": connection.enabled,
        "healthStatus": connection.health_status,
        "authKind": connection.auth_kind,
        "identity": config.get("identity"),
        "config": {
            "connectionMethodKey": config.get("connectionMethodKey"),
            "methodConfig": config.get("methodConfig") or {},
        },
        "agentInstructions": connection.agent_instructions,
        "providerAccountLabel": connection.provider_account_label,
        "audience": audience_of(connection).to_json(),
        "createdByUserId": str(connection.created_by_user_id) if connection.created_by_user_id else None,
        "tools": [
            {
                "name": t.tool.name,
                "description": t.tool.description,
                "isWrite": t.tool.is_write,
                "action": t.action,
            }
            for t in tools
        ],
    }


def _app_or_404(slug: str) -> AppDefinition:
    app_definition = get_app(slug)
    if app_definition is None:
        raise NotFound(f"Unknown app: {slug}")
    return app_definition


@bp.post("/companies/<company_id>/tools/apps/connect")
def connect_app(company_id: str) -> ResponseReturnValue:
    membership = membership_for(parse_uuid(company_id))
    body = parse_body(ConnectBody)
    app_definition = _app_or_404(body.appSlug)
    card = _card_for_draft(body.interactionId, membership)
    connection = start_connection(
        membership,
        app_definition,
        method_key=body.methodKey,
        identity=body.identity,
        name=body.name,
        method_config=body.methodConfig,
        audience=intent_setup.NO_AUDIENCE if card else (body.audience or AudienceBody()).to_audience(),
        agent_instructions=_instructions_arg(body),
    )
    if card is not None:
        requester = resolution.requester_of(card)
        audience = (
            body.audience.to_audience()
            if body.audience
            else Audience(False, (requester,) if requester is not None else ())
        )
        intent_setup.save_card_audience(card.id, membership, connection, audience)
    commit_point(Reason.DRAFT_BEFORE_VERIFY)
    if body.credentials:
        try:
            resolved = intent_setup.finish_setup(
                membership, connection, app_definition, credentials=body.credentials
            )
        except ProviderRefused as err:
            db.session.rollback()
            record_setup_failed(membership, connection, err.message)
            commit_point(Reason.SETUP_FAILURE_RECORDED)
            return jsonify({"error": err.message, "connectionId": str(connection.id)}), 422
        except intent_setup.CardCompletionFailed as err:
            return _card_refused(err, connection, membership)
        if resolved is not None:
            after_commit(lambda: deliver_continuation(resolved.id))
    return jsonify(connection_json(connection)), 201


def _card_for_draft(interaction_id: uuid.UUID | None, membership: Membership) -> ThreadInteraction | None:
    """The pending card a new draft is for: the caller's own, in this company (404 otherwise)."""
    if interaction_id is None:
        return None
    card = db.session.get(ThreadInteraction, interaction_id)
    if (
        card is None
        or card.kind != intents_card.KIND
        or card.company_id != membership.company_id
        or card.addressee_user_id != membership.user_id
    ):
        raise NotFound("Connection intent not found")
    return card


def _card_refused(
    err: intent_setup.CardCompletionFailed, connection: ToolConnection, membership: Membership
) -> ResponseReturnValue:
    """The card refused this connection: nothing of the finish is kept, the card asks to try again."""
    db.session.rollback()
    intent_setup.mark_needs_retry(err.interaction_id, membership.user_id)
    commit_point(Reason.CARD_NEEDS_RETRY)
    return jsonify({"error": err.message, "connectionId": str(connection.id)}), 409


@bp.post("/companies/<company_id>/tools/apps/<connection_id>/finish")
def finish_app(company_id: str, connection_id: str) -> ResponseReturnValue:
    connection, membership = load_scoped(ToolConnection, connection_id)
    if connection.company_id != parse_uuid(company_id):
        abort(404)
    body = parse_body(FinishBody)
    try:
        resolved = intent_setup.finish_setup(
            membership,
            connection,
            _app_or_404(connection.app_slug),
            credentials=body.credentials,
            method_config=body.methodConfig if "methodConfig" in body.model_fields_set else UNSET,
            audience=body.audience.to_audience() if body.audience is not None else UNSET,
            agent_instructions=_instructions_arg(body),
        )
    except ProviderRefused as err:
        db.session.rollback()
        record_setup_failed(membership, connection, err.message)
        commit_point(Reason.SETUP_FAILURE_RECORDED)
        raise
    except intent_setup.CardCompletionFailed as err:
        return _card_refused(err, connection, membership)
    if resolved is not None:
        after_commit(lambda: deliver_continuation(resolved.id))
    return jsonify(connection_json(connection))


@bp.patch("/tool-connections/<connection_id>")
def patch_connection(connection_id: str) -> ResponseReturnValue:
    connection, membership = load_scoped(ToolConnection, connection_id)
    body = parse_body(PatchBody)
    sent = body.model_fields_set

    def arg(name: str, value: Any) -> Any:
        return value if name in sent else UNSET

    update_connection(
        membership,
        connection,
        get_app(connection.app_slug),
        name=arg("name", body.name),
        enabled=arg("enabled", body.enabled),
        agent_instructions=_instructions_arg(body),
        method_config=arg("methodConfig", body.methodConfig),
        audience=body.audience.to_audience() if body.audience is not None else UNSET,
        tool_policies=arg("toolPolicies", body.toolPolicies),
    )
    return jsonify(connection_json(connection))


@bp.get("/companies/<company_id>/tool-connections")
def list_company_connections(company_id: str) -> ResponseReturnValue:
    membership = membership_for(parse_uuid(company_id))
    connections = list_connections(membership.company_id)
    tools = tools_with_policies([c.id for c in connections]) if connections else {}
    return jsonify({"connections": [connection_json(c, tools.get(c.id, [])) for c in connections]})


@bp.get("/tool-connections/<connection_id>")
def get_connection(connection_id: str) -> ResponseReturnValue:
    connection, _membership = load_scoped(ToolConnection, connection_id)
    return jsonify(connection_json(connection))


@bp.delete("/tool-connections/<connection_id>")
def delete_connection(connection_id: str) -> ResponseReturnValue:
    connection, membership = load_scoped(ToolConnection, connection_id)
    lifecycle.delete_connection(membership, connection)
    return "", 204


@bp.post("/tool-connections/<connection_id>/disconnect")
def disconnect_connection(connection_id: str) -> ResponseReturnValue:
    connection, membership = load_scoped(ToolConnection, connection_id)
    lifecycle.disconnect_connection(membership, connection)
    return jsonify(connection_json(connection))
