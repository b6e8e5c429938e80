"""A connection's Permissions page: Agent access, provider configuration, Agent instructions, Actions.

Each section is a self-contained component (its own partial, id and endpoint). An htmx save returns the component
alone; without JavaScript a save answers 303 back to the page, and a failed save re-renders the page with the
component's draft and its error (422, or 403 when the person may not configure the connection).
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from flask import abort, redirect, render_template, request, url_for
from flask.typing import ResponseReturnValue
from markupsafe import Markup
from werkzeug.datastructures import MultiDict

from app.catalog.loader import get_app, get_method, logo_url
from app.catalog.schema import AppDefinition, ConfigField
from app.core.errors import Forbidden, Unprocessable, ValidationFailed
from app.extensions import db, htmx
from app.models import Membership, ToolConnection
from app.services.access.effective import CONFIGURE_FORBIDDEN, can_configure, tools_with_policies
from app.services.agents import agent_names
from app.services.connections.audience import Audience, audience_of
from app.services.connections.instructions import instruction_context
from app.services.connections.settings import public_fields, update_connection
from app.services.connections.tool_index import index_limits_notes
from app.services.gateway.limits import LimitsState, limits_state
from app.web.apps import bp, trust
from app.web.apps.forms import ACTION_LABELS, AudienceForm, ToolPolicyForm
from app.web.apps.instructions_state import EditorState, editor_state
from app.web.context import load_scoped

CONFIG_PREFIX = "config-"

# static/js/app.js swaps a 403 inside an element so marked (an attribute, not an `hx-on` handler: that is code in the
# page, which the Content-Security-Policy does not allow).
SWAP_FORBIDDEN = Markup("data-swap-forbidden")


@bp.app_template_global("swap_forbidden")
def swap_forbidden() -> Markup:
    """The attribute that lets a component swap its own 403 answer too (the page-wide htmx config swaps only 2xx
    and 422), so a refused save shows its reason inline and keeps the draft. A template global rather than a
    macro: importing a macro in the tool row partial built the macro module again for every row (~40% of the
    Permissions page's rendering)."""
    return SWAP_FORBIDDEN


@dataclass
class AccessState:
    audience: Audience
    agents: list
    errors: list[str] = field(default_factory=list)
    saved: bool = False

    @property
    def selected_agent_ids(self) -> frozenset[str]:
        return self.audience.agent_id_texts


@dataclass
class ConfigState:
    fields: list
    values: dict
    errors: dict[str, str] = field(default_factory=dict)
    saved: bool = False
    missing_note: str | None = None


def _article(noun: str) -> str:
    return "an" if noun[:1].lower() in "aeiou" else "a"


def _noun(label: str, app_name: str) -> str:
    """ "Honcho workspace" for the app Honcho reads as "workspace"; acronyms ("URL") keep their case."""
    noun = label[len(app_name) :].strip() if label.lower().startswith(app_name.lower() + " ") else label
    if len(noun) > 1 and not noun[1].isupper():
        noun = noun[0].lower() + noun[1:]
    return f"{_article(noun)} {noun}"


def missing_config_note(connection: ToolConnection, app_definition: AppDefinition | None) -> str | None:
    """The amber note shown while a required public field is missing (agents then get no standing instructions)."""
    if app_definition is None or instruction_context(app_definition, connection.config) is not None:
        return None
    method = get_method(app_definition, connection.method_key)
    values = connection.method_config
    missing = [
        f
        for f in public_fields(method)
        if f.required and f.is_public and not str(values.get(f.key, f.defaultValue) or "").strip()
    ]
    if not missing:
        return None
    nouns = " and ".join(_noun(f.label, app_definition.name) for f in missing)
    if connection.agent_instructions is not None or app_definition.agentInstructions is not None:
        return (
            f"Enter {nouns} to include {app_definition.name} instructions. Existing tools remain available."
        )
    return f"Enter {nouns} to complete this connection’s configuration. Existing tools remain available."


def access_state(connection: ToolConnection, **kwargs: Any) -> AccessState:
    kwargs.setdefault("audience", audience_of(connection))
    return AccessState(agents=agent_names(connection.company_id), **kwargs)


def config_state(
    connection: ToolConnection, app_definition: AppDefinition | None, **kwargs: Any
) -> ConfigState:
    method = get_method(app_definition, connection.method_key) if app_definition else None
    fields = public_fields(method) if method else []
    kwargs.setdefault("values", connection.method_config)
    return ConfigState(fields=fields, missing_note=missing_config_note(connection, app_definition), **kwargs)


def load_connection(connection_id: str) -> tuple[ToolConnection, Membership, AppDefinition | None]:
    connection, membership = load_scoped(ToolConnection, connection_id)
    if connection.status == "archived":
        abort(404)
    return connection, membership, get_app(connection.app_slug)


def require_configure(membership: Membership, connection: ToolConnection) -> None:
    if not can_configure(membership, connection):
        raise Forbidden(CONFIGURE_FORBIDDEN)


def page_context(
    connection: ToolConnection,
    membership: Membership,
    app_definition: AppDefinition | None,
    *,
    access: AccessState | None = None,
    config: ConfigState | None = None,
    editor: EditorState | None = None,
    just_connected: bool = False,
    limits: LimitsState | None = None,
    **answers: Any,
) -> dict:
    """The page's context; `answers` are the explainer's and the dry run's (`explain`), when one was asked."""
    configure = can_configure(membership, connection)
    if editor is None:
        editor = editor_state(connection, app_definition, can_edit=configure)
    return {
        "connection": connection,
        "app_definition": app_definition,
        "logo": logo_url(app_definition) if app_definition else None,
        "method": get_method(app_definition, connection.method_key) if app_definition else None,
        "can_configure": configure,
        "access": access or access_state(connection),
        "config": config or config_state(connection, app_definition),
        "editor": editor,
        "tools": tools_with_policies([connection.id]).get(connection.id, []),
        "index_notes": index_limits_notes(connection),
        "action_labels": ACTION_LABELS,
        "just_connected": just_connected,
        "limits": limits or limits_state(connection),
        **trust.trust_context(connection, membership),  # changed tools and trust rules
        **answers,
    }


def render_page(
    connection: ToolConnection,
    membership: Membership,
    app_definition: AppDefinition | None,
    status: int = 200,
    **states: Any,
) -> ResponseReturnValue:
    return render_template(
        "apps/permissions.html", **page_context(connection, membership, app_definition, **states)
    ), status


def back_to_page(connection: ToolConnection) -> ResponseReturnValue:
    return redirect(url_for("apps.permissions", connection_id=connection.id), code=303)


@bp.get("/apps/<connection_id>/permissions")
def permissions(connection_id: str) -> ResponseReturnValue:
    connection, membership, app_definition = load_connection(connection_id)
    # After a finished setup (`?done=connected`, a fixed key: nothing typed is echoed) the page says what happened.
    connected = request.args.get("done") == "connected" and connection.status == "active"
    return render_page(connection, membership, app_definition, just_connected=connected)


def read_audience(form: MultiDict[str, str]) -> Audience:
    if form.get("audience") != "selected":
        return Audience(all_agents=True)
    ids = []
    for value in form.getlist("agent_ids"):
        try:
            ids.append(uuid.UUID(value))
        except ValueError:
            continue
    return Audience(False, tuple(dict.fromkeys(ids)))


@bp.post("/apps/<connection_id>/audience")
def save_audience(connection_id: str) -> ResponseReturnValue:
    connection, membership, app_definition = load_connection(connection_id)
    form = AudienceForm()
    audience = read_audience(request.form)
    status, errors = 200, []
    if not form.validate():
        status, errors = 422, ["Choose All agents or Selected agents."]
    else:
        try:
            update_connection(membership, connection, app_definition, audience=audience)
        except ValidationFailed as err:
            status, errors = 422, [d["msg"] for d in err.details]
        except Forbidden as err:
            status, errors = 403, [err.message]
    if status == 200:
        if not htmx:
            return back_to_page(connection)
        state = access_state(connection, saved=True)
    else:
        db.session.rollback()
        state = access_state(connection, audience=audience, errors=errors)
    if htmx:
        return render_template(
            "apps/_agent_access.html", connection=connection, access=state, can_configure=True
        ), status
    return render_page(connection, membership, app_definition, status, access=state)


def read_config(form: MultiDict[str, str], fields: Iterable[ConfigField]) -> dict:
    values: dict = {}
    for f in fields:
        name = CONFIG_PREFIX + f.key
        if f.type == "checkbox":
            values[f.key] = form.get(name) in ("on", "true", "1")
        elif name in form:
            values[f.key] = form.get(name, "")
    return values


@bp.post("/apps/<connection_id>/configuration")
def save_configuration(connection_id: str) -> ResponseReturnValue:
    connection, membership, app_definition = load_connection(connection_id)
    if app_definition is None:
        abort(404)
    fields = config_state(connection, app_definition).fields
    values = read_config(request.form, fields)
    status, errors = 200, {}
    try:
        update_connection(membership, connection, app_definition, method_config=values)
    except ValidationFailed as err:
        status, errors = 422, err.field_messages()
    except Forbidden as err:
        status, errors = 403, {"": err.message}
    if status == 200:
        if not htmx:
            return back_to_page(connection)
        state = config_state(connection, app_definition, saved=True)
    else:
        db.session.rollback()
        state = config_state(connection, app_definition, values=values, errors=errors)
    if htmx:
        return render_template(
            "apps/_configuration.html", connection=connection, config=state, can_configure=True
        ), status
    return render_page(connection, membership, app_definition, status, config=state)


@bp.post("/apps/<connection_id>/tools/policy")
def save_tool_policy(connection_id: str) -> ResponseReturnValue:
    connection, membership, app_definition = load_connection(connection_id)
    form = ToolPolicyForm()
    tools = {t.tool.name: t for t in tools_with_policies([connection.id]).get(connection.id, [])}
    tool = tools.get(form.tool.data or "")
    if tool is None:
        abort(404)
    status, error = 200, ""
    if not form.validate():
        status, error = 422, "Choose Allow, Ask first or Block."
    else:
        try:
            update_connection(
                membership,
                connection,
                app_definition,
                tool_policies={tool.tool.name: form.action.data},
                pinned_tools={tool.tool.name: bool(form.pinned.data)},
            )
        except ValidationFailed as err:
            status, error = 422, "; ".join(d["msg"] for d in err.details)
        except Forbidden as err:
            status, error = 403, err.message
    if status == 200:
        if not htmx:
            return back_to_page(connection)
        rows = tools_with_policies([connection.id])[connection.id]
        tool = next(t for t in rows if t.tool.name == form.tool.data)
    else:
        db.session.rollback()
    if htmx:
        return render_template(
            "apps/_tool_row.html",
            connection=connection,
            tools=[tool],
            can_configure=True,
            action_labels=ACTION_LABELS,
            saved=status == 200,
            error=error,
        ), status
    raise (Forbidden(error) if status == 403 else Unprocessable(error))
