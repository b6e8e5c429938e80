"""The state of the Agent instructions editor: the saved value, the person's draft, and what the editor offers.

The draft travels in the editor's form on every request, so the server decides (from the draft and the saved value)
whether Cancel / Save instructions, Reset to default and the empty-text alert are shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, TypeGuard

from app.catalog.loader import template_default
from app.catalog.schema import AppDefinition
from app.core.errors import NotFound
from app.models import ToolConnection
from app.services.connections.instructions import (
    INSTRUCTIONS_MAX_LENGTH,
    differs_from_template,
    editor_saved_value,
)


@dataclass
class EditorState:
    app: AppDefinition
    connection: ToolConnection
    saved: dict
    enabled: bool
    text: str
    template: dict | None
    editing: bool = False
    can_edit: bool = False
    error: str | None = None
    saved_message: str | None = None
    reset_pending: bool = False  # the default text was just put back as a draft: say it still needs saving
    focus_text: bool = False
    max_length: int = INSTRUCTIONS_MAX_LENGTH

    @property
    def app_name(self) -> str:
        return self.app.name

    @property
    def draft(self) -> dict:
        value: dict = {"enabled": self.enabled, "text": self.text.strip()}
        if self.template is not None:
            value["template"] = self.template
        return value

    @property
    def is_empty(self) -> bool:
        return not self.text.strip()

    @property
    def length(self) -> int:
        return len(self.text.strip())

    @property
    def is_too_long(self) -> bool:
        """Over the limit: the text is kept as typed (never cut) and Save waits until it fits."""
        return self.length > self.max_length

    @property
    def is_dirty(self) -> bool:
        saved = self.saved
        return (
            self.text.strip() != (saved.get("text") or "").strip()
            or self.template != saved.get("template")
            or self.enabled != bool(saved.get("enabled"))
        )

    @property
    def can_reset(self) -> bool:
        return differs_from_template(self.draft, self.app)

    def value_to_save(self) -> dict:
        """`{enabled, text, template?}`: the template provenance stays only while the text is still that template's
        text (the current template's, or the saved one's); custom text has no template."""
        text = self.text.strip()
        value: dict = {"enabled": self.enabled, "text": self.text}
        if self.template is not None:
            current = template_default(self.app)
            still_template = (
                current is not None and self.template == current["template"] and text == current["text"]
            ) or (
                self.template == self.saved.get("template") and text == (self.saved.get("text") or "").strip()
            )
            if still_template:
                value["template"] = self.template
        return value


def has_editor(app_definition: AppDefinition | None) -> TypeGuard[AppDefinition]:
    """The editor appears only when the app declares an explicit instructions template."""
    return app_definition is not None and template_default(app_definition) is not None


def editor_state(
    connection: ToolConnection, app_definition: AppDefinition | None, *, can_edit: bool, **kwargs: Any
) -> EditorState | None:
    """The editor showing the saved value (None when the app has no template, so no editor is rendered)."""
    if not has_editor(app_definition):
        return None
    saved = editor_start_value(connection, app_definition)
    return EditorState(
        app=app_definition,
        connection=connection,
        saved=saved,
        enabled=bool(saved.get("enabled")),
        text=saved.get("text") or "",
        template=saved.get("template"),
        can_edit=can_edit,
        **kwargs,
    )


def require_editor_state(
    connection: ToolConnection, app_definition: AppDefinition | None, *, can_edit: bool, **kwargs: Any
) -> EditorState:
    """`editor_state` for a request to the editor itself: an app without an editor has no such page."""
    state = editor_state(connection, app_definition, can_edit=can_edit, **kwargs)
    if state is None:
        raise NotFound("This app has no instructions editor")
    return state


def editor_start_value(connection: ToolConnection, app_definition: AppDefinition | None) -> dict:
    """The value the editor starts from; an app with an editor has a template, so there always is one."""
    saved = editor_saved_value(connection.agent_instructions, app_definition)
    if saved is None:
        raise NotFound("This app has no instructions editor")
    return saved
