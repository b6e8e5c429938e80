"""Switchboard: the application factory."""

from __future__ import annotations

import logging
import os
from pathlib import Path

from flask import Flask

from app.config import load_config
from app.extensions import csrf, db, htmx, login_manager, migrate

PROJECT_ROOT = Path(__file__).resolve().parent.parent


def register_access_checks() -> None:
    """The access rule's ordered checks that features fill (`app.services.access.checks`): quarantine and limit
    register themselves when imported, so the composition root imports them once."""
    from app.services.connections import quarantine_check  # noqa: F401
    from app.services.gateway import limit_check  # noqa: F401


def create_app(config_override: dict | None = None) -> Flask:
    instance_path = os.environ.get("SWITCHBOARD_INSTANCE_PATH") or str(PROJECT_ROOT / "instance")
    app = Flask(
        __name__,
        instance_path=instance_path,
        template_folder=str(PROJECT_ROOT / "templates"),
        static_folder=str(PROJECT_ROOT / "static"),
    )
    app.config.update(load_config(app.instance_path))
    if config_override:
        app.config.update(config_override)
    if app.config["SQLALCHEMY_DATABASE_URI"].startswith("sqlite"):
        app.config["SQLALCHEMY_ENGINE_OPTIONS"] = {"connect_args": {"timeout": 30}}

    if app.config.get("TRUSTED_PROXY_COUNT"):
        # Behind N reverse proxies: take the client address (sign-in throttling, logs) from their
        # X-Forwarded-For entries. Off by default: the header is never trusted unless configured.
        from werkzeug.middleware.proxy_fix import ProxyFix

        app.wsgi_app = ProxyFix(app.wsgi_app, x_for=int(app.config["TRUSTED_PROXY_COUNT"]))  # type: ignore[method-assign]

    from app.core import json_logs, tracing

    json_logs.configure(app.config["LOG_FORMAT"])
    tracing.configure(app.config["TRACING"])
    if not app.config.get("REQUEST_LOG"):
        # werkzeug's development server logs every request at INFO; its warnings and errors still show.
        logging.getLogger("werkzeug").setLevel(logging.WARNING)
    register_access_checks()
    register_extensions(app)
    register_blueprints(app)
    register_cli(app)
    from app.services import installation

    # A process whose keys differ from the installation's would answer 401s and 500s while looking healthy: it refuses
    # to start instead (gunicorn exits when its workers cannot boot), before it could ingest anything.
    installation.check_at_start(app)
    if app.config.get("CATALOG_INGEST_ON_START"):
        # A deployment never serves an empty or stale catalog: ingest when the definition files changed (one
        # query when they did not; several workers starting together ingest once, see app/catalog/sync.py).
        from app.catalog.sync import ensure_catalog_current

        with app.app_context():
            ensure_catalog_current()
    if app.config.get("RUN_WORKER_IN_PROCESS") and not app.config.get("TESTING"):
        from app.workers.loop import start_in_process_worker

        start_in_process_worker(app)
    return app


def register_extensions(app: Flask) -> None:
    from app import models  # noqa: F401  (register every table on the metadata)
    from app.services import login_throttle
    from app.services.access import revision  # noqa: F401  (its session events keep revisions current)
    from app.web import auth_throttle, cors, observability, serving_state, unit_of_work
    from app.web.security import install_request_security

    db.init_app(app)
    migrate.init_app(app, db, directory=str(PROJECT_ROOT / "migrations"), render_as_batch=True)
    login_manager.init_app(app)
    login_manager.login_view = "auth.login"
    login_manager.login_message = "Sign in to continue."
    csrf.init_app(app)
    htmx.init_app(app)
    observability.install(app)  # first: its request id and timing cover every other hook
    unit_of_work.install(
        app
    )  # next, so its commit runs after every other after_request hook but observability's
    serving_state.install(
        app
    )  # a draining or not yet upgraded process refuses before anything reads the database
    auth_throttle.install(app)  # before the credential checks: a guessing address is refused unread
    install_request_security(app)
    cors.install(
        app
    )  # after the Origin check: a foreign origin at the gateway is refused before it is allowed
    login_throttle.init_app(app)
    if app.config["SQLALCHEMY_DATABASE_URI"].startswith("sqlite"):
        from app.web.sqlite import enable_sqlite_pragmas

        with app.app_context():
            enable_sqlite_pragmas(db.engine)
    else:
        from app.core import db_liveness

        with app.app_context():
            db_liveness.install(db.engine)


def register_blueprints(app: Flask) -> None:
    from app.web import api, apps, assistant_oauth, auth, board, errors, health, oauth
    from app.web import notifications as notifications_web
    from app.web.agents import gateway, runtime
    from app.web.cards import approval, connection
    from app.web.openapi import document as openapi

    doors = (
        auth,
        health,
        board,
        apps,
        api,
        oauth,
        runtime,
        connection,
        gateway,
        approval,
        openapi,
        notifications_web,
        assistant_oauth,
    )
    for door in doors:
        app.register_blueprint(door.bp)
    errors.register_error_handlers(app)
    from app.services.assistants.server import init_server

    init_server(app)


def register_cli(app: Flask) -> None:
    from app.cli import register_commands

    register_commands(app)
