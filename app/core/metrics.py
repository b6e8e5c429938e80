"""Prometheus metrics: what operators watch (issue 31 item 10).

Counters and histograms live in each process (prometheus_client's default registry; under gunicorn with
`PROMETHEUS_MULTIPROC_DIR` set, in files every process of the host writes and one scrape adds up). What is shared
state (provider breakers, queued wakes, the two outboxes) is read from the database at scrape time
(`DatabaseState`), so every instance reports the same figures whichever process answers the scrape.

Delivery and wake latencies are observed by the process that delivers or starts the work (a `switchboard worker`, or
the web process running the worker in-process): with `PROMETHEUS_MULTIPROC_DIR` shared by the workers and the web
processes of a host, the web's scrape includes them.

Labels stay bounded: a route is its endpoint name (never the raw path), a connection its id, an outcome one of the
gateway's outcome codes. Nothing here carries arguments, results or credentials.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator

from prometheus_client import REGISTRY, CollectorRegistry, Counter, Histogram, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"

REQUEST_SECONDS = Histogram(
    "switchboard_http_request_duration_seconds",
    "Time to answer an HTTP request, by route (Flask endpoint name) and method.",
    ["endpoint", "method"],
)
REQUESTS = Counter(
    "switchboard_http_requests",
    "HTTP requests answered, by route (Flask endpoint name), method and status code.",
    ["endpoint", "method", "status"],
)
GATEWAY_CALLS = Counter(
    "switchboard_gateway_calls",
    "Gateway tools/call requests, by connection id and outcome (ok, tool_error, refused, provider_timeout, ...).",
    ["connection", "outcome"],
)
GATEWAY_CALL_SECONDS = Histogram(
    "switchboard_gateway_call_duration_seconds",
    "Time from a gateway tools/call arriving to its outcome, by connection id and outcome.",
    ["connection", "outcome"],
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120),
)
LATENCY_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 300, 900, 3600)
DELIVERY_SECONDS = Histogram(
    "switchboard_delivery_latency_seconds",
    "Time from an outbox row being written to its delivery, by outbox: continuations (a connection card's outcome "
    "handed to its agent as a wake) and notifications (a mail or webhook sent).",
    ["outbox"],
    buckets=LATENCY_BUCKETS,
)
WAKE_SECONDS = Histogram(
    "switchboard_wake_latency_seconds",
    "Time from a run being queued to a worker starting it, by kind: continuation (woken by a connection card's "
    "outcome) or other.",
    ["kind"],
    buckets=LATENCY_BUCKETS,
)
THROTTLE_REFUSALS = Counter(
    "switchboard_throttle_refusals",
    "Requests refused by the sign-in / authentication throttle: reason is 'throttled' (429) or "
    "'store_unavailable' (503).",
    ["door", "reason"],
)


def observe_request(endpoint: str | None, method: str, status: int, seconds: float) -> None:
    route = endpoint or "unmatched"
    REQUEST_SECONDS.labels(route, method).observe(seconds)
    REQUESTS.labels(route, method, str(status)).inc()


def observe_gateway_call(connection_id: object | None, outcome: str, seconds: float) -> None:
    connection = str(connection_id) if connection_id is not None else "none"
    GATEWAY_CALLS.labels(connection, outcome).inc()
    GATEWAY_CALL_SECONDS.labels(connection, outcome).observe(seconds)


def observe_delivery(outbox: str, seconds: float) -> None:
    DELIVERY_SECONDS.labels(outbox).observe(max(seconds, 0.0))


def observe_wake(continuation: bool, seconds: float) -> None:
    WAKE_SECONDS.labels("continuation" if continuation else "other").observe(max(seconds, 0.0))


def count_throttle_refusal(door: str, status: int) -> None:
    THROTTLE_REFUSALS.labels(door, "throttled" if status == 429 else "store_unavailable").inc()


class DatabaseState(Collector):
    """Shared state read at scrape time (a handful of aggregate queries; needs an app context)."""

    def collect(self) -> Iterator[Metric]:
        from sqlalchemy import func, select

        from app.extensions import db
        from app.models import ConnectionIntentDelivery, NotificationDelivery, WakeupRequest
        from app.models.base import as_utc, utcnow
        from app.models.shared_state import ProviderBreaker

        now = time.time()
        open_breakers = GaugeMetricFamily(
            "switchboard_provider_breaker_open",
            "1 while calls to the provider are paused by its circuit breaker (shared by every process), else 0; "
            "the provider is named by a hash of its server address.",
            labels=["provider"],
        )
        timeouts = GaugeMetricFamily(
            "switchboard_provider_breaker_timeouts",
            "Consecutive timeouts the provider's circuit breaker has counted.",
            labels=["provider"],
        )
        for key_hash, count, open_until in db.session.execute(
            select(ProviderBreaker.key_hash, ProviderBreaker.timeouts, ProviderBreaker.open_until)
        ):
            provider = key_hash[:16]
            open_breakers.add_metric([provider], 1.0 if open_until is not None and open_until > now else 0.0)
            timeouts.add_metric([provider], float(count))
        yield open_breakers
        yield timeouts

        queued = db.session.scalar(
            select(func.count()).select_from(WakeupRequest).where(WakeupRequest.status == "queued")
        )
        yield GaugeMetricFamily(
            "switchboard_wakes_queued", "Wake requests waiting for a worker.", value=float(queued or 0)
        )

        depth = GaugeMetricFamily(
            "switchboard_outbox_depth",
            "Rows waiting to be delivered: continuations (connection card outcomes to agents) and notifications.",
            labels=["outbox"],
        )
        oldest = GaugeMetricFamily(
            "switchboard_outbox_oldest_pending_seconds",
            "Age of the oldest row still waiting in the outbox (0 when empty): the delivery latency to alert on.",
            labels=["outbox"],
        )
        for name, model, pending in (
            ("continuations", ConnectionIntentDelivery, ConnectionIntentDelivery.delivered_at.is_(None)),
            (
                "notifications",
                NotificationDelivery,
                NotificationDelivery.delivered_at.is_(None) & NotificationDelivery.gave_up_at.is_(None),
            ),
        ):
            count, first = db.session.execute(
                select(func.count(), func.min(model.created_at)).where(pending)
            ).one()
            depth.add_metric([name], float(count or 0))
            age = (utcnow() - as_utc(first)).total_seconds() if first is not None else 0.0
            oldest.add_metric([name], max(age, 0.0))
        yield depth
        yield oldest
        db.session.rollback()  # a read: end the scrape's transaction at once


def exposition() -> bytes:
    """The scrape body: this process's metrics (or every process's, in multi-process mode) plus shared state."""
    if os.environ.get(MULTIPROC_ENV):
        from prometheus_client import multiprocess

        processes = CollectorRegistry()
        multiprocess.MultiProcessCollector(processes)
        local = generate_latest(processes)
    else:
        local = generate_latest(REGISTRY)
    state = CollectorRegistry(auto_describe=False)
    state.register(DatabaseState())
    return local + generate_latest(state)
