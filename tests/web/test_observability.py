"""Operators can see what happens (issue 31 item 10): `/metrics` scraped from a live server, protected by its token;
the request id on every answer; JSON log lines carrying it.

Gateway calls are made by the official MCP SDK client against `/mcp/gateway` on a live server, reaching the real notes
provider peer on loopback; the figures are read back by scraping `/metrics` over HTTP and parsing the exposition with
prometheus_client's own parser.
"""

from __future__ import annotations

import io
import json
import logging
import time

import pytest
import requests
from prometheus_client.parser import text_string_to_metric_families
from sqlalchemy import func, select

from app.config import load_config
from app.core import json_logs
from app.models import ConnectionIntentDelivery, NotificationDelivery, WakeupRequest
from app.models.keys import wake_key
from app.models.shared_state import ProviderBreaker
from app.services.intents import resolution
from app.services.runs.wakeups import claim_next_run
from app.web.observability import REQUEST_ID_HEADER
from app.workers import continuations, outbox
from tests.conftest import serving, sign_in
from tests.peers.mcp_servers import NOTES_KEY
from tests.peers.notification_peers import start_webhook_receiver
from tests.services.gateway.test_gateway import connect, run_agent
from tests.web.test_auth import post_login

TOKEN = "metrics-token-for-the-test"


@pytest.fixture
def metrics_on(app):
    saved = app.config.get("METRICS_TOKEN")
    app.config["METRICS_TOKEN"] = TOKEN
    yield
    app.config["METRICS_TOKEN"] = saved


@pytest.fixture
def base(app, db):
    with serving(app) as url:
        yield url


@pytest.fixture
def world(make, client, providers):
    return make.task_run(client=client)


