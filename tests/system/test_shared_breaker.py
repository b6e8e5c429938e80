"""A frozen provider is paused for every server process once `failure_threshold` calls timed out in all
(issue 31 item 2): two real gunicorn servers (one worker process each) on the test database call one frozen MCP
provider (official SDK, on loopback) through the gateway, in turn. The breaker lives in the database, so the third
timeout, wherever it happened, pauses the provider for both; the provider receives exactly three calls.
"""

from __future__ import annotations

from itertools import cycle

import httpx
from sqlalchemy import select

from app.models import ProviderBreaker
from tests.doors import bearer, refusal_fields
from tests.peers.mcp_servers import NOTES_KEY
from tests.services.gateway import test_gateway
from tests.services.gateway.test_cancellation import gunicorn_server
from tests.services.gateway.test_gateway import connect
from tests.web.agents import test_gateway_protocol

world = test_gateway.world
frozen = test_gateway_protocol.frozen

CALLS = 12
THRESHOLD = 3  # SWITCHBOARD_PROVIDER_BREAKER_TIMEOUTS's default, which the servers run with


def reason_of(url: str, token: str, n: int) -> str:
    call = {
        "jsonrpc": "2.0",
        "id": n,
        "method": "tools/call",
        "params": {"name": "slow__wait_for_release", "arguments": {"label": f"call {n}"}},
    }
    with httpx.Client(timeout=60) as http:
        answer = http.post(url, json=call, headers=bearer(token)).json()
    assert answer["result"]["isError"] is True, answer
    return refusal_fields(answer["result"])["reasonCode"]


def test_timeouts_across_two_processes_open_one_breaker(app, db, world, frozen, tmp_path):
    connect(world, "github", NOTES_KEY, name="Slow")
    frozen.reset()
    settings = {
        "SWITCHBOARD_PROVIDER_CALL_TIMEOUT_SECONDS": "1",  # a timeout is the outcome asserted, never a duration
        "SWITCHBOARD_PROVIDER_BREAKER_SECONDS": "600",  # no trial call during the test
    }
    with (
        gunicorn_server(app, tmp_path, frozen.url, extra_env=settings) as first,
        gunicorn_server(app, tmp_path, frozen.url, extra_env=settings) as second,
    ):
        servers = [url for url, _ in zip(cycle([first, second]), range(CALLS), strict=False)]
        reasons = [reason_of(url, world.token, n) for n, url in enumerate(servers)]
    assert reasons == ["provider_timeout"] * THRESHOLD + ["provider_paused"] * (CALLS - THRESHOLD)
    assert len(frozen.calls) == THRESHOLD  # the paused calls never reached the provider
    db.session.expire_all()
    (breaker,) = db.session.scalars(select(ProviderBreaker)).all()
    assert breaker.timeouts == THRESHOLD and breaker.open_until is not None
