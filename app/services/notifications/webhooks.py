"""Company webhook endpoints and signed delivery (Standard Webhooks, with the `standardwebhooks` package).

An endpoint has a URL (checked by the outbound guard when saved and again at every send, and reached only through
the pinned transport), the events it wants, and a signing secret (`whsec_...`) that is shown once and stored
encrypted (`secrets_box`). Each delivery is POSTed with `webhook-id` (the delivery id, the same on every retry, so
receivers can drop repeats), `webhook-timestamp` and `webhook-signature`; every attempt is recorded.
"""

from __future__ import annotations

import base64
import json
import secrets
import time
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from http import HTTPStatus
from typing import Any
from urllib.parse import urlsplit

import httpcore
import httpx
from flask import current_app
from sqlalchemy import func, select
from standardwebhooks.webhooks import Webhook

from app.core.errors import Conflict, Forbidden, NotFound, ValidationFailed
from app.core.net_guard import check_outbound_url, guarded_transport
from app.extensions import db
from app.models import Membership, NotificationDelivery, WebhookAttempt, WebhookEndpoint
from app.models.base import utcnow
from app.models.notifications import WEBHOOK_EVENTS
from app.models.tenancy import MANAGE_CONNECTIONS
from app.services import notifications
from app.services.activity import record_activity
from app.services.secrets_box import decrypt, encrypt

MANAGE_FORBIDDEN = "Managing webhooks needs connection-management authority"
USER_AGENT = "Switchboard-Webhooks/1"
# How much of a receiver's answer is read: only the status matters, so a few KB at most, never a whole large body.
MAX_RESPONSE_BYTES = 4096


def endpoint_limit() -> int:
    """How many webhook endpoints one company may have (each event is one delivery per endpoint)."""
    return int(current_app.config.get("WEBHOOK_ENDPOINTS_PER_COMPANY", 10))


def endpoint_limit_message(limit: int) -> str:
    return f"A company can have at most {limit} webhooks. Remove one before adding another."


def can_manage(membership: Membership | None) -> bool:
    return membership is not None and membership.has_permission(MANAGE_CONNECTIONS)


def require_manager(membership: Membership) -> None:
    if not can_manage(membership):
        raise Forbidden(MANAGE_FORBIDDEN)


def new_secret() -> str:
    return "whsec_" + base64.b64encode(secrets.token_bytes(32)).decode("ascii")


def _validate(url: str, events: Iterable[str] | None) -> tuple[str, list[str]]:
    errors = []
    url = (url or "").strip()
    if not url or len(url) > 2000:
        errors.append({"loc": ["url"], "msg": "Enter the URL to send events to", "type": "value_error"})
    else:
        try:
            check_outbound_url(url)
        except Exception as exc:  # UnsafeUrl: the guard's plain reason is the message
            errors.append({"loc": ["url"], "msg": str(exc), "type": "value_error"})
    chosen = [e for e in WEBHOOK_EVENTS if e in set(events or [])]
    if not chosen or set(events or []) - set(WEBHOOK_EVENTS):
        errors.append({"loc": ["events"], "msg": "Choose at least one known event", "type": "value_error"})
    if errors:
        raise ValidationFailed(errors)
    return url, chosen


def _record(membership: Membership, endpoint: WebhookEndpoint, action: str, **details: object) -> None:
    """Every change to an endpoint is activity. The URL may carry a receiver's token, so only its host is kept."""
    record_activity(
        company_id=membership.company_id,
        actor_type="user",
        actor_id=membership.user_id,
        action=action,
        entity_type="webhook_endpoint",
        entity_id=endpoint.id,
        details={"host": urlsplit(endpoint.url).hostname, **details},
    )


