"""What operators see of the web app: a request id on every answer, request metrics, and `/metrics`.

Every response carries `X-Request-Id`: the caller's own (when it is a short token of letters, digits, `.`, `_`,
`-`) or a new one; JSON logs carry it (`app.core.json_logs`). Request latency is measured by route (the Flask
endpoint name, never the raw path: paths carry ids).

`GET /metrics` serves the Prometheus text format (`app.core.metrics`) only when `SWITCHBOARD_METRICS_TOKEN` is set,
and only to a request that presents it as `Authorization: Bearer <token>` (401 otherwise); unset, the route answers
404, as if it did not exist.
"""

from __future__ import annotations

import hmac
import re
import time
import uuid

from flask import Blueprint, Flask, Response, abort, current_app, g, request

from app.core import metrics

bp = Blueprint("observability", __name__)

REQUEST_ID_HEADER = "X-Request-Id"
_GOOD_REQUEST_ID = re.compile(r"[A-Za-z0-9._-]{1,64}")


def install(app: Flask) -> None:
    @app.before_request
    def _start() -> None:
        given = request.headers.get(REQUEST_ID_HEADER, "")
        g.request_id = given if _GOOD_REQUEST_ID.fullmatch(given) else uuid.uuid4().hex
        g.request_started = time.perf_counter()

    @app.after_request
    def _finish(response: Response) -> Response:
        request_id = g.get("request_id")
        if request_id:
            response.headers[REQUEST_ID_HEADER] = request_id
        started = g.get("request_started")
        if started is not None:
            metrics.observe_request(
                request.endpoint, request.method, response.status_code, time.perf_counter() - started
            )
        return response

    app.register_blueprint(bp)


@bp.get("/metrics")
def scrape() -> Response:
    token = current_app.config.get("METRICS_TOKEN")
    if not token:
        abort(404)
    presented = request.headers.get("Authorization", "")
    scheme, _, value = presented.partition(" ")
    if scheme.lower() != "bearer" or not hmac.compare_digest(value.strip().encode(), str(token).encode()):
        return Response(
            "A metrics token is required.\n",
            status=401,
            mimetype="text/plain",
            headers={"WWW-Authenticate": 'Bearer realm="metrics"'},
        )
    from prometheus_client import CONTENT_TYPE_LATEST

    return Response(metrics.exposition(), headers={"Content-Type": CONTENT_TYPE_LATEST})
