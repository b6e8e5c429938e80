"""Liveness (`/healthz`) and readiness (`/readyz`) for a load balancer.

`/healthz` says the process is alive and reaches its database: restart it when this fails. `/readyz` says whether it
should be sent traffic: the process is not draining (gunicorn got SIGTERM), the database answers, its schema is at
this code's head (else every page answers 503 "upgrading" until `switchboard db upgrade` has run), its keys match the
installation's (`settings`, app/services/installation.py), and the sign-in throttle's counter store answers (without
it, sign-in refuses every attempt with a 503). Both answer 503 when something is wrong, with a JSON body naming each
check; neither shows a URI. `catalog` says whether the cached catalog came from this process's app definitions; it is
information and never makes the process not ready (an instance of the previous release keeps serving during a rolling
deploy).
"""

from flask import Blueprint, jsonify
from flask.typing import ResponseReturnValue
from sqlalchemy import text
from sqlalchemy.exc import SQLAlchemyError

from app.catalog import sync as catalog_sync
from app.core import schema
from app.extensions import db
from app.services import installation, login_throttle
from app.web import serving_state

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


def _schema_status(database: bool) -> str:
    if not database:
        return "unknown"
    try:
        problem = schema.schema_problem()
    except SQLAlchemyError:
        return "unknown"
    return "ok" if problem is None else problem


SETTINGS_FINE = frozenset({"ok", "not checked"})


def _settings_status(schema_status: str) -> str:
    if schema_status != "ok":
        return "unknown"
    try:
        return installation.status()
    except SQLAlchemyError:
        db.session.rollback()
        return "unknown"


def catalog_status() -> dict:
    """Whether the cached catalog came from this process's app definitions. Information, not readiness: during a
    rolling deploy the instances of the previous release ship older definitions and must keep serving."""
    try:
        return catalog_sync.catalog_status()
    except SQLAlchemyError:
        db.session.rollback()
        return {"status": "unknown"}


@bp.get("/readyz")
def readyz() -> ResponseReturnValue:
    draining = serving_state.is_draining()
    database = _database_answers()
    schema_status = _schema_status(database)
    settings = _settings_status(schema_status)
    throttle_store = login_throttle.store_reachable()
    ready = (
        not draining and database and schema_status == "ok" and settings in SETTINGS_FINE and throttle_store
    )
    body = {
        "status": "draining" if draining else "ready" if ready else "not ready",
        "database": "ok" if database else "unreachable",
        "schema": schema_status,
        "settings": settings,
        "catalog": catalog_status(),
        "throttle_store": {
            "kind": login_throttle.store_name(),
            "status": "ok" if throttle_store else "unreachable",
        },
    }
    response = jsonify(body)
    if draining:
        response.headers["Connection"] = "close"
    return response, 200 if ready else 503
