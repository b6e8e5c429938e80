"""The connection card's dialog: which setup it hosts (a new connection of the card's catalog app, or Reconnect of
the service's connection that lost its sign-in) and everything its templates render. The views in `connection.py`
answer with it; the rules stay in the intent and connection services."""

from __future__ import annotations

from typing import Any

from flask import url_for

from app.catalog.loader import get_app
from app.catalog.schema import AppDefinition
from app.extensions import htmx
from app.models import Membership, ThreadInteraction, ToolConnection
from app.services.access.effective import can_manage_connections
from app.services.connections.audience import Audience
from app.services.intents import audience as intents_audience
from app.services.intents import card as intents_card
from app.services.intents import resolution as intents_resolution
from app.services.intents import service as intents_service
from app.services.intents import setup as intent_setup
from app.web.apps.setup_flow import SetupFlow, build_setup_flow
from app.web.cards.connection_view import card_view


def is_fragment() -> bool:
    """An htmx request from the card or its dialog (a boosted navigation wants the full page)."""
    return bool(htmx) and not htmx.boosted


def catalog_app(interaction: ThreadInteraction) -> AppDefinition | None:
    """The app whose setup flow the dialog hosts; configured custom services have no setup (only reuse)."""
    slug = intents_card.intent_payload(interaction).get("serviceSlug", "")
    if intents_service.parse_connection_service(slug) is not None:
        return None
    return get_app(slug)


def dialog_flow(
    interaction: ThreadInteraction, membership: Membership, app_definition: AppDefinition, **kwargs: Any
) -> SetupFlow:
    """The setup flow in the card's dialog. Continue setup restores the saved draft (its method and identity) and
    the audience saved on the card; a person without sharing authority starts from the requesting agent alone."""
    requester = intents_resolution.requester_of(interaction)
    saved = intents_audience.card_audience(interaction)
    if "draft" not in kwargs and "submission" not in kwargs:
        kwargs["draft"] = intent_setup.saved_draft(interaction, membership)
    if saved is not None and kwargs.get("draft") is not None and saved.connection_id == kwargs["draft"].id:
        kwargs.setdefault("audience", saved.audience)
    elif requester is not None and not can_manage_connections(membership):
        kwargs.setdefault("audience", Audience(False, (requester,)))
    flow = build_setup_flow(
        membership,
        app_definition,
        action_url=url_for("intent_cards.setup_submit", interaction_id=interaction.id),
        method_url=url_for("intent_cards.dialog", interaction_id=interaction.id),
        # In the dialog the form is posted and swapped in place; the page host relies on hx-boost.
        hx_target="#setup-flow" if is_fragment() else None,
        **kwargs,
    )
    flow.save_exit = True
    if requester is not None:
        # The requesting agent is always in the audience of a connection made from its card: locked in the form
        # (a hidden input carries it), and a submit without it is refused server-side all the same.
        flow.locked_agent_ids = frozenset({str(requester)})
        if requester not in flow.audience.agent_ids:
            flow.audience = type(flow.audience)(
                flow.audience.all_agents, (*flow.audience.agent_ids, requester)
            )
    return flow


def reconnect_flow(
    interaction: ThreadInteraction,
    membership: Membership,
    app_definition: AppDefinition,
    connection: ToolConnection,
    **kwargs: Any,
) -> SetupFlow:
    return build_setup_flow(
        membership,
        app_definition,
        action_url=url_for(
            "intent_cards.reconnect", interaction_id=interaction.id, connection_id=connection.id
        ),
        mode="reconnect",
        connection=connection,
        hx_target="#setup-flow" if is_fragment() else None,
        **kwargs,
    )


def dialog_context(
    interaction: ThreadInteraction,
    membership: Membership,
    *,
    flow: SetupFlow | None = None,
    error: str | None = None,
    oauth_draft: ToolConnection | None = None,
    **flow_kwargs: Any,
) -> dict[str, Any]:
    options = intents_resolution.setup_options(interaction)
    app_definition = catalog_app(interaction)
    disconnected = (
        intent_setup.reconnectable_connection(interaction, membership, app_definition)
        if flow is None
        else None
    )
    if (
        disconnected is not None
        and app_definition is not None  # implied: only a catalog app has a Disconnected connection to offer
        and oauth_draft is None
        and "submission" not in flow_kwargs
    ):
        flow = reconnect_flow(interaction, membership, app_definition, disconnected)
    if flow is None and app_definition is not None and app_definition.methods and oauth_draft is None:
        flow = dialog_flow(interaction, membership, app_definition, **flow_kwargs)
    return {
        "item": interaction,
        "card": card_view(interaction),
        "options": options,
        "flow": flow,
        "error": error,
        "oauth_draft": oauth_draft,
        "app_definition": app_definition,
        "as_page": not is_fragment(),
    }
