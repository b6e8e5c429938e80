"""Test fixtures: one app per session on the chosen backend, migrated with Alembic, tables emptied after each test.

The backend is SQLite (a temporary file) unless SWITCHBOARD_TEST_DATABASE_URL names a PostgreSQL database; `make test`
runs the suite once per backend. Tables are emptied after every test instead of rolling back a wrapping transaction,
because several tests drive the app through real sockets from other threads (browser, MCP clients, workers) and need
committed data.
"""

from __future__ import annotations

import contextvars
import os
import re
import tempfile
import threading
from contextlib import contextmanager
from pathlib import Path

import pytest
from cryptography.fernet import Fernet
from flask import has_app_context
from flask.testing import FlaskClient
from sqlalchemy import create_engine, event, text
from sqlalchemy.engine import make_url
from werkzeug.serving import make_server

from tests import factories

pytest_plugins = ["tests.peers.fixtures", "tests.peers.oidc_fixtures"]

TEST_DATABASE_URL = os.environ.get("SWITCHBOARD_TEST_DATABASE_URL", "")
_TMP = Path(tempfile.mkdtemp(prefix="switchboard-tests-"))
# Each test process (each pytest-xdist worker too: they inherit the controller's environment) has its own instance
# folder, so generated secrets and files never cross processes.
os.environ["SWITCHBOARD_INSTANCE_PATH"] = str(_TMP / "instance")
# Tables that hold reference data loaded once per session (not per-test state).
PRESERVED_TABLES = {"alembic_version", "catalog_apps", "catalog_state", "catalog_ingests"}


def backend_name() -> str:
    return "postgresql" if TEST_DATABASE_URL.startswith("postgres") else "sqlite"


def pytest_report_header(config):
    return f"switchboard test backend: {backend_name()}"


# Tests whose subject does not depend on the database backend: the browser (the UI over the same views the web tests
# cover on both backends), real agent CLIs, protocol conformance, HTTP framing, processes that bring their own
# database. `make test` runs them in one of its two passes only (`SWITCHBOARD_TEST_ONE_PASS_ONLY=1` on the other);
# a single pass (`make test` without PostgreSQL, or plain pytest) runs everything. The offline journey stays in both:
# it is the demo's own path on SQLite and production's on PostgreSQL.
BACKEND_INDEPENDENT_PATHS = (
    "tests/browser/",
    "tests/cli/test_start_demo.py",
    "tests/system/test_conformance.py",
    "tests/system/test_too_large_keepalive.py",
    "tests/evals/",
    "tests/adapters/test_model_server.py",
    "tests/adapters/test_agent_cli_network.py",
)
RUN_IN_BOTH_PASSES = ("tests/browser/test_journey.py",)


def _backend_independent(item: pytest.Item) -> bool:
    path = Path(str(item.fspath)).resolve().relative_to(Path(__file__).resolve().parent.parent).as_posix()
    if path.startswith(RUN_IN_BOTH_PASSES):
        return False
    return "backend_independent" in item.keywords or path.startswith(BACKEND_INDEPENDENT_PATHS)


def pytest_collection_modifyitems(config, items):
    if backend_name() != "postgresql":
        skip = pytest.mark.skip(reason="needs PostgreSQL (set TEST_DATABASE_URL)")
        for item in items:
            if "postgres_only" in item.keywords:
                item.add_marker(skip)
    if os.environ.get("SWITCHBOARD_TEST_ONE_PASS_ONLY") == "1":
        elsewhere = [item for item in items if _backend_independent(item)]
        if elsewhere:
            config.hook.pytest_deselected(items=elsewhere)
            items[:] = [item for item in items if not _backend_independent(item)]


def _database_url() -> str:
    if TEST_DATABASE_URL:
        url = TEST_DATABASE_URL
        if url.startswith("postgresql://"):
            url = "postgresql+psycopg://" + url[len("postgresql://") :]
        return _worker_database(url)
    return f"sqlite:///{_TMP / 'test.db'}"


_XDIST_WORKER = os.environ.get("PYTEST_XDIST_WORKER", "")


