"""The blueprint for pages and endpoints that only a signed-in person reaches (the board, apps, cards, the inbox,
the board JSON API), so the rule is written once instead of once per blueprint."""

from __future__ import annotations

from flask import Blueprint, Response
from flask_login import login_required


@login_required
def _require_login() -> None:
    return None


def _vary_on_htmx(response: Response) -> Response:
    response.vary.add("HX-Request")
    return response


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
