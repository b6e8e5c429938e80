"""Notification pages: the Inbox (`/inbox`, its pollers, `GET /api/me/inbox`), the person's email
setting (`/settings/notifications`) and the company's webhooks (`/settings/webhooks`).

Views stay thin: load, authorize, validate, call one service in `app.services.notifications`, commit once.
"""

from app.web.blueprints import signed_in_blueprint

bp = signed_in_blueprint("inbox", __name__, varies_on_htmx=True)


from app.web.notifications import inbox, settings  # noqa: E402,F401
