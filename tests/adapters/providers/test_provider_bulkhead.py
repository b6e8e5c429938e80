"""A frozen provider takes a bounded share of the server: bulkhead, circuit breaker and call timeout.

The provider is a real MCP server (official SDK) whose tool does not answer until the test releases it; agents call
it through the gateway of a live threaded server, and the board and the runtime tools are used over real sockets
meanwhile. Nothing here measures time: the tests count what completed, what the provider received and which
reason codes came back.
"""

from __future__ import annotations

import re
import threading
import time

import httpx
import pytest

from app.adapters.providers import limits as provider_limits
from app.adapters.providers.errors import ProviderBusy, ProviderPaused, ProviderTimeout
from app.adapters.providers.mcp_client import call_tool
from app.catalog.schema import AppDefinition
from app.services.gateway import calls as gateway
from tests.conftest import serving
from tests.doors import SEARCH_URL, bearer, refusal_fields
from tests.factories import DEFAULT_PASSWORD
from tests.peers.mcp_servers import NOTES_KEY, start_frozen_server
from tests.services.gateway.test_gateway import connect

NOTES_AUTH = {"Authorization": f"Bearer {NOTES_KEY}"}
WAIT_TOOL = "github__wait_for_release"
LOGIN_CSRF_RE = re.compile(r'id="csrf_token" name="csrf_token" type="hidden" value="([^"]+)"')
# Upper bound for waiting on a condition (a frozen call to arrive, a thread to finish); never asserted.
PATIENCE = 30.0


@pytest.fixture
def frozen(mcp_server_factory):
    server = mcp_server_factory(start_frozen_server)
    yield server
    server.release.set()  # let any call still waiting finish before the peer stops


@pytest.fixture
def world(app, db, make, client, frozen):
    """Acme with an owner, an agent on a task with a live run, and GitHub (a bearer-key app) at the frozen peer."""
    saved = {
        key: app.config.get(key)
        for key in ("PROVIDER_SERVER_URLS", "PROVIDER_MAX_CONCURRENT_CALLS", "PROVIDER_CALL_TIMEOUT_SECONDS")
    }
    saved_breaker = app.config.get("PROVIDER_BREAKER_SECONDS")
    app.config["PROVIDER_SERVER_URLS"] = {"github": frozen.url}
    world = make.task_run(client=client)
    connect(world, "github", NOTES_KEY)
    yield world
    app.config.update(saved)
    app.config["PROVIDER_BREAKER_SECONDS"] = saved_breaker


def gateway_call(base: str, token: str, tool: str, arguments: dict) -> dict:
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": tool, "arguments": arguments},
    }
    with httpx.Client(timeout=120) as http:
        response = http.post(f"{base}/mcp/gateway", json=message, headers=bearer(token))
    assert response.status_code == 200, response.text
    return response.json()["result"]


def wait_until(condition, what: str) -> None:
    """Wait for a condition another thread brings about (a bound, never an assertion about time)."""
    deadline = time.monotonic() + PATIENCE
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting: {what}")
        time.sleep(0.01)


def browser_signed_in(base: str, email: str) -> httpx.Client:
    """A cookie-keeping HTTP client signed in through the real login form of the live server."""
    http = httpx.Client(base_url=base, timeout=60, follow_redirects=False)
    page = http.get("/login")
    token = LOGIN_CSRF_RE.search(page.text).group(1)
    response = http.post("/login", data={"csrf_token": token, "email": email, "password": DEFAULT_PASSWORD})
    assert response.status_code == 303, response.text
    return http


def reason(result: dict) -> str | None:
    return refusal_fields(result).get("reasonCode") if result.get("isError") else None


# --- the whole server stays responsive -----------------------------------------------------------------------------