def scrape(base: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    response = requests.get(f"{base}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    assert response.status_code == 200, response.text
    assert response.headers["Content-Type"].startswith("text/plain; version=")
    samples = {}
    for family in text_string_to_metric_families(response.text):
        for sample in family.samples:
            samples[(sample.name, tuple(sorted(sample.labels.items())))] = sample.value
    return samples


def value(samples, name: str, **labels: str) -> float:
    return samples.get((name, tuple(sorted(labels.items()))), 0.0)


def test_metrics_are_off_without_a_token_and_refused_without_the_right_one(app, base, metrics_on):
    assert load_config(app.instance_path)["METRICS_TOKEN"] is None  # off by default
    assert requests.get(f"{base}/metrics", timeout=10).status_code == 401
    wrong = requests.get(f"{base}/metrics", headers={"Authorization": "Bearer nope"}, timeout=10)
    assert wrong.status_code == 401
    assert wrong.headers["WWW-Authenticate"] == 'Bearer realm="metrics"'
    assert "switchboard_" not in wrong.text
    basic = requests.get(f"{base}/metrics", headers={"Authorization": f"Basic {TOKEN}"}, timeout=10)
    assert basic.status_code == 401
    app.config["METRICS_TOKEN"] = None
    off = requests.get(f"{base}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10)
    assert off.status_code == 404
    assert "switchboard_" not in off.text


def test_scrape_shows_gateway_calls_request_latency_and_shared_state_moving(app, db, world, base, metrics_on):
    notes = connect(world, "github", NOTES_KEY)
    before = scrape(base)

    async def scenario(session):
        first = await session.call_tool("github__search_notes", {"query": "alpha"})
        second = await session.call_tool("github__search_notes", {"query": "beta"})
        return first, second

    first, second = run_agent(f"{base}/mcp/gateway", world.token, scenario)
    assert not first.is_error and not second.is_error
    db.session.add(ProviderBreaker(key_hash="b" * 64, timeouts=3, open_until=time.time() + 600))
    db.session.add(ProviderBreaker(key_hash="c" * 64, timeouts=1, open_until=None))
    db.session.commit()
    after = scrape(base)

    calls = {"connection": notes["id"], "outcome": "ok"}
    assert (
        value(after, "switchboard_gateway_calls_total", **calls)
        - value(before, "switchboard_gateway_calls_total", **calls)
        == 2
    )
    assert (
        value(after, "switchboard_gateway_call_duration_seconds_count", **calls)
        - value(before, "switchboard_gateway_call_duration_seconds_count", **calls)
        == 2
    )
    assert value(after, "switchboard_gateway_call_duration_seconds_sum", **calls) > value(
        before, "switchboard_gateway_call_duration_seconds_sum", **calls
    )
    # initialize, notifications/initialized, the tools/list the SDK's call_tool makes first (to check results against
    # output schemas) and the two calls: five POSTs, counted under the endpoint name.
    route = {"endpoint": "gateway.rpc", "method": "POST"}
    assert (
        value(after, "switchboard_http_request_duration_seconds_count", **route)
        - value(before, "switchboard_http_request_duration_seconds_count", **route)
        == 5
    )
    assert (
        value(after, "switchboard_http_requests_total", **route, status="200")
        - value(before, "switchboard_http_requests_total", **route, status="200")
        == 4
    )
    assert (
        value(after, "switchboard_http_requests_total", **route, status="202")
        - value(before, "switchboard_http_requests_total", **route, status="202")
        == 1
    )
    # No raw path (it would carry ids) is ever a label.
    assert not [key for key in after if any(v.startswith("/") for _, v in key[1])]

    assert value(after, "switchboard_provider_breaker_open", provider="b" * 16) == 1
    assert value(after, "switchboard_provider_breaker_timeouts", provider="b" * 16) == 3
    assert value(after, "switchboard_provider_breaker_open", provider="c" * 16) == 0
    db.session.expire_all()
    queued = db.session.scalar(
        select(func.count()).select_from(WakeupRequest).where(WakeupRequest.status == "queued")
    )
    assert ("switchboard_wakes_queued", ()) in after
    assert value(after, "switchboard_wakes_queued") == queued
    continuations = db.session.scalar(
        select(func.count())
        .select_from(ConnectionIntentDelivery)
        .where(ConnectionIntentDelivery.delivered_at.is_(None))
    )
    notifications = db.session.scalar(
        select(func.count())
        .select_from(NotificationDelivery)
        .where(NotificationDelivery.delivered_at.is_(None), NotificationDelivery.gave_up_at.is_(None))
    )
    assert ("switchboard_outbox_depth", (("outbox", "continuations"),)) in after
    assert value(after, "switchboard_outbox_depth", outbox="continuations") == continuations
    assert value(after, "switchboard_outbox_depth", outbox="notifications") == notifications
    assert ("switchboard_outbox_oldest_pending_seconds", (("outbox", "notifications"),)) in after
    # Nothing a call carried reaches the exposition.
    body = requests.get(f"{base}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=10).text
    assert NOTES_KEY not in body and "alpha" not in body and world.token not in body


def test_throttle_refusals_are_counted(app, client, db, make, base, metrics_on):
    make.member(make.company(), user=make.user(email="ivy@example.com"))
    before = scrape(base)
    for _ in range(5):
        assert post_login(client, "ivy@example.com", "wrong password").status_code == 401
    assert post_login(client, "ivy@example.com", "wrong password").status_code == 429
    after = scrape(base)
    labels = {"door": "sign_in", "reason": "throttled"}
    assert (
        value(after, "switchboard_throttle_refusals_total", **labels)
        - value(before, "switchboard_throttle_refusals_total", **labels)
        == 1
    )


def test_every_answer_carries_a_request_id(base):
    fresh = requests.get(f"{base}/healthz", timeout=10)
    other = requests.get(f"{base}/healthz", timeout=10)
    assert len(fresh.headers[REQUEST_ID_HEADER]) == 32
    assert fresh.headers[REQUEST_ID_HEADER] != other.headers[REQUEST_ID_HEADER]
    given = requests.get(f"{base}/healthz", headers={REQUEST_ID_HEADER: "lb-7f3a.2_x"}, timeout=10)
    assert given.headers[REQUEST_ID_HEADER] == "lb-7f3a.2_x"
    refused = requests.get(f"{base}/nowhere", headers={REQUEST_ID_HEADER: "no spaces <b>"}, timeout=10)
    assert refused.status_code == 404
    assert len(refused.headers[REQUEST_ID_HEADER]) == 32


def test_json_log_lines_carry_the_request_id(app):
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(json_logs.JsonFormatter())
    handler.addFilter(json_logs.RequestIdFilter())
    logger = logging.getLogger("tests.observability")
    logger.addHandler(handler)
    logger.setLevel(logging.INFO)
    try:
        with app.test_request_context("/"):
            from flask import g

            g.request_id = "req-42"
            logger.info("provider %s answered", "notes")
        logger.warning("outside a request")
    finally:
        logger.removeHandler(handler)
    inside, outside = (json.loads(line) for line in stream.getvalue().splitlines())
    assert inside.pop("time").endswith("+00:00")
    assert inside == {
        "level": "INFO",
        "logger": "tests.observability",
        "message": "provider notes answered",
        "request_id": "req-42",
    }
    outside.pop("time")
    assert outside == {"level": "WARNING", "logger": "tests.observability", "message": "outside a request"}


def test_observability_settings_default_off_and_refuse_unknown_values(app, monkeypatch):
    config = load_config(app.instance_path)
    assert (config["TRACING"], config["LOG_FORMAT"], config["METRICS_TOKEN"]) == ("off", "text", None)
    from app.core import tracing

    with pytest.raises(ValueError, match="SWITCHBOARD_TRACING must be one of off, otlp, console"):
        tracing.configure("jaeger")
    with pytest.raises(ValueError, match="SWITCHBOARD_LOG_FORMAT must be one of text, json"):
        json_logs.configure("xml")


@pytest.fixture
def receiver(app):
    peer = start_webhook_receiver()
    saved = app.config.get("OUTBOUND_ALLOWED_HOSTS")
    app.config["OUTBOUND_ALLOWED_HOSTS"] = ["127.0.0.1"]
    yield peer
    app.config["OUTBOUND_ALLOWED_HOSTS"] = saved
    peer.stop()


def test_delivery_and_wake_latencies_are_observed(app, client, db, make, base, metrics_on, receiver):
    company, owner, agent, issue = make.team(adapter_type="process", adapter_config={"command": ["true"]})
    csrf = sign_in(client, owner)
    hook = client.post(
        "/settings/webhooks",
        data={"csrf_token": csrf, "url": receiver.url, "events": ["connection_intent.resolved"]},
    )
    assert hook.status_code == 201, hook.status_code
    card = make.card(issue, agent, owner, run_finished=True)
    resolution.decline_intent(card.id, owner.id, "Not now")
    db.session.commit()
    before = scrape(base)

    assert continuations.sweep_pending() == {continuations.WOKEN: 1}
    assert outbox.sweep_pending() == {outbox.DELIVERED: 1}
    (run_id,) = db.session.scalars(
        select(WakeupRequest.run_id).where(WakeupRequest.idempotency_key == wake_key(card.id, "declined"))
    ).all()
    claimed = claim_next_run(run_id)
    assert claimed is not None and claimed.id == run_id
    db.session.commit()
    after = scrape(base)

    def grew(name: str, **labels: str) -> float:
        return value(after, name, **labels) - value(before, name, **labels)

    assert grew("switchboard_delivery_latency_seconds_count", outbox="continuations") == 1
    assert grew("switchboard_delivery_latency_seconds_count", outbox="notifications") == 1
    assert grew("switchboard_delivery_latency_seconds_bucket", outbox="continuations", le="+Inf") == 1
    assert grew("switchboard_wake_latency_seconds_count", kind="continuation") == 1
    assert grew("switchboard_wake_latency_seconds_count", kind="other") == 0
    # A row delivered again is not observed again.
    assert continuations.sweep_pending() == {} and outbox.sweep_pending() == {}
    again = scrape(base)
    assert value(again, "switchboard_delivery_latency_seconds_count", outbox="continuations") == value(
        after, "switchboard_delivery_latency_seconds_count", outbox="continuations"
    )
