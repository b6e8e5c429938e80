"""Rate limits hold across server processes (issue 28 item 3): a burst of gateway calls spread over two real
Switchboard server processes on loopback, sharing one database (the test's SQLite file or PostgreSQL database),
reaches the provider exactly as often as the limit allows.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
from contextlib import ExitStack, contextmanager

import httpx

from tests.doors import GATEWAY_URL, bearer, refusal_fields
from tests.paths import ROOT
from tests.peers.mcp_servers import NOTES_KEY
from tests.services.gateway import test_gateway
from tests.services.gateway.test_call_limits import set_limits
from tests.services.gateway.test_gateway import connect

world = test_gateway.world

START_SECONDS = 60
BURST = 12
LIMIT = 5


def _portable(config) -> dict:
    """The test app's settings that survive JSON (the others are the defaults the child computes the same way)."""
    portable = {}
    for key, value in config.items():
        try:
            json.dumps(value)
        except TypeError:
            continue
        portable[key] = value
    return portable


@contextmanager
def app_process(app):
    # A bulkhead of the burst's size: every call the limit lets through reaches the provider (4 could all land on
    # one process and the fifth be answered `provider_busy`).
    config = {**_portable(app.config), "PROVIDER_MAX_CONCURRENT_CALLS": BURST}
    env = {**os.environ, "SWITCHBOARD_TEST_APP_CONFIG": json.dumps(config)}
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.peers.app_server"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        timer = threading.Timer(START_SECONDS, process.kill)
        timer.start()
        line = process.stdout.readline()
        timer.cancel()
        assert line.startswith("PORT "), line or process.stderr.read()
        yield f"http://127.0.0.1:{int(line.split()[1])}"
    finally:
        process.terminate()
        process.wait(START_SECONDS)


def test_a_burst_over_two_server_processes_holds_the_limit(app, db, world, providers, notes_server):
    connection = connect(world, "github", NOTES_KEY, name="Notes 1")
    assert set_limits(world, connection["id"], read_run_minute=LIMIT).status_code == 303
    with ExitStack() as stack:
        bases = [stack.enter_context(app_process(app)) for _ in range(2)]
        barrier = threading.Barrier(BURST)
        results: list[dict | None] = [None] * BURST

        def agent_call(slot: int) -> None:
            message = {
                "jsonrpc": "2.0",
                "id": slot,
                "method": "tools/call",
                # Different arguments each: the loop breaker stays out of it; only the rate limit counts.
                "params": {"name": "notes-1__search_notes", "arguments": {"query": f"q{slot}"}},
            }
            barrier.wait(START_SECONDS)
            response = httpx.post(
                bases[slot % 2] + GATEWAY_URL,
                json=message,
                headers=bearer(world.token),
                timeout=START_SECONDS,
            )
            assert response.status_code == 200, response.text
            results[slot] = response.json()["result"]

        threads = [threading.Thread(target=agent_call, args=(slot,)) for slot in range(BURST)]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(START_SECONDS)
    assert all(result is not None for result in results), results
    passed = [r for r in results if not r["isError"]]
    refused = [refusal_fields(r) for r in results if r["isError"]]
    assert len(passed) == LIMIT, [r["reasonCode"] for r in refused]
    assert len(refused) == BURST - LIMIT and {r["reasonCode"] for r in refused} == {"rate_limited"}
    assert len([c for c in notes_server.calls if c[0] == "search_notes"]) == LIMIT
    # Every refusal is on the run's timeline, whichever process made it.
    page = world.client.get(f"/runs/{world.run.id}").get_data(as_text=True)
    assert page.count('data-decision="rate_limited"') == BURST - LIMIT