def test_a_frozen_provider_takes_a_bounded_share_and_the_board_and_runtime_keep_answering(
    app, db, world, frozen
):
    app.config["PROVIDER_MAX_CONCURRENT_CALLS"] = 2
    app.config["PROVIDER_CALL_TIMEOUT_SECONDS"] = 120  # frozen for the whole test, released by the test
    key = provider_limits.provider_key(frozen.url)
    n_calls = 6
    with serving(app) as base:
        results: list[dict | None] = [None] * n_calls

        def agent_call(i: int) -> None:
            results[i] = gateway_call(base, world.token, WAIT_TOOL, {"label": f"call-{i}"})

        callers = [threading.Thread(target=agent_call, args=(i,)) for i in range(n_calls)]
        for caller in callers:
            caller.start()
        # Two calls reach the provider and hang there; the other four are answered at once.
        wait_until(lambda: len(frozen.calls) == 2, "two calls frozen at the provider")
        wait_until(lambda: sum(r is not None for r in results) == n_calls - 2, "the refused calls to return")
        refused = [r for r in results if r is not None]
        assert [reason(r) for r in refused] == ["provider_busy"] * (n_calls - 2)
        assert "GitHub is busy" in refused[0]["content"][0]["text"]
        assert "try again shortly" in refused[0]["content"][0]["text"]

        # While the provider is frozen: no database connection is held for it, and the board and the runtime
        # tools answer (counted, not timed).
        db.session.commit()
        assert provider_limits.in_flight(key) == 2
        assert db.engine.pool.checkedout() == 0
        board = browser_signed_in(base, world.owner.email)
        completed: list[tuple[str, int]] = []
        with httpx.Client(base_url=base, timeout=60) as runtime:
            for _ in range(5):
                completed.append(("board /", board.get("/").status_code))
                completed.append(("board /agents", board.get("/agents").status_code))
                search = runtime.post(SEARCH_URL, json={"query": "github"}, headers=bearer(world.token))
                completed.append(("connections_search", search.status_code))
        board.close()
        assert completed.count(("board /", 200)) == 5
        assert completed.count(("board /agents", 200)) == 5
        assert completed.count(("connections_search", 200)) == 5
        assert provider_limits.in_flight(key) == 2
        assert sum(r is None for r in results) == 2  # the two frozen calls are still waiting

        frozen.release.set()
        for caller in callers:
            caller.join(timeout=PATIENCE)
        assert not any(caller.is_alive() for caller in callers)
    # Released, the two frozen calls are answered by the provider; nothing else ever reached it.
    answered = sorted(r["content"][0]["text"] for r in results if not r.get("isError"))
    assert answered == sorted(f"released {args['label']}" for _, args in frozen.calls)
    assert len(answered) == 2 and len(frozen.calls) == 2
    assert provider_limits.in_flight(key) == 0


# --- timeout and circuit breaker through the gateway ---------------------------------------------------------------


def test_timeouts_say_the_provider_did_not_answer_and_open_the_breaker(app, db, world, frozen):
    app.config["PROVIDER_CALL_TIMEOUT_SECONDS"] = 0.3
    app.config["PROVIDER_BREAKER_SECONDS"] = 600  # stays open for the rest of the test
    with serving(app) as base:
        timed_out = [gateway_call(base, world.token, WAIT_TOOL, {"label": f"t{i}"}) for i in range(3)]
        paused = gateway_call(base, world.token, WAIT_TOOL, {"label": "after"})
        ping = gateway_call(base, world.token, "github__ping", {})

    assert [reason(r) for r in timed_out] == ["provider_timeout"] * 3
    text = timed_out[0]["content"][0]["text"]
    assert "GitHub did not answer within 0.3 seconds" in text
    assert "Could not reach" not in text
    # The fourth call and a call of another tool of the same provider are answered at once, not sent.
    assert reason(paused) == "provider_paused" and reason(ping) == "provider_paused"
    assert "did not answer the last 3 calls in time" in paused["content"][0]["text"]
    assert 0 < refusal_fields(paused)["retryAfterSeconds"] <= 600
    assert [name for name, _ in frozen.calls] == ["wait_for_release"] * 3
    outcomes = [row.details["outcome"] for row in _gateway_activity(db)]
    assert outcomes == ["provider_timeout"] * 3 + ["provider_paused"] * 2


