"""Draining and upgrading (issue 31 items 4 and 7), on a real gunicorn server (the production `gunicorn.conf.py`,
two worker processes) on the test database.

SIGTERM starts a drain: a call in flight at a provider finishes with its result, while new connections are refused at
once instead of queueing behind the drain. Inside a draining process `/readyz` answers 503 "draining" and other
requests a fast 503 with `Connection: close`, while `/healthz` stays 200. Code ahead of the schema reports not
ready and answers 503 "upgrading" (pages and API alike) until `db upgrade` has run, without a restart.
"""

from __future__ import annotations

import signal
import threading

import httpx
import pytest
from flask_migrate import downgrade, upgrade

from app.core import schema
from app.web import serving_state
from tests import servers
from tests.doors import bearer
from tests.peers.mcp_servers import NOTES_KEY
from tests.services.gateway import test_cancellation
from tests.services.gateway.test_cancellation import PATIENCE, URL, _wait_until
from tests.services.gateway.test_gateway import connect

world = test_cancellation.world
frozen = test_cancellation.frozen

CALL = {
    "jsonrpc": "2.0",
    "id": "call-1",
    "method": "tools/call",
    "params": {"name": "slow__wait_for_release", "arguments": {"label": "a"}},
}


def _refused(port: int) -> bool:
    try:
        httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=PATIENCE)
    except (httpx.ConnectError, httpx.ReadError, httpx.RemoteProtocolError):
        # Refused outright, or accepted into the closing listener's backlog and then reset: either way, not served.
        return True
    return False


def test_sigterm_refuses_new_connections_at_once_while_the_call_in_flight_finishes(
    app, db, world, frozen, tmp_path
):
    connect(world, "github", NOTES_KEY, name="Slow")
    frozen.reset()
    answers: list[httpx.Response] = []
    provider = {"SWITCHBOARD_PROVIDER_SERVER_URLS": f'{{"github": "{frozen.url}"}}'}
    with servers.gunicorn(app, tmp_path, processes=2, extra_env=provider) as instance:
        port, process = instance.port, instance.process
        ready = httpx.get(f"http://127.0.0.1:{port}/readyz", timeout=PATIENCE)
        assert (ready.status_code, ready.json()["status"], ready.json()["schema"]) == (200, "ready", "ok")

        def agent_call() -> None:
            with httpx.Client(timeout=60) as http:
                answers.append(
                    http.post(f"http://127.0.0.1:{port}{URL}", json=CALL, headers=bearer(world.token))
                )

        caller = threading.Thread(target=agent_call)
        caller.start()
        _wait_until(lambda: len(frozen.calls) == 1, "the call frozen at the provider")

        process.send_signal(signal.SIGTERM)
        _wait_until(lambda: _refused(port), "new connections refused")
        assert caller.is_alive() and answers == []  # the call in flight is still waiting on its provider
        assert process.poll() is None  # and the server waits for it

        frozen.release.set()
        caller.join(PATIENCE)
        assert not caller.is_alive()
        assert process.wait(PATIENCE) == 0
    (answer,) = answers
    assert answer.status_code == 200
    assert answer.json()["result"]["isError"] is False


@pytest.fixture
def draining():
    serving_state.begin_drain()
    yield
    serving_state._draining.clear()


def test_a_draining_process_is_not_ready_and_refuses_new_requests_fast(app, client, db, draining):
    ready = client.get("/readyz")
    assert ready.status_code == 503
    assert ready.headers["Connection"] == "close"
    assert ready.json == {
        "status": "draining",
        "database": "ok",
        "schema": "ok",
        "settings": "not checked",
        "catalog": {"status": "current"},
        "throttle_store": {"kind": "database", "status": "ok"},
    }
    assert client.get("/healthz").status_code == 200
    page = client.get("/login")
    assert (page.status_code, page.headers["Connection"], page.headers["Retry-After"]) == (503, "close", "5")
    assert serving_state.DRAINING_MESSAGE in page.text
    api = client.get("/api/companies")
    assert (api.status_code, api.json) == (503, {"error": serving_state.DRAINING_MESSAGE})


@pytest.fixture
def schema_behind(app, db):
    """The database one migration behind the code, as when new code starts before `db upgrade`; upgraded after."""
    db.session.remove()
    downgrade(revision="-1")
    app.extensions.pop("switchboard_schema_ready", None)
    try:
        yield
    finally:
        upgrade()
        assert schema.is_current()


def test_code_ahead_of_the_schema_answers_upgrading_until_db_upgrade(app, client, db, schema_behind):
    ready = client.get("/readyz")
    assert ready.status_code == 503
    (head,) = schema.code_heads()
    (behind,) = schema.database_heads()
    assert ready.json == {
        "status": "not ready",
        "database": "ok",
        "schema": f"The database is at revision {behind}; this version needs {head}",
        "settings": "unknown",
        "catalog": {"status": "current"},
        "throttle_store": {"kind": "database", "status": "ok"},
    }
    assert client.get("/healthz").status_code == 200
    page = client.get("/login")
    assert (page.status_code, page.headers["Retry-After"]) == (503, "5")
    assert "<h1>Upgrading</h1>" in page.text and schema.UPGRADING_MESSAGE in page.text
    api = client.get("/api/companies")
    assert (api.status_code, api.json) == (503, {"error": schema.UPGRADING_MESSAGE})
    upgrade()  # the deploy step runs: the same process serves again, no restart
    assert client.get("/login").status_code == 200
    assert client.get("/readyz").status_code == 200
