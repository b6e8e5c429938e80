"""The doors of the assistants' authorization server (`app.services.assistants`): discovery metadata, the OAuth
endpoints MCP clients call, and the pages a person signs the assistant in on."""

from flask import Blueprint

bp = Blueprint("assistant_oauth", __name__)

from app.web.assistant_oauth import metadata  # noqa: E402,F401  (routes register on bp)
