"""WTForms for the Apps pages with fixed shapes. The setup flow and configuration fields are declared by the app
definition, so those are read by `setup_flow.read_submission` / `permissions.read_config` and validated by the
connection service, which owns the field rules."""

from flask_wtf import FlaskForm
from wtforms import (
    BooleanField,
    HiddenField,
    IntegerField,
    StringField,
    TextAreaField,
)
from wtforms.validators import AnyOf, DataRequired, Length, NumberRange, Optional

from app.models.connections import ToolAction

EDITOR_ACTIONS = ("toggle", "edit", "cancel", "save", "reset")
ACTION_LABELS = {"allow": "Allow", "ask_first": "Ask first", "block": "Block"}


class InstructionsEditorForm(FlaskForm):
    """The Agent instructions editor. Only the shape is checked here; the instructions service owns the limits."""

    enabled = BooleanField()
    # Generous shape limit; the 2,000-character rule (after trimming) is the service's and is reported inline.
    text = TextAreaField(validators=[Optional(), Length(max=20000)])
    template_id = HiddenField(validators=[Optional(), Length(max=160)])
    template_version = IntegerField(validators=[Optional(), NumberRange(min=1)])
    editing = HiddenField()
    action = StringField(validators=[DataRequired(), AnyOf(EDITOR_ACTIONS)])


class ToolPolicyForm(FlaskForm):
    tool = HiddenField(validators=[DataRequired(), Length(max=200)])
    action = StringField(validators=[DataRequired(), AnyOf(ToolAction.values())])
    pinned = BooleanField()  # listed by itself beside the meta tools (`gateway.meta_tools`)


class AudienceForm(FlaskForm):
    audience = StringField(default="all", validators=[Optional(), AnyOf(("all", "selected"))])
    # Agent choices are checked by the service (agents of this company); here only the shape is read.