def _worker_database(url: str) -> str:
    """Under pytest-xdist each worker process gets a PostgreSQL database of its own, `<name>_<worker>`, created
    afresh on the configured one's server (the SQLite file is already per process). Without xdist: the configured
    one."""
    if not _XDIST_WORKER:
        return url
    configured = make_url(url)
    worker_url = configured.set(database=f"{configured.database}_{_XDIST_WORKER}")
    name = worker_url.database
    if name not in _CREATED_WORKER_DATABASES:
        admin = create_engine(configured, isolation_level="AUTOCOMMIT")
        with admin.connect() as conn:
            conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
            conn.execute(text(f'CREATE DATABASE "{name}"'))
        admin.dispose()
        _CREATED_WORKER_DATABASES.add(name)
    return worker_url.render_as_string(hide_password=False)


# Created once per process. They are not dropped at the end: threads of the last tests may still hold connections
# (dropping them WITH (FORCE) printed their tracebacks); the next run drops and re-creates them, and CI drops them.
_CREATED_WORKER_DATABASES: set[str] = set()


def _reset_postgres(url: str) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DROP SCHEMA public CASCADE"))
        conn.execute(text("CREATE SCHEMA public"))
    engine.dispose()


TEST_CONFIG = {
    "TESTING": True,
    "SECRET_KEY": "test-secret-key",
    "ENCRYPTION_KEY": Fernet.generate_key().decode(),
    "PASSWORD_HASH_METHOD": "pbkdf2:sha256:1000",
    "PUBLIC_BASE_URL": "http://127.0.0.1:5000",
    "SERVER_NAME": None,
    # The session's app ingests once, after migrating (`_after_migrate`); apps made by tests do not ingest at start.
    "CATALOG_INGEST_ON_START": False,
    # Tests make apps with other keys on the session's database; tests/system/test_installation_keys.py turns the
    # comparison with the installation's keys on, and processes started from the environment have it on.
    "INSTALLATION_CHECK": False,
    # The fuzzers send thousands of bad credentials from 127.0.0.1 in one test; the per-address limit on failed
    # authentication is tested at its default by tests/web/test_guessing_throttle.py (`address_limit`).
    "AUTH_ADDRESS_MAX_FAILURES": 100_000,
}


class RequestInItsOwnContextClient(FlaskClient):
    """The test client, with every request in an app context of its own, as a server gives it.

    A test keeps an app context pushed (the `db` fixture) to read and write the database directly. Flask lets a request
    join an app context that is already pushed, so test-client requests would share the test's `g` (the user Flask-Login
    cached, Flask-WTF's CSRF token) and its database session. Each request runs in a fresh `contextvars` context
    instead: it sees no app context, so Flask pushes its own, with its own `g` and session, committed or rolled back by
    `unit_of_work` and removed at teardown. Afterwards the test's session forgets what it had loaded, so it reads what
    the request committed (as it did when the request committed the shared session)."""

    def open(self, *args, **kwargs):
        response = contextvars.Context().run(super().open, *args, **kwargs)
        from app.extensions import db as _db

        if has_app_context():
            _db.session.expire_all()
        return response


@pytest.fixture(scope="session")
def app():
    from flask_migrate import upgrade

    from app import create_app

    url = _database_url()
    if url.startswith("postgresql"):
        _reset_postgres(url)
    application = create_app({**TEST_CONFIG, "SQLALCHEMY_DATABASE_URI": url})
    application.test_client_class = RequestInItsOwnContextClient

    with application.app_context():
        upgrade()
        _after_migrate(application)
        # As a serving process does on its first request: it finds the schema current once and remembers it (so the
        # first request of a test with statement counts does not pay for the check).
        from app.core import schema

        assert schema.is_current()
    yield application


def _after_migrate(application) -> None:
    """Hook for reference data that later features load once per session (the cached catalog)."""
    try:
        from app.catalog.loader import ingest_definitions
    except ImportError:
        return
    from app.extensions import db

    ingest_definitions()
    db.session.commit()


