"""Liveness (`/healthz`) and readiness (`/readyz`) for a load balancer.

`/healthz` says the process is alive and reaches its database. `/readyz` says whether it should be sent traffic:
the database answers and the sign-in throttle's counter store answers (without it, sign-in refuses every attempt
with a 503). Both answer 503 when something is wrong, with a JSON body naming each check; neither shows a URI.
"""

from flask import Blueprint, jsonify
from flask.typing import ResponseReturnValue
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from app.extensions import db
from app.services import login_throttle

bp = Blueprint("health", __name__)


def _database_answers() -> bool:
    try:
        db.session.execute(text("SELECT 1"))
    except SQLAlchemyError:
        db.session.rollback()
        return False
    return True


@bp.get("/healthz")
def healthz() -> ResponseReturnValue:
    if not _database_answers():
        return jsonify({"status": "error", "database": "unreachable"}), 503
    return jsonify({"status": "ok", "database": db.engine.dialect.name})


@bp.get("/readyz")
def readyz() -> ResponseReturnValue:
    database = _database_answers()
    throttle_store = login_throttle.store_reachable()
    body = {
        "status": "ready" if database and throttle_store else "not ready",
        "database": "ok" if database else "unreachable",
        "throttle_store": {
            "kind": login_throttle.store_name(),
            "status": "ok" if throttle_store else "unreachable",
        },
    }
    return jsonify(body), 200 if database and throttle_store else 503