def create_endpoint(
    membership: Membership, url: str, events: Iterable[str] | None
) -> tuple[WebhookEndpoint, str]:
    """Add an endpoint; returns it and its signing secret (the only time the secret is shown)."""
    require_manager(membership)
    url, chosen = _validate(url, events)
    limit = endpoint_limit()
    existing = db.session.scalar(
        select(func.count())
        .select_from(WebhookEndpoint)
        .where(WebhookEndpoint.company_id == membership.company_id)
    )
    if (existing or 0) >= limit:
        raise ValidationFailed(
            [{"loc": ["url"], "msg": endpoint_limit_message(limit), "type": "value_error"}]
        )
    secret = new_secret()
    endpoint = WebhookEndpoint(
        company_id=membership.company_id,
        url=url,
        events=chosen,
        secret_ciphertext=encrypt(secret),
        enabled=True,
        created_by_user_id=membership.user_id,
    )
    db.session.add(endpoint)
    db.session.flush()
    _record(membership, endpoint, "webhook.created", events=chosen)
    return endpoint, secret


def update_endpoint(
    membership: Membership, endpoint: WebhookEndpoint, url: str, events: Iterable[str] | None
) -> WebhookEndpoint:
    """Change where an endpoint posts and which events it wants. Queued deliveries go to the new URL; events no
    longer chosen are not queued from now on (what is queued already is still sent)."""
    require_manager(membership)
    url, chosen = _validate(url, events)
    changed = [
        name
        for name, old, new in (("url", endpoint.url, url), ("events", endpoint.events, chosen))
        if old != new
    ]
    endpoint.url = url
    endpoint.events = chosen
    db.session.flush()
    if changed:
        _record(membership, endpoint, "webhook.updated", fields=changed, events=chosen)
    return endpoint


def set_enabled(membership: Membership, endpoint: WebhookEndpoint, enabled: bool) -> WebhookEndpoint:
    """Pause or resume an endpoint. While disabled no event is queued for it and the worker sends nothing already
    queued (those deliveries are given up; Send again queues one once more)."""
    require_manager(membership)
    if endpoint.enabled != enabled:
        endpoint.enabled = enabled
        db.session.flush()
        _record(membership, endpoint, "webhook.enabled" if enabled else "webhook.disabled")
    return endpoint


def rotate_secret(membership: Membership, endpoint: WebhookEndpoint) -> str:
    """A new signing secret, effective at once for every later attempt (queued retries included); returned to be
    shown once. The old one stops verifying."""
    require_manager(membership)
    secret = new_secret()
    endpoint.secret_ciphertext = encrypt(secret)
    db.session.flush()
    _record(membership, endpoint, "webhook.secret_rotated")
    return secret


def load_endpoint(membership: Membership, endpoint_id: uuid.UUID) -> WebhookEndpoint:
    endpoint = db.session.get(WebhookEndpoint, endpoint_id)
    if endpoint is None or endpoint.company_id != membership.company_id:
        raise NotFound("Webhook not found")
    require_manager(membership)
    return endpoint


def delete_endpoint(membership: Membership, endpoint: WebhookEndpoint) -> None:
    require_manager(membership)
    _record(membership, endpoint, "webhook.deleted")
    db.session.delete(endpoint)
    db.session.flush()


def delivery_count(endpoint: WebhookEndpoint) -> int:
    """How many deliveries (with their attempts) deleting the endpoint wipes: its confirmation page says so."""
    return int(
        db.session.scalar(
            select(func.count(NotificationDelivery.id)).where(NotificationDelivery.endpoint_id == endpoint.id)
        )
        or 0
    )


TEST_EVENT = "webhook.test"


def send_test_event(membership: Membership, endpoint: WebhookEndpoint) -> NotificationDelivery:
    """Queue one `webhook.test` event to this endpoint alone, signed like any other, whatever it subscribes to."""
    require_manager(membership)
    if not endpoint.enabled:
        raise Conflict("Enable the webhook to send it a test event.")
    delivery = notifications.queue_test_event(endpoint, sent_by=membership.user_id)
    _record(membership, endpoint, "webhook.test_sent")
    return delivery


