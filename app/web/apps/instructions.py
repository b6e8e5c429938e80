"""The Agent instructions editor endpoint: one POST taking the draft and an action (toggle, edit, cancel, save,
reset). The toggle and Save instructions write through `update_connection`; the other actions only change the draft.
"""

from __future__ import annotations

from flask import abort, render_template
from flask.typing import ResponseReturnValue

from app.catalog.schema import AppDefinition
from app.core.errors import Forbidden, ValidationFailed
from app.extensions import db, htmx
from app.models import Membership, ToolConnection
from app.services.access.effective import CONFIGURE_FORBIDDEN, can_configure
from app.services.connections.instructions import INSTRUCTIONS_MAX_LENGTH, reset_to_template
from app.services.connections.settings import update_connection
from app.web.apps import bp
from app.web.apps.forms import InstructionsEditorForm
from app.web.apps.instructions_state import (
    EditorState,
    editor_start_value,
    has_editor,
    require_editor_state,
)
from app.web.apps.permissions import back_to_page, load_connection, render_page

SAVE_FAILED = "Couldn’t save instructions. Try again."


def failure_reason(err: ValidationFailed) -> str:
    reasons = []
    for detail in err.details:
        kind = detail.get("type", "")
        if kind == "string_too_long":
            reasons.append(f"Instructions are limited to {INSTRUCTIONS_MAX_LENGTH:,} characters.")
        elif kind == "string_too_short":
            reasons.append("Enter instructions.")
        else:
            reasons.append(detail.get("msg", "Invalid value."))
    return " ".join(dict.fromkeys(reasons))


def draft_from_form(
    form: InstructionsEditorForm, connection: ToolConnection, app_definition: AppDefinition
) -> EditorState:
    template = None
    if form.template_id.data and form.template_version.data:
        template = {"id": form.template_id.data, "version": form.template_version.data}
    return EditorState(
        app=app_definition,
        connection=connection,
        saved=editor_start_value(connection, app_definition),
        enabled=bool(form.enabled.data),
        text=form.text.data or "",
        template=template,
        editing=form.editing.data == "1",
        can_edit=True,
    )


def _save(
    membership: Membership,
    connection: ToolConnection,
    app_definition: AppDefinition | None,
    state: EditorState,
    value: dict,
) -> int:
    """Write the setting; on failure keep the draft in `state` with the error, and answer its status."""
    try:
        update_connection(membership, connection, app_definition, agent_instructions=value)
    except ValidationFailed as err:
        db.session.rollback()
        state.error = f"{SAVE_FAILED} {failure_reason(err)}"
        return 422
    except Forbidden as err:
        db.session.rollback()
        state.error = f"{SAVE_FAILED} {err.message}"
        return 403
    return 200


@bp.post("/apps/<connection_id>/instructions")
def instructions_editor(connection_id: str) -> ResponseReturnValue:
    connection, membership, app_definition = load_connection(connection_id)
    if not has_editor(app_definition):
        abort(404)
    form = InstructionsEditorForm()
    if not form.validate():
        if form.action.errors:
            abort(400)
        state = draft_from_form(form, connection, app_definition)
        state.editing = True
        state.error = f"{SAVE_FAILED} Instructions are limited to {INSTRUCTIONS_MAX_LENGTH:,} characters."
        return _respond(connection, membership, app_definition, state, 422)
    state = draft_from_form(form, connection, app_definition)
    action = form.action.data
    status = 200
    wrote = False
    if not can_configure(membership, connection):
        state.error = f"{SAVE_FAILED} {CONFIGURE_FORBIDDEN}"
        status = 403
    elif action == "toggle":
        value = {**state.saved, "enabled": state.enabled}
        status = _save(membership, connection, app_definition, state, value)
        if status == 200:
            wrote = True
            state.saved = editor_start_value(connection, app_definition)
    elif action == "edit":
        state.focus_text = not state.editing
        state.editing = True
    elif action == "cancel":
        state = require_editor_state(connection, app_definition, can_edit=True)
    elif action == "reset":
        adopted = reset_to_template(state.draft, app_definition)
        state.text, state.template = adopted["text"], adopted.get("template")
        state.reset_pending = True
    elif action == "save":
        status = _save(membership, connection, app_definition, state, state.value_to_save())
        if status == 200:
            wrote = True
            state = require_editor_state(
                connection, app_definition, can_edit=True, saved_message="Instructions saved."
            )
    if wrote and not htmx:
        return back_to_page(connection)
    return _respond(connection, membership, app_definition, state, status)


def _respond(
    connection: ToolConnection,
    membership: Membership,
    app_definition: AppDefinition | None,
    state: EditorState,
    status: int,
) -> ResponseReturnValue:
    if htmx:
        return render_template("apps/_instructions_editor.html", editor=state), status
    return render_page(connection, membership, app_definition, status, editor=state)
