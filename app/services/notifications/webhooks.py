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

import httpx
from flask import current_app
from sqlalchemy import select
from standardwebhooks.webhooks import Webhook

from app.core.errors import Forbidden, NotFound, ValidationFailed
from app.core.net_guard import check_outbound_url, guarded_transport
from app.extensions import db
from app.models import Membership, NotificationDelivery, WebhookAttempt, WebhookEndpoint
from app.models.base import utcnow
from app.models.notifications import WEBHOOK_EVENTS
from app.models.tenancy import MANAGE_CONNECTIONS
from app.services.secrets_box import decrypt, encrypt

MANAGE_FORBIDDEN = "Managing webhooks needs connection-management authority"
USER_AGENT = "Switchboard-Webhooks/1"


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


def create_endpoint(
    membership: Membership, url: str, events: Iterable[str] | None
) -> tuple[WebhookEndpoint, str]:
    """Add an endpoint; returns it and its signing secret (the only time the secret is shown)."""
    require_manager(membership)
    url, chosen = _validate(url, events)
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
    return endpoint, secret


def load_endpoint(membership: Membership, endpoint_id: uuid.UUID) -> WebhookEndpoint:
    endpoint = db.session.get(WebhookEndpoint, endpoint_id)
    if endpoint is None or endpoint.company_id != membership.company_id:
        raise NotFound("Webhook not found")
    require_manager(membership)
    return endpoint


def delete_endpoint(membership: Membership, endpoint: WebhookEndpoint) -> None:
    require_manager(membership)
    db.session.delete(endpoint)
    db.session.flush()


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


def post(url: str, secret_ciphertext: str, delivery_id: str, payload: dict) -> Outcome:
    """One attempt: guard, sign, POST with timeouts, no redirects followed. Never raises for the far end's faults."""
    started = time.monotonic()

    def done(ok: bool, status: int | None = None, error: str | None = None) -> Outcome:
        return Outcome(ok, status, error, int((time.monotonic() - started) * 1000))

    try:
        check_outbound_url(url)
    except Exception as exc:
        return done(False, error=str(exc))
    body, headers = signed_request(delivery_id, decrypt(secret_ciphertext), payload)
    timeout = float(current_app.config.get("WEBHOOK_TIMEOUT_SECONDS", 10))
    try:
        with httpx.Client(transport=guarded_transport(), timeout=timeout, follow_redirects=False) as client:
            response = client.post(url, content=body, headers=headers)
    except httpx.HTTPError as exc:
        return done(False, error=f"{type(exc).__name__}: {exc}"[:500])
    if 200 <= response.status_code < 300:
        return done(True, response.status_code)
    return done(False, response.status_code, f"HTTP {response.status_code}")