def list_endpoints(company_id: uuid.UUID) -> list[WebhookEndpoint]:
    return list(
        db.session.scalars(
            select(WebhookEndpoint)
            .where(WebhookEndpoint.company_id == company_id)
            .order_by(WebhookEndpoint.created_at)
        )
    )


def recent_deliveries(endpoint: WebhookEndpoint, limit: int = 20) -> list[tuple[NotificationDelivery, list]]:
    """The endpoint's latest deliveries, newest first, each with its attempts (newest first)."""
    deliveries = list(
        db.session.scalars(
            select(NotificationDelivery)
            .where(NotificationDelivery.endpoint_id == endpoint.id)
            .order_by(NotificationDelivery.created_at.desc())
            .limit(limit)
        )
    )
    attempts: dict[uuid.UUID, list] = {d.id: [] for d in deliveries}
    if deliveries:
        for attempt in db.session.scalars(
            select(WebhookAttempt)
            .where(WebhookAttempt.delivery_id.in_(list(attempts)))
            .order_by(WebhookAttempt.created_at.desc())
        ):
            attempts[attempt.delivery_id].append(attempt)
    return [(d, attempts[d.id]) for d in deliveries]


def send_again(membership: Membership, delivery_id: uuid.UUID) -> NotificationDelivery:
    """Queue a delivery once more (same `webhook-id`, so a receiver that already has it can tell)."""
    delivery = db.session.get(NotificationDelivery, delivery_id)
    if delivery is None or delivery.company_id != membership.company_id or delivery.channel != "webhook":
        raise NotFound("Delivery not found")
    require_manager(membership)
    delivery.delivered_at = None
    delivery.gave_up_at = None
    delivery.next_attempt_at = utcnow()
    db.session.flush()
    return delivery


# --- sending -----------------------------------------------------------------------------------------------------


def attempt_sentence(status_code: int | None, error: str | None) -> str:
    """An attempt as a person reads it ("Could not connect: the receiver refused the connection."), never an
    exception's repr. Stored attempts from before this wording read the same way."""
    if status_code is not None and 200 <= status_code < 300:
        return f"Delivered (HTTP {status_code})."
    if status_code is not None:
        try:
            phrase = f" ({HTTPStatus(status_code).phrase})"
        except ValueError:
            phrase = ""
        return f"The receiver answered HTTP {status_code}{phrase}."
    text = (error or "").strip()
    if not text:
        return "No answer."
    lowered = text.lower()
    if text.startswith("ConnectError") or "connection refused" in lowered:
        if "refused" in lowered:
            return "Could not connect: the receiver refused the connection."
        if "name or service not known" in lowered or "nodename" in lowered or "getaddrinfo" in lowered:
            return "Could not connect: the receiver's host name does not resolve."
        return "Could not connect to the receiver."
    if text.split(":", 1)[0] in ("ReadError", "WriteError", "RemoteProtocolError", "LocalProtocolError"):
        return "The connection to the receiver broke before it answered."
    return text if text.endswith(".") else text + "."


@dataclass(frozen=True)
class Outcome:
    ok: bool
    status_code: int | None
    error: str | None
    duration_ms: int


def signed_request(
    delivery_id: str, secret: str, payload: dict, now: datetime | None = None
) -> tuple[bytes, dict[str, str]]:
    """The exact body bytes and headers of one attempt."""
    body = json.dumps(payload, separators=(",", ":"), sort_keys=True)
    now = now or datetime.now(UTC)
    headers = {
        "content-type": "application/json",
        "user-agent": USER_AGENT,
        "webhook-id": delivery_id,
        "webhook-timestamp": str(int(now.timestamp())),
        "webhook-signature": Webhook(secret).sign(delivery_id, now, body),
    }
    return body.encode("utf-8"), headers


