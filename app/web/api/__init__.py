"""The board JSON API under /api: session cookie plus CSRF header, or `Authorization: Bearer <api key>`."""

from flask import Blueprint
from flask_login import login_required

bp = Blueprint("api", __name__, url_prefix="/api")


@bp.before_request
@login_required
def _require_login() -> None:
    return None


from app.web.api import connections, intents, tasks  # noqa: E402,F401
