"""Notification pages (issue 15): the Inbox (`/inbox`, its pollers, `GET /api/me/inbox`), the person's email
setting (`/settings/notifications`) and the company's webhooks (`/settings/webhooks`).

Views stay thin: load, authorize, validate, call one service in `app.services.notifications`, commit once.
"""

from flask import Blueprint, Response
from flask_login import login_required

bp = Blueprint("inbox", __name__)


@bp.before_request
@login_required
def _require_login() -> None:
    return None


@bp.after_request
def _vary(response: Response) -> Response:
    response.vary.add("HX-Request")
    return response


from app.web.notifications import inbox, settings  # noqa: E402,F401
