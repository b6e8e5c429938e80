"""An agent's `notifications/cancelled` cancels its gateway call when it lands in another server process.

Two real gunicorn servers (one worker each, the production `gunicorn.conf.py`) share the test database: the call goes
to one, the cancellation to the other. The call's process finds the cancellation in the database while it waits for
the provider, and the provider is told (`notifications/cancelled`).
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
from sqlalchemy import select

from app.adapters.providers import call_control
from app.models import GatewayCancellation
from app.services.gateway import cancellation
from tests import servers
from tests.doors import bearer, refusal_fields
from tests.paths import ROOT
from tests.peers.mcp_servers import NOTES_KEY
from tests.services.gateway import test_gateway
from tests.services.gateway.test_gateway import URL, connect
from tests.web.agents import test_gateway_protocol

world = test_gateway.world
frozen = test_gateway_protocol.frozen

PROJECT_ROOT = ROOT
GUNICORN = servers.GUNICORN
PATIENCE = servers.PATIENCE
BOOT_PATIENCE = servers.BOOT_PATIENCE
CALL_TIMEOUT = 20  # the provider call's own timeout: a cancellation must end the call long before it
_free_port = servers.free_port
_wait_until = servers.wait_until
_serving = servers.serving


@contextmanager
def gunicorn_server(
    app, tmp_path: Path, provider_url: str | None = None, extra_env: dict[str, str] | None = None
) -> Iterator[str]:
    """One gunicorn server (one worker process) on the test database; yields its gateway URL."""
    env = {
        "SWITCHBOARD_PROVIDER_SERVER_URLS": json.dumps({"github": provider_url} if provider_url else {}),
        "SWITCHBOARD_PROVIDER_CALL_TIMEOUT_SECONDS": str(CALL_TIMEOUT),
        **(extra_env or {}),
    }
    processes = int(env.pop("WEB_CONCURRENCY", "1"))
    with servers.gunicorn(app, tmp_path, processes=processes, extra_env=env) as instance:
        yield f"{instance.base}{URL}"


def _posts(server) -> int:
    return sum(1 for record in server.requests if record.method == "POST")


def test_a_cancellation_in_another_process_cancels_the_call(app, db, world, frozen, tmp_path):
    connect(world, "github", NOTES_KEY, name="Slow")
    frozen.reset()
    call = {
        "jsonrpc": "2.0",
        "id": "call-1",
        "method": "tools/call",
        "params": {"name": "slow__wait_for_release", "arguments": {"label": "a"}},
    }
    cancel = {"jsonrpc": "2.0", "method": "notifications/cancelled", "params": {"requestId": "call-1"}}
    answers: list[dict] = []
    with (
        gunicorn_server(app, tmp_path, frozen.url) as calling,
        gunicorn_server(app, tmp_path, frozen.url) as other,
    ):

        def agent_call():
            with httpx.Client(timeout=60) as http:
                answers.append(http.post(calling, json=call, headers=bearer(world.token)).json())

        caller = threading.Thread(target=agent_call)
        caller.start()
        _wait_until(lambda: len(frozen.calls) == 1, "the call frozen at the provider")
        told_before = _posts(frozen)
        with httpx.Client(timeout=60) as http:
            assert http.post(other, json=cancel, headers=bearer(world.token)).status_code == 202
        caller.join(PATIENCE)
        assert not caller.is_alive()
        # The provider was told: one more POST, its notifications/cancelled.
        _wait_until(lambda: _posts(frozen) == told_before + 1, "the provider told to stop")
    (answer,) = answers
    assert answer["result"]["isError"] is True
    assert refusal_fields(answer["result"])["reasonCode"] == "cancelled"  # not "timeout": no clock needed
    assert json.dumps(answer).count("released") == 0  # the provider never answered it
    db.session.expire_all()
    (row,) = db.session.scalars(select(GatewayCancellation)).all()
    assert (row.run_id, row.request_key) == (world.run.id, '"call-1"')


def test_a_recorded_cancellation_counts_only_for_calls_that_started_before_it(app, db, world):
    cancellation.request_cancel(world.run.id, 7)  # nothing runs it in this process: recorded
    db.session.commit()
    assert cancellation.watcher(world.run.id, 7)() is True
    assert cancellation.watcher(world.run.id, "7")() is False  # "7" and 7 are different request ids
    assert cancellation.watcher(world.run.id, 8)() is False
    row = db.session.scalars(select(GatewayCancellation)).one()
    row.created_at = row.created_at - cancellation.SLACK * 2  # written well before a new call with that id
    db.session.commit()
    assert cancellation.watcher(world.run.id, 7)() is False


def test_a_cancellation_in_the_calls_own_process_is_not_recorded(app, db, world):
    control = call_control.CallControl()
    with call_control.in_flight(world.run.id, 3, control):
        cancellation.request_cancel(world.run.id, 3)
    assert control.cancelled is True
    for not_an_id in (None, True, 1.5, {"id": 1}):
        cancellation.request_cancel(world.run.id, not_an_id)
    db.session.commit()
    assert db.session.scalars(select(GatewayCancellation)).all() == []


def test_old_rows_are_deleted_when_a_new_one_is_written(app, db, world):
    cancellation.request_cancel(world.run.id, 1)
    db.session.commit()
    old = db.session.scalars(select(GatewayCancellation)).one()
    old.created_at = old.created_at - cancellation.RETENTION * 2
    db.session.commit()
    cancellation.request_cancel(world.run.id, 2)
    db.session.commit()
    db.session.expire_all()
    keys = [row.request_key for row in db.session.scalars(select(GatewayCancellation))]
    assert keys == ["2"]
