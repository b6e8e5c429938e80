"""WTForms for board pages. Button-only POSTs use EmptyForm so they still carry CSRF."""

from typing import Any

from flask_wtf import FlaskForm
from markupsafe import escape
from wtforms import EmailField, IntegerField, PasswordField, SelectField, StringField, TextAreaField
from wtforms.fields.choices import SelectChoice
from wtforms.validators import DataRequired, Email, Length, NumberRange, Optional
from wtforms.widgets import Select

from app.models.tenancy import Role
from app.models.work import IssueStatus


def strip_text(value: object) -> object:
    """Pasted values often carry surrounding spaces; they are never meaningful in an email address."""
    return value.strip() if isinstance(value, str) else value


class EmptyForm(FlaskForm):
    pass


_OPTION_OPEN = '<option value="'
_OPTION_OPEN_SELECTED = '<option selected value="'


class PickerSelect(Select):
    """wtforms' Select, writing plain options directly: the same markup, without `html_params` per option (a picker
    of a few hundred agents spent most of the task page's rendering there), with the value and label escaped by
    `escape` and joined as text: `Markup.format` (its formatter cost a third of the task page's CPU) and
    `Markup.join` (a Markup per part) took 4.5x and 3x as long per option."""

    @classmethod
    def render_option(cls, choice: SelectChoice, **kwargs: Any) -> str:
        if kwargs or choice.render_kw or isinstance(choice.value, bool):
            return super().render_option(choice, **kwargs)
        opening = _OPTION_OPEN_SELECTED if choice.selected else _OPTION_OPEN
        value, label = escape(choice.value), escape(choice.label or choice.value)
        # Text, not Markup: `Select.__call__` joins the options and makes the whole select Markup once.
        return "".join((opening, value, '">', label, "</option>"))


class LoginForm(FlaskForm):
    email = EmailField("Email", filters=[strip_text], validators=[DataRequired(), Email(), Length(max=320)])
    password = PasswordField("Password", validators=[DataRequired(), Length(max=1000)])


class CommentForm(FlaskForm):
    body = TextAreaField(
        "Comment", validators=[DataRequired(message="Write a comment first."), Length(max=20000)]
    )


class IssueStatusForm(FlaskForm):
    status = SelectField(
        "Status", choices=[SelectChoice(s, s.replace("_", " ").capitalize()) for s in IssueStatus.values()]
    )


class IssueAssigneeForm(FlaskForm):
    assignee = SelectField("Assignee", choices=[], validate_choice=True, widget=PickerSelect())


class IssueResponsibleForm(FlaskForm):
    responsible = SelectField("Responsible", choices=[], validate_choice=True, widget=PickerSelect())


class NewIssueForm(FlaskForm):
    title = StringField("Title", validators=[DataRequired(), Length(max=300)])
    description = TextAreaField("Description", validators=[Optional(), Length(max=20000)])


class AgentInstructionsForm(FlaskForm):
    instructions = TextAreaField("Instructions", validators=[Optional(), Length(max=20000)])


class AgentRuntimeForm(FlaskForm):
    """How an agent runs (`app.services.agent_runtime`): the adapter, and an agent CLI's settings."""

    adapter_type = SelectField("Adapter", choices=[])
    binary = StringField("Program", filters=[strip_text], validators=[Optional(), Length(max=500)])
    model = StringField("Model", filters=[strip_text], validators=[Optional(), Length(max=200)])
    base_url = StringField(
        "Model API base URL", filters=[strip_text], validators=[Optional(), Length(max=500)]
    )
    cwd = StringField("Working directory", filters=[strip_text], validators=[Optional(), Length(max=1000)])
    extra_args = StringField("Extra arguments", validators=[Optional(), Length(max=2000)])
    timeout_seconds = IntegerField(
        "Timeout (seconds)", validators=[Optional(), NumberRange(min=1, max=24 * 3600)]
    )
    env = TextAreaField("Environment variables", validators=[Optional(), Length(max=20000)])


class AgentSecretForm(FlaskForm):
    name = StringField("Name", filters=[strip_text], validators=[DataRequired(), Length(max=120)])
    value = PasswordField("Value", validators=[DataRequired(), Length(max=8192)])


class AddMemberForm(FlaskForm):
    email = EmailField("Email", filters=[strip_text], validators=[DataRequired(), Email(), Length(max=320)])
    name = StringField("Name", validators=[DataRequired(), Length(max=200)])
    role = SelectField(
        "Role", choices=[SelectChoice(r, r.capitalize()) for r in Role.values()], default="member"
    )
    password = PasswordField("Initial password", validators=[Optional(), Length(min=8, max=200)])


class MemberRoleForm(FlaskForm):
    role = SelectField("Role", choices=[SelectChoice(r, r.capitalize()) for r in Role.values()])


class ApiKeyForm(FlaskForm):
    name = StringField("Name", validators=[DataRequired(), Length(max=120)])
