"""The blueprint for pages and endpoints that only a signed-in person reaches (the board, apps, cards, the inbox,
the board JSON API), so the rule is written once instead of once per blueprint."""

from __future__ import annotations

from flask import Blueprint, Response, request
from flask_login import login_required


@login_required
def _require_login() -> None:
    return None


def _vary_on_htmx(response: Response) -> Response:
    response.vary.add("HX-Request")
    return response


# The event the Inbox badge listens for (templates/inbox/_nav.html) besides its 5 s poll.
INBOX_CHANGED = "inbox-changed"


def _tell_the_inbox(response: Response) -> Response:
    """An answer given with htmx (a card connected, declined, approved...) asks the Inbox badge to look again at
    once, so its count follows the answer instead of the next poll. The badge still asks the server, which answers
    204 when nothing changed."""
    if request.method == "POST" and request.headers.get("HX-Request") and response.status_code < 400:
        trigger = response.headers.get("HX-Trigger")
        response.headers["HX-Trigger"] = f"{trigger}, {INBOX_CHANGED}" if trigger else INBOX_CHANGED
    return response


def tells_the_inbox_of_answers(bp: Blueprint) -> Blueprint:
    bp.after_request(_tell_the_inbox)
    return bp


def signed_in_blueprint(
    name: str, import_name: str, *, url_prefix: str | None = None, varies_on_htmx: bool = False
) -> Blueprint:
    """A blueprint whose every route first asks for a signed-in person (the login manager answers otherwise).

    `varies_on_htmx`: the same URL answers an htmx request with a fragment and any other with a page, so every
    answer names `HX-Request` in `Vary` and no cache hands one to the other.
    """
    bp = Blueprint(name, import_name, url_prefix=url_prefix)
    bp.before_request(_require_login)
    if varies_on_htmx:
        bp.after_request(_vary_on_htmx)
    return bp