def test_after_the_pause_one_trial_call_closes_the_breaker(app, db, world, frozen):
    app.config["PROVIDER_CALL_TIMEOUT_SECONDS"] = 0.3
    # The pause outlasts the next call even on a loaded machine, and the trial gets a timeout it cannot run into:
    # the provider has recovered, so only a slow machine could make it late.
    app.config["PROVIDER_BREAKER_SECONDS"] = 2.0
    with serving(app) as base:
        for i in range(3):
            assert (
                reason(gateway_call(base, world.token, WAIT_TOOL, {"label": f"t{i}"})) == "provider_timeout"
            )
        frozen.release.set()  # the provider recovers
        assert reason(gateway_call(base, world.token, "github__ping", {})) == "provider_paused"
        app.config["PROVIDER_CALL_TIMEOUT_SECONDS"] = 10.0
        time.sleep(2.1)  # past the pause (a wait, not a measurement)
        trial = gateway_call(base, world.token, WAIT_TOOL, {"label": "trial"})
        after = gateway_call(base, world.token, "github__ping", {})
    assert not trial.get("isError") and trial["content"][0]["text"] == "released trial"
    assert not after.get("isError") and after["content"][0]["text"] == "pong"


def _gateway_activity(db):
    from sqlalchemy import select

    from app.models import ActivityLog

    db.session.expire_all()
    return db.session.scalars(
        select(ActivityLog)
        .where(ActivityLog.action == gateway.ACTIVITY_ACTION)
        .order_by(ActivityLog.created_at)
    ).all()


# --- the provider client with limits -------------------------------------------------------------------------------


def test_a_full_bulkhead_refuses_at_once_without_contacting_the_provider(frozen):
    limits = provider_limits.Limits(max_concurrent=1)
    holder = threading.Thread(
        target=call_tool,
        args=(frozen.url,),
        kwargs={
            "headers": NOTES_AUTH,
            "tool_name": "wait_for_release",
            "arguments": {"label": "first"},
            "timeout": 60,
            "limits": limits,
        },
    )
    holder.start()
    wait_until(lambda: len(frozen.calls) == 1, "the first call to reach the provider")
    requests_before = len(frozen.requests)
    with pytest.raises(ProviderBusy) as caught:
        call_tool(frozen.url, headers=NOTES_AUTH, tool_name="ping", arguments={}, limits=limits)
    assert caught.value.message == (
        "The provider is busy: 1 calls to it are already in progress. Try again shortly."
    )
    assert len(frozen.requests) == requests_before
    # Without limits (or for another provider) nothing is shared: the same call runs.
    assert call_tool(frozen.url, headers=NOTES_AUTH, tool_name="ping", arguments={})["isError"] is False
    frozen.release.set()
    holder.join(timeout=PATIENCE)
    assert not holder.is_alive()
    assert provider_limits.in_flight(provider_limits.provider_key(frozen.url)) == 0


def test_the_breaker_counts_consecutive_timeouts_only(frozen):
    limits = provider_limits.Limits(max_concurrent=4, failure_threshold=3, reset_seconds=600)

    def wait_call():
        return call_tool(
            frozen.url,
            headers=NOTES_AUTH,
            tool_name="wait_for_release",
            arguments={"label": "x"},
            timeout=0.3,
            limits=limits,
        )

    for _ in range(2):
        with pytest.raises(ProviderTimeout) as caught:
            wait_call()
    assert caught.value.message == "The provider's MCP server did not answer within 0.3 seconds."
    # An answer in between resets the count: two more timeouts do not open the breaker.
    call_tool(frozen.url, headers=NOTES_AUTH, tool_name="ping", arguments={}, limits=limits)
    for _ in range(2):
        with pytest.raises(ProviderTimeout):
            wait_call()
    call_tool(frozen.url, headers=NOTES_AUTH, tool_name="ping", arguments={}, limits=limits)
    for _ in range(3):
        with pytest.raises(ProviderTimeout):
            wait_call()
    calls_before = len(frozen.calls)
    with pytest.raises(ProviderPaused) as paused:
        call_tool(frozen.url, headers=NOTES_AUTH, tool_name="ping", arguments={}, limits=limits)
    assert paused.value.timeouts == 3
    assert "try again in" in paused.value.message
    assert len(frozen.calls) == calls_before


