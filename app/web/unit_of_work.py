"""One unit of work per request: a view's writes commit once, after the view, or not at all.

Views load, authorize, validate and call services; they do not commit. `install` adds the request hooks:

- after the view, a response below 400 commits the session and a response of 400 or more rolls it back;
- a view that raises rolls back (the error handlers answer with the session clean);
- `after_commit(callback)` queues work that must see the committed data (delivering a card's continuation wakes
  the agent from the committed resolution); it runs after the commit, and never when the request rolls back.

A few requests need data durable *before* they go on, or kept although they answer an error. Each such place calls
`commit_point(reason)` with one of the `Reason`s below, so every second commit in a request is named and explained
in one list.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from enum import Enum

from flask import Flask, Response, g

from app.extensions import db

log = logging.getLogger(__name__)


class Reason(Enum):
    """Why a request commits before its end (the value says why, for readers and logs)."""

    API_KEY_LAST_USED = (
        "a key's last use is recorded before the view's own unit of work (read-only calls keep it)"
    )
    SIGN_IN_ATTEMPT = "a sign-in attempt is counted and recorded even when the answer is 401 or 429"
    GATEWAY_DECISION = (
        "a gateway call that used up an approval commits it before the provider is prepared: an OAuth refresh "
        "commits in a transaction of its own and must not wait on this request's write lock"
    )
    PROVIDER_CALL = (
        "the transaction ends before the provider is called, so a slow provider never holds a database connection "
        "(board pages and runtime tools would queue for them)"
    )
    STREAMED_CALL_RECORDED = (
        "a gateway call answered on an SSE stream records its outcome from the worker that relays it, after the "
        "request's own unit of work has ended (the stream starts once the view has returned)"
    )
    DRAFT_BEFORE_VERIFY = (
        "a new draft (and a card's saved setup) is kept before its key is verified, so a refused key or a refused "
        "completion keeps the setup for Continue setup and Try again"
    )
    OAUTH_STATE_SPENT = "the OAuth state is spent before the code exchange: a second callback finds nothing"
    OAUTH_FAILURE_RECORDED = (
        "a failed sign-in is recorded (and its card marked needs-retry) although it answers an error"
    )
    CARD_NEEDS_RETRY = "a refused completion leaves the card in needs_retry although the dialog answers 422"
    ASSISTANT_REFUSAL_KEPT = (
        "an assistant's token request that found reuse (a code or rotated refresh token presented again) revokes the "
        "token family, and a device poll records its time, although the answer is an OAuth error"
    )
    SETUP_FAILURE_RECORDED = (
        "a setup attempt the provider refused is recorded (as a failure) although it answers 422"
    )


def commit_point(reason: Reason) -> None:
    """Commit now, mid-request, for the named reason; queued `after_commit` callbacks wait for the request's end."""
    log.debug("commit point: %s", reason.name)
    db.session.commit()


def after_commit(callback: Callable[[], object]) -> None:
    """Run `callback` once this request's unit of work has committed (never if it rolls back)."""
    g.setdefault("_after_commit", []).append(callback)


def _finish(response: Response) -> Response:
    callbacks = g.pop("_after_commit", [])
    if response.status_code >= 400:
        db.session.rollback()
        return response
    db.session.commit()
    for callback in callbacks:
        callback()
    return response


def _rollback_on_error(error: BaseException | None) -> None:
    if error is not None:
        g.pop("_after_commit", None)
        db.session.rollback()


def install(app: Flask) -> None:
    """Register the hooks; installed first, so the commit runs after every other `after_request` hook."""
    app.after_request(_finish)
    app.teardown_request(_rollback_on_error)
