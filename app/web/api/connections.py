"""Board API for tool connections: connect (start + optional finish), finish/reconnect, patch, list, read."""

from __future__ import annotations

import uuid
from typing import Any

from flask import abort
from flask.typing import ResponseReturnValue

from app.catalog.loader import get_app
from app.catalog.schema import AppDefinition
from app.core.errors import NotFound, ProviderRefused
from app.extensions import db
from app.models import Membership, ThreadInteraction, ToolConnection
from app.services import cards
from app.services.connections.audience import Audience
from app.services.connections.settings import UNSET, Unset, list_connections, update_connection
from app.services.connections.setup import start_connection
from app.services.intents import card as intents_card
from app.services.intents import resolution
from app.services.intents import setup as intent_setup
from app.services.management import lifecycle
from app.web.api import bp
from app.web.api.connection_models import (
    AudienceBody,
    ConnectBody,
    ConnectionListResponse,
    ConnectionResponse,
    FinishBody,
    PatchBody,
)
from app.web.api.validation import conflicts_with_state, parse_body
from app.web.context import load_scoped, membership_for, parse_uuid
from app.web.openapi.operations import (
    BOARD_WRITE,
    SETUP_REFUSED,
    STATE_CONFLICT,
    WRITE_ANSWERS,
    Answer,
    board_read,
    board_write,
    documented,
    error,
)
from app.web.openapi.responses import ConnectRefusedResponse, respond
from app.web.unit_of_work import Reason, after_commit, commit_point
from app.workers.continuations import deliver as deliver_continuation


def _instructions_arg(body: ConnectBody | FinishBody | PatchBody) -> dict | None | Unset:
    """UNSET when the field was not sent; None (no instructions) when sent as null; the setting otherwise."""
    if "agentInstructions" not in body.model_fields_set:
        return UNSET
    value = body.agentInstructions
    return None if value is None else value.model_dump(exclude_none=True)


def _app_or_404(slug: str) -> AppDefinition:
    app_definition = get_app(slug)
    if app_definition is None:
        raise NotFound(f"Unknown app: {slug}")
    return app_definition


THE_CONNECTION = {200: Answer("The connection", (ConnectionResponse,))}


@bp.post("/companies/<company_id>/tools/apps/connect")
@board_write(
    "Start a connection (and finish it when credentials are given)",
    "connections",
    ConnectBody,
    {201: Answer("The connection", (ConnectionResponse,))},
    {409: STATE_CONFLICT, 422: SETUP_REFUSED},
)
def connect_app(company_id: str) -> ResponseReturnValue:
    membership = membership_for(parse_uuid(company_id))
    body = parse_body(ConnectBody)
    with conflicts_with_state():
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
                intent_setup.setup_refused(membership, connection, err)
                commit_point(Reason.SETUP_FAILURE_RECORDED)
                return respond(ConnectRefusedResponse(error=err.message, connectionId=connection.id), 422)
            except intent_setup.CardCompletionFailed as err:
                return _card_refused(err, connection, membership)
            if resolved is not None:
                after_commit(lambda: deliver_continuation(resolved.id))
        return respond(ConnectionResponse.of(connection), 201)


def _card_for_draft(interaction_id: uuid.UUID | None, membership: Membership) -> ThreadInteraction | None:
    """The pending card a new draft is for: the caller's own, in this company (404 otherwise)."""
    if interaction_id is None:
        return None
    card = db.session.get(ThreadInteraction, interaction_id)
    if (
        card is None
        or card.kind != intents_card.KIND
        or card.company_id != membership.company_id
        or not cards.is_addressee(card, membership.user_id)
    ):
        raise cards.not_found(intents_card.KIND)
    return card


def _card_refused(
    err: intent_setup.CardCompletionFailed, connection: ToolConnection, membership: Membership
) -> ResponseReturnValue:
    """The card refused this connection: nothing of the finish is kept, the card asks to try again."""
    db.session.rollback()
    intent_setup.mark_needs_retry(err.interaction_id, membership.user_id, "completion_refused")
    commit_point(Reason.CARD_NEEDS_RETRY)
    return respond(ConnectRefusedResponse(error=err.message, connectionId=connection.id), 409)