class _DeadlineStream(httpcore.NetworkStream):
    """A network stream whose every read and write is bounded by what is left of one deadline: a receiver that
    drips its answer a byte at a time is cut off when the attempt's time is up, not after each byte's timeout."""

    def __init__(self, inner: Any, deadline: float) -> None:
        self._inner = inner
        self._deadline = deadline

    def _left(self, timeout: float | None, error: type[Exception]) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise error("The receiver did not answer in time")
        return left if timeout is None else min(timeout, left)

    def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return bytes(self._inner.read(max_bytes, self._left(timeout, httpcore.ReadTimeout)))

    def write(self, buffer: bytes, timeout: float | None = None) -> None:
        self._inner.write(buffer, self._left(timeout, httpcore.WriteTimeout))

    def close(self) -> None:
        self._inner.close()

    def start_tls(
        self, ssl_context: Any, server_hostname: str | None = None, timeout: float | None = None
    ) -> Any:
        inner = self._inner.start_tls(
            ssl_context, server_hostname, self._left(timeout, httpcore.ConnectTimeout)
        )
        return _DeadlineStream(inner, self._deadline)

    def get_extra_info(self, info: str) -> Any:
        return self._inner.get_extra_info(info)


class _DeadlineBackend(httpcore.SyncBackend):
    """Wraps the guarded (pinned) network backend: connections it opens share one deadline."""

    def __init__(self, inner: Any, deadline: float) -> None:
        self._inner = inner
        self._deadline = deadline

    def _left(self, timeout: float | None) -> float:
        left = self._deadline - time.monotonic()
        if left <= 0:
            raise httpcore.ConnectTimeout("The receiver did not answer in time")
        return left if timeout is None else min(timeout, left)

    def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Any = None,
    ) -> _DeadlineStream:
        stream = self._inner.connect_tcp(
            host,
            port,
            timeout=self._left(timeout),
            local_address=local_address,
            socket_options=socket_options,
        )
        return _DeadlineStream(stream, self._deadline)

    def sleep(self, seconds: float) -> None:
        self._inner.sleep(seconds)


def deadline_seconds() -> float:
    """The whole attempt (connect, send, the answer's status and the few KB read of it) ends by then."""
    return float(current_app.config.get("WEBHOOK_DEADLINE_SECONDS", 15))


def post(url: str, secret_ciphertext: str, delivery_id: str, payload: dict) -> Outcome:
    """One attempt: guard, sign, POST with a total deadline, no redirects followed, at most `MAX_RESPONSE_BYTES` of
    the answer read. Never raises for the far end's faults."""
    started = time.monotonic()

    def done(ok: bool, status: int | None = None, error: str | None = None) -> Outcome:
        return Outcome(ok, status, error, int((time.monotonic() - started) * 1000))

    try:
        check_outbound_url(url)
    except Exception as exc:
        return done(False, error=str(exc))
    body, headers = signed_request(delivery_id, decrypt(secret_ciphertext), payload)
    timeout = float(current_app.config.get("WEBHOOK_TIMEOUT_SECONDS", 10))
    deadline = started + deadline_seconds()
    transport = guarded_transport()
    pool = transport._pool  # the pinned backend lives here (see net_guard.guarded_transport)
    pool._network_backend = _DeadlineBackend(pool._network_backend, deadline)
    try:
        with (
            httpx.Client(transport=transport, timeout=timeout, follow_redirects=False) as client,
            client.stream("POST", url, content=body, headers=headers) as response,
        ):
            status = response.status_code
            read = 0
            for chunk in response.iter_raw():
                read += len(chunk)
                if read >= MAX_RESPONSE_BYTES:
                    break  # the rest is never read: closing the stream drops the connection
    except httpx.TimeoutException:
        return done(False, error=f"The receiver did not answer within {deadline_seconds():g} s.")
    except httpx.HTTPError as exc:
        return done(False, error=attempt_sentence(None, f"{type(exc).__name__}: {exc}")[:500])
    if 200 <= status < 300:
        return done(True, status)
    return done(False, status, attempt_sentence(status, None))
