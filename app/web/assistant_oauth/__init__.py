"""The doors of the assistants' authorization server (`app.services.assistants`): discovery metadata, the OAuth
endpoints MCP clients call, and the pages a person signs the assistant in on."""

from flask import Blueprint

bp = Blueprint("assistant_oauth", __name__)

# The routes register on bp when their modules are imported.
from app.web.assistant_oauth import consent, endpoints, metadata, settings  # noqa: E402,F401