@bp.post("/companies/<company_id>/tools/apps/<connection_id>/finish")
@board_write(
    "Finish or reconnect a connection", "connections", FinishBody, THE_CONNECTION, {409: STATE_CONFLICT}
)
def finish_app(company_id: str, connection_id: str) -> ResponseReturnValue:
    connection, membership = load_scoped(ToolConnection, connection_id)
    if connection.company_id != parse_uuid(company_id):
        abort(404)
    body = parse_body(FinishBody)
    try:
        with conflicts_with_state():
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
        intent_setup.setup_refused(membership, connection, err)
        commit_point(Reason.SETUP_FAILURE_RECORDED)
        raise
    except intent_setup.CardCompletionFailed as err:
        return _card_refused(err, connection, membership)
    if resolved is not None:
        after_commit(lambda: deliver_continuation(resolved.id))
    return respond(ConnectionResponse.of(connection))


@bp.patch("/tool-connections/<connection_id>")
@board_write(
    "Change a connection: name, enabled, instructions, method config, audience, tool policies",
    "connections",
    PatchBody,
    THE_CONNECTION,
    {409: STATE_CONFLICT},
)
def patch_connection(connection_id: str) -> ResponseReturnValue:
    connection, membership = load_scoped(ToolConnection, connection_id)
    body = parse_body(PatchBody)
    sent = body.model_fields_set

    def arg(name: str, value: Any) -> Any:
        return value if name in sent else UNSET

    with conflicts_with_state():
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
    return respond(ConnectionResponse.of(connection))


@bp.get("/companies/<company_id>/tool-connections")
@board_read("List a company's tool connections", "connections", ConnectionListResponse)
def list_company_connections(company_id: str) -> ResponseReturnValue:
    membership = membership_for(parse_uuid(company_id))
    connections = list_connections(membership.company_id)
    return respond(ConnectionListResponse.of(connections))


@bp.get("/tool-connections/<connection_id>")
@board_read("Read a connection", "connections", ConnectionResponse)
def get_connection(connection_id: str) -> ResponseReturnValue:
    connection, _membership = load_scoped(ToolConnection, connection_id)
    return respond(ConnectionResponse.of(connection))


@bp.delete("/tool-connections/<connection_id>")
@documented(
    "Delete a connection (a finished one, a disconnected one, or an unfinished setup)",
    description=(
        "Revokes its OAuth tokens at the provider when the provider's metadata names a revocation endpoint "
        "(RFC 7009), then deletes it with its identity grants, credentials, agent access, tool index and "
        "policies. Pending connection cards whose saved setup it was keep waiting without it; pending cards "
        "that ask for this very connection (`connection:<id>`) expire."
    ),
    tag="connections",
    security=BOARD_WRITE,
    responses={
        204: Answer("Deleted; no body"),
        **{status: answer for status, answer in WRITE_ANSWERS.items() if status != 422},
        403: error("The caller may not configure this connection (its creator or a connection manager can)"),
        409: error("Deleting is not allowed now: tool approval requests for it still wait for an answer"),
    },
)
def delete_connection(connection_id: str) -> ResponseReturnValue:
    connection, membership = load_scoped(ToolConnection, connection_id)
    lifecycle.delete_connection(membership, connection)
    return "", 204


@bp.post("/tool-connections/<connection_id>/disconnect")
@board_write(
    "Disconnect a connection: revoke at the provider, delete credentials; settings stay for Reconnect",
    "connections",
    None,
    {200: Answer("The connection, now `disconnected`", (ConnectionResponse,))},
    {409: error("The connection is not connected (an unfinished setup, or already disconnected)")},
)
def disconnect_connection(connection_id: str) -> ResponseReturnValue:
    connection, membership = load_scoped(ToolConnection, connection_id)
    lifecycle.disconnect_connection(membership, connection)
    return respond(ConnectionResponse.of(connection))
