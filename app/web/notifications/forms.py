"""Forms of the notification settings pages."""

from flask_wtf import FlaskForm
from wtforms import BooleanField, SelectMultipleField, URLField
from wtforms.fields.choices import SelectChoice
from wtforms.validators import DataRequired, Length
from wtforms.widgets import CheckboxInput, ListWidget

from app.models.notifications import WEBHOOK_EVENTS


class EmailSettingsForm(FlaskForm):
    email_enabled = BooleanField(
        "Email me when a card or an approval waits for me, and when a connection of mine needs me to sign in again"
    )


class WebhookForm(FlaskForm):
    url = URLField(
        "Endpoint URL",
        validators=[DataRequired(message="Enter the URL to send events to."), Length(max=2000)],
    )
    events = SelectMultipleField(
        "Events",
        choices=[SelectChoice(e, e) for e in WEBHOOK_EVENTS],
        default=list(WEBHOOK_EVENTS),
        widget=ListWidget(prefix_label=False),
        option_widget=CheckboxInput(),
    )
