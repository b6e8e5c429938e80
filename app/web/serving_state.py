"""Requests this process refuses before any view runs: during a drain, and while the schema is behind the code.

Draining (issue 31 item 4): gunicorn's SIGTERM hook (`gunicorn.conf.py`) calls `begin_drain()` in the worker process.
From then on the requests already running finish, and any new one that still reaches this process (on a kept-alive
connection) is answered at once with a 503 and `Connection: close`, so the client retries elsewhere; `/readyz`
answers 503 "draining"; `/healthz` stays the liveness check (the process is alive until it exits).

Upgrading (item 7): code ahead of the schema answers a clear 503 "upgrading" instead of 500s from missing columns
(see app/core/schema.py). The page stands alone: the usual layout loads the signed-in user, a query on a table the
upgrade may change.

Other keys (item 5): a process that started before the schema had its tables compares its keys with the installation's
once the schema is current (`app/services/installation.py`), and answers 503 naming the setting while they differ.
"""

from __future__ import annotations

import threading

from flask import Flask, render_template, request
from flask.typing import ResponseReturnValue

from app.core import schema
from app.services import installation
from app.web.errors import error_response, wants_json

DRAINING_MESSAGE = "This Switchboard instance is shutting down. Retry the request."
RETRY_AFTER_SECONDS = "5"
# Liveness and readiness answer for themselves (readiness names what is wrong); static files need no database.
_ALWAYS_SERVED = frozenset({"health.healthz", "health.readyz", "static"})

_draining = threading.Event()


def begin_drain() -> None:
    _draining.set()


def is_draining() -> bool:
    return _draining.is_set()


def install(app: Flask) -> None:
    @app.before_request
    def refuse_while_draining_or_upgrading() -> ResponseReturnValue | None:
        if request.endpoint in _ALWAYS_SERVED:
            return None
        if is_draining():
            response = app.make_response(error_response(DRAINING_MESSAGE, 503))
            response.headers["Connection"] = "close"
        elif not schema.is_current():
            if wants_json() or request.headers.get("HX-Request"):
                response = app.make_response(error_response(schema.UPGRADING_MESSAGE, 503))
            else:
                page = render_template("upgrading.html", message=schema.UPGRADING_MESSAGE)
                response = app.make_response((page, 503))
        elif problems := installation.ensure_agreed():
            # Started before the schema had its tables, so the app factory could not compare the keys then.
            response = app.make_response(error_response(" ".join(problems), 503))
        else:
            return None
        response.headers["Retry-After"] = RETRY_AFTER_SECONDS
        return response
