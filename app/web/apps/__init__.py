"""Apps: the catalog, the shared setup flow page, the Connections list, reconnect, and a connection's Permissions.

Views here are thin: they load (404 across companies), authorize (403), collect form values, and call the connection
and instruction services, which own every rule. Fragments come from the partials under `templates/apps/`.
"""

from flask import Blueprint
from flask_login import login_required

bp = Blueprint("apps", __name__)


@bp.before_request
@login_required
def _require_login() -> None:
    return None


from app.web.apps import catalog, connections, instructions, manage, permissions, setup  # noqa: E402,F401