def test_the_breaker_lets_one_trial_through_and_a_timed_out_trial_reopens_it():
    key = "http://provider.example:80/mcp"
    limits = provider_limits.Limits(max_concurrent=4, failure_threshold=3, reset_seconds=0.05)

    def refused() -> bool:
        try:
            with provider_limits.slot(key, limits):
                return False
        except provider_limits.Paused:
            return True

    for _ in range(3):
        with provider_limits.slot(key, limits) as call:
            call.timed_out()
    assert refused()
    time.sleep(0.1)  # past the pause (a wait, not a measurement)
    # The trial times out: open again at once, for another pause.
    with provider_limits.slot(key, limits) as call:
        call.timed_out()
    assert refused()
    time.sleep(0.1)
    # While the trial runs, everyone else is still refused; its answer closes the breaker.
    with provider_limits.slot(key, limits):
        assert refused()
    with provider_limits.slot(key, limits), provider_limits.slot(key, limits):
        assert provider_limits.in_flight(key) == 2


def test_provider_keys_ignore_the_query_string_and_case():
    assert provider_limits.provider_key("https://MCP.Example.com/mcp?api_key=secret") == (
        "https://mcp.example.com:443/mcp"
    )
    assert provider_limits.provider_key("http://127.0.0.1:8080/mcp") == "http://127.0.0.1:8080/mcp"


# --- the call timeout setting ----------------------------------------------------------------------------------


def _definition(**extra) -> AppDefinition:
    return AppDefinition.model_validate(
        {
            "schemaVersion": 1,
            "slug": "slowpoke",
            "name": "Slowpoke",
            "description": "A slow provider.",
            "categories": ["developer"],
            "branding": {"logoUrl": "/static/img/apps/github.svg"},
            "methods": [
                {
                    "key": "api-key",
                    "label": "API key",
                    "transport": "mcp_remote",
                    "auth": "none",
                    "grantKinds": ["organization"],
                }
            ],
            **extra,
        },
        context={"check_files": False},
    )


def test_call_timeout_comes_from_the_app_definition_else_the_setting(app, db):
    saved = app.config["PROVIDER_CALL_TIMEOUT_SECONDS"]
    app.config["PROVIDER_CALL_TIMEOUT_SECONDS"] = 12.0
    try:
        assert gateway.call_timeout(_definition(callTimeoutSeconds=90)) == 90.0
        assert gateway.call_timeout(_definition()) == 12.0
    finally:
        app.config["PROVIDER_CALL_TIMEOUT_SECONDS"] = saved
    for bad in (0, -1, 601, "soon"):
        with pytest.raises(ValueError):
            _definition(callTimeoutSeconds=bad)


def test_the_call_settings_are_read_from_the_environment(monkeypatch, tmp_path):
    from app.config import load_config

    monkeypatch.setenv("SWITCHBOARD_PROVIDER_CALL_TIMEOUT_SECONDS", "7.5")
    monkeypatch.setenv("SWITCHBOARD_PROVIDER_MAX_CONCURRENT_CALLS", "3")
    monkeypatch.setenv("SWITCHBOARD_PROVIDER_BREAKER_TIMEOUTS", "5")
    monkeypatch.setenv("SWITCHBOARD_PROVIDER_BREAKER_SECONDS", "45")
    config = load_config(str(tmp_path))
    assert config["PROVIDER_CALL_TIMEOUT_SECONDS"] == 7.5
    assert config["PROVIDER_MAX_CONCURRENT_CALLS"] == 3
    assert config["PROVIDER_BREAKER_TIMEOUTS"] == 5
    assert config["PROVIDER_BREAKER_SECONDS"] == 45.0
    assert config["OUTBOUND_TIMEOUT_SECONDS"] == 10.0