@pytest.fixture
def db(app):
    from app.extensions import db as _db
    from app.services import login_throttle

    ctx = app.app_context()
    ctx.push()
    try:
        yield _db
    finally:
        _db.session.rollback()
        _db.session.remove()
        _empty_tables(_db)
        login_throttle.reset()  # sign-in counters (in the database by default, or another store) are per test
        ctx.pop()


@pytest.fixture
def real_catalog_restored(db):
    """Tests that change the cached catalog (kept across tests) put the real one back, so other tests see it."""
    from app.catalog.loader import ingest_definitions

    yield
    db.session.rollback()
    ingest_definitions()
    db.session.commit()


def _empty_tables(_db) -> None:
    tables = [t for t in reversed(_db.metadata.sorted_tables) if t.name not in PRESERVED_TABLES]
    with _db.engine.begin() as conn:
        if conn.dialect.name == "postgresql":
            conn.execute(text("TRUNCATE " + ", ".join(f'"{t.name}"' for t in tables) + " CASCADE"))
        else:
            for table in tables:
                conn.execute(table.delete())


@pytest.fixture(autouse=True)
def process_wide_limits_reset():
    """Provider bulkheads, breakers and pooled sessions are process-wide: each test starts with none."""
    from app.adapters.providers.client import CLIENT

    CLIENT.reset()
    yield
    CLIENT.reset()


@pytest.fixture
def client(app, db):
    return app.test_client()


CSRF_RE = re.compile(r'"X-CSRFToken": "([^"]+)"')


@contextmanager
def serving(app):
    """The app on 127.0.0.1:<free port> in a daemon thread, threaded like a real server; yields its base URL."""
    server = make_server("127.0.0.1", 0, app, threaded=True)
    thread = threading.Thread(target=server.serve_forever, name="live-server", daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_port}"
    finally:
        server.shutdown()
        thread.join(timeout=5)


@pytest.fixture
def providers(app, notes_server, honcho_server):
    """Catalog apps pointed at the real MCP peers on loopback: github at the notes server, honcho at Honcho's."""
    saved = app.config.get("PROVIDER_SERVER_URLS")
    app.config["PROVIDER_SERVER_URLS"] = {"github": notes_server.url, "honcho": honcho_server.url}
    yield
    app.config["PROVIDER_SERVER_URLS"] = saved


@contextmanager
def count_statements(engine):
    """Collect the SQL statements the engine runs inside the block (a list, filled as they run)."""
    statements: list[str] = []

    def record(conn, cursor, statement, *args):
        statements.append(statement)

    event.listen(engine, "before_cursor_execute", record)
    try:
        yield statements
    finally:
        event.remove(engine, "before_cursor_execute", record)


def csrf_token_for(client) -> str:
    """Read the CSRF token a signed-in page hands to htmx (the same one forms carry)."""
    page = client.get("/login") if not _signed_in(client) else client.get("/")
    html = page.get_data(as_text=True)
    match = CSRF_RE.search(html) or re.compile(r'name="csrf_token" type="hidden" value="([^"]+)"').search(
        html
    )
    assert match, "no CSRF token on the page"
    return match.group(1)


def _signed_in(client) -> bool:
    with client.session_transaction() as sess:
        return "_user_id" in sess


def sign_in(client, user) -> str:
    """Sign a user in through the session (the login form itself has its own tests); returns a CSRF token."""
    with client.session_transaction() as sess:
        sess["_user_id"] = user.get_id()
        sess["_fresh"] = True
    return csrf_token_for(client)


@pytest.fixture
def make(db):
    """Factories bound to the test database: make.company(), make.member(company, role), ..."""
    return factories.Factory(db)


@pytest.fixture
def acme(make):
    """(company, owner, member, viewer, agent): Acme with one person in each role and an agent Builder."""
    company = make.company("Acme")
    owner = make.member(company, "owner")
    member = make.member(company, "member")
    viewer = make.member(company, "viewer")
    agent = make.agent(company, "Builder")
    return company, owner, member, viewer, agent


@pytest.fixture
def world(make):
    """Acme: an owner (the task's responsible person), an agent Builder on an in-progress task, a live run and its
    token (`make.task_run()`); modules that need another world override this fixture."""
    return make.task_run()
