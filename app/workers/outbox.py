"""Notification delivery: send each outbox row (`NotificationDelivery`) once, retrying with exponential back-off.

Like continuation delivery, a due row is leased by moving `next_attempt_at` ahead (`FOR UPDATE SKIP LOCKED` on
PostgreSQL, a conditional update everywhere) and the lease is committed before anything is sent; a worker that
dies after the lease leaves a row that becomes due again when the lease runs out. Then, outside any transaction,
the mail or webhook is sent; a second transaction marks the row delivered (only while it is not delivered yet), or
records the failure and the next retry: 30 s, 1 min, 2 min, ... capped at one hour, for a day, then it gives up.
A delivered row is never leased again.

Fairness: one company's slow receiver must not delay another's. Rows are claimed company by company (at
most `NOTIFICATION_LANES_PER_COMPANY` in flight per company) and sent on a pool of `NOTIFICATION_LANES` threads, each
attempt bounded by the webhook deadline; the long-running worker hands rows to the pool and returns at once
(`dispatch`), so a new row of another company is sent while a slow one is still in flight. `sweep_pending` is the
same, waiting for what it started (`switchboard worker --once` and tests).
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from flask import Flask
from sqlalchemy import func, select, update

from app.core import metrics, wake_signal
from app.extensions import current_app_object, db
from app.models import NotificationDelivery, User, WebhookAttempt, WebhookEndpoint
from app.models.base import as_utc, rowcount, utcnow
from app.services import notifications
from app.services.notifications import email as mail
from app.services.notifications import webhooks

log = logging.getLogger(__name__)

LEASE_SECONDS = 120
SWEEP_LIMIT = 50
FIRST_RETRY_SECONDS = 30
MAX_RETRY_SECONDS = 3600
GIVE_UP_AFTER = timedelta(days=1)

DELIVERED = "delivered"
FAILED = "failed"
GAVE_UP = "gave_up"
SKIPPED = "skipped"


def retry_delay(attempts: int) -> timedelta:
    """The wait after the `attempts`-th failure."""
    return timedelta(seconds=min(FIRST_RETRY_SECONDS * 2 ** max(attempts - 1, 0), MAX_RETRY_SECONDS))


def _is_postgres() -> bool:
    return db.session.get_bind().dialect.name == "postgresql"


def _due(now: datetime) -> tuple[Any, ...]:
    return (
        NotificationDelivery.delivered_at.is_(None),
        NotificationDelivery.gave_up_at.is_(None),
        NotificationDelivery.next_attempt_at <= now,
    )


def claim_due(
    limit: int = SWEEP_LIMIT,
    *,
    per_company: int | None = None,
    busy: dict[uuid.UUID, int] | None = None,
) -> list[uuid.UUID]:
    """Lease due rows and commit the lease; returns the leased ids.

    Company by company (the longest-waiting first), at most `per_company` rows each minus what that company already
    has in flight (`busy`), so one company with many due rows never fills the whole batch."""
    now = utcnow()
    busy = busy or {}
    per_company = per_company or limit
    companies = db.session.execute(
        select(NotificationDelivery.company_id, func.min(NotificationDelivery.next_attempt_at))
        .where(*_due(now))
        .group_by(NotificationDelivery.company_id)
        .order_by(func.min(NotificationDelivery.next_attempt_at))
        .limit(limit + len(busy))
    ).all()
    claimed: list[uuid.UUID] = []
    for company_id, _ in companies:
        room = min(per_company - busy.get(company_id, 0), limit - len(claimed))
        if room <= 0:
            if len(claimed) >= limit:
                break
            continue
        query = (
            select(NotificationDelivery.id)
            .where(NotificationDelivery.company_id == company_id, *_due(now))
            .order_by(NotificationDelivery.next_attempt_at)
            .limit(room)
        )
        if _is_postgres():
            query = query.with_for_update(skip_locked=True)
        for delivery_id in list(db.session.scalars(query)):
            result = db.session.execute(
                update(NotificationDelivery)
                .where(NotificationDelivery.id == delivery_id, *_due(now))
                .values(next_attempt_at=now + timedelta(seconds=LEASE_SECONDS))
                .execution_options(synchronize_session=False)
            )
            if getattr(result, "rowcount", 0) == 1:  # an UPDATE's CursorResult
                claimed.append(delivery_id)
    db.session.commit()
    return claimed


@dataclass(frozen=True)
class _Work:
    id: uuid.UUID
    company_id: uuid.UUID
    channel: str
    event: str
    payload: dict
    created_at: datetime | None
    attempts: int
    # email
    to_name: str | None = None
    to_address: str | None = None
    # webhook
    url: str | None = None
    secret_ciphertext: str | None = None


def _load(delivery_id: uuid.UUID) -> _Work | str:
    """What to send, read in a short transaction; or why nothing can be sent any more."""
    row = db.session.get(NotificationDelivery, delivery_id)
    if row is None or row.delivered_at is not None or row.gave_up_at is not None:
        return SKIPPED

    def work(**channel_fields: Any) -> _Work:
        return _Work(
            id=row.id,
            company_id=row.company_id,
            channel=row.channel,
            event=row.event,
            payload=dict(row.payload or {}),
            created_at=as_utc(row.created_at),
            attempts=row.attempts,
            **channel_fields,
        )

    if row.channel == "email":
        user = db.session.get(User, row.recipient_user_id) if row.recipient_user_id else None
        if user is None or not user.email:
            return "No recipient"
        if not notifications.email_enabled(user.id):
            return "The person turned notification email off"
        return work(to_name=user.name, to_address=user.email)
    if row.channel == "webhook":
        endpoint = db.session.get(WebhookEndpoint, row.endpoint_id) if row.endpoint_id else None
        if endpoint is None or not endpoint.enabled:
            return "The webhook was removed or disabled"
        return work(url=endpoint.url, secret_ciphertext=endpoint.secret_ciphertext)
    return f"Unknown channel {row.channel!r}"


def _send(work: _Work) -> webhooks.Outcome:
    if work.channel == "email":
        started = time.monotonic()
        try:
            message = mail.compose(
                work.event,
                work.payload.get("data") or {},
                to_name=work.to_name or "",
                to_address=work.to_address or "",
                delivery_id=str(work.id),
            )
            mail.send(message)
        except Exception as exc:  # any SMTP, socket or configuration failure: retried later
            return webhooks.Outcome(False, None, f"{type(exc).__name__}: {exc}"[:500], 0)
        return webhooks.Outcome(True, None, None, int((time.monotonic() - started) * 1000))
    if work.url is None or work.secret_ciphertext is None:
        return webhooks.Outcome(False, None, "The webhook has no address or secret", 0)
    return webhooks.post(work.url, work.secret_ciphertext, str(work.id), work.payload)


def _finish(work: _Work, outcome: webhooks.Outcome) -> str:
    now = utcnow()
    if work.channel == "webhook":
        db.session.add(
            WebhookAttempt(
                delivery_id=work.id,
                company_id=work.company_id,
                status_code=outcome.status_code,
                error=outcome.error,
                duration_ms=outcome.duration_ms,
            )
        )
    pending = (NotificationDelivery.id == work.id, NotificationDelivery.delivered_at.is_(None))
    if outcome.ok:
        values = {"delivered_at": now, "attempts": work.attempts + 1, "last_error": None}
        result = DELIVERED
    elif work.created_at is not None and now - work.created_at >= GIVE_UP_AFTER:
        values = {"gave_up_at": now, "attempts": work.attempts + 1, "last_error": outcome.error}
        result = GAVE_UP
    else:
        values = {
            "attempts": work.attempts + 1,
            "last_error": outcome.error,
            "next_attempt_at": now + retry_delay(work.attempts + 1),
        }
        result = FAILED
    written = db.session.execute(
        update(NotificationDelivery)
        .where(*pending)
        .values(**values, updated_at=now)
        .execution_options(synchronize_session=False)
    )
    db.session.commit()
    if result == DELIVERED and rowcount(written) == 1 and work.created_at is not None:
        metrics.observe_delivery("notifications", (now - work.created_at).total_seconds())
    return result


def deliver_leased(delivery_id: uuid.UUID) -> str:
    """Send one leased row; commits. Returns what happened."""
    work = _load(delivery_id)
    if isinstance(work, str):
        if work != SKIPPED:
            db.session.execute(
                update(NotificationDelivery)
                .where(NotificationDelivery.id == delivery_id, NotificationDelivery.delivered_at.is_(None))
                .values(gave_up_at=utcnow(), last_error=work)
                .execution_options(synchronize_session=False)
            )
        db.session.commit()
        return SKIPPED if work == SKIPPED else GAVE_UP
    db.session.commit()  # no transaction stays open while the far end answers
    return _finish(work, _send(work))


def _deliver_in_context(app: Flask, delivery_id: uuid.UUID) -> str:
    with app.app_context():
        try:
            return deliver_leased(delivery_id)
        except Exception:
            # The lease stays; the row is retried when it becomes due again.
            db.session.rollback()
            log.exception("notification delivery failed for %s", delivery_id)
            return FAILED
        finally:
            db.session.remove()


class Dispatcher:
    """The per-app pool of delivery lanes and what each company has in flight."""

    def __init__(self, app: Flask) -> None:
        self.app = app
        self.lanes = max(int(app.config.get("NOTIFICATION_LANES", 8)), 1)
        self.per_company = max(int(app.config.get("NOTIFICATION_LANES_PER_COMPANY", 2)), 1)
        self.pool = ThreadPoolExecutor(max_workers=self.lanes, thread_name_prefix="switchboard-outbox")
        self.lock = threading.Lock()
        self.busy: dict[uuid.UUID, int] = {}
        self.in_flight = 0

    def dispatch(self, limit: int = SWEEP_LIMIT) -> list[Future[str]]:
        """Lease what the free lanes can take now, fairly across companies, and start sending it; never waits."""
        with self.lock:
            free = min(self.lanes - self.in_flight, limit)
            busy = dict(self.busy)
        if free <= 0:
            return []
        ids = claim_due(free, per_company=self.per_company, busy=busy)
        if not ids:
            return []
        companies = dict(
            db.session.execute(
                select(NotificationDelivery.id, NotificationDelivery.company_id).where(
                    NotificationDelivery.id.in_(ids)
                )
            ).all()
        )
        db.session.commit()
        futures = []
        for delivery_id in ids:
            company_id = companies[delivery_id]
            with self.lock:
                self.busy[company_id] = self.busy.get(company_id, 0) + 1
                self.in_flight += 1
            future = self.pool.submit(_deliver_in_context, self.app, delivery_id)
            future.add_done_callback(self._releaser(company_id))
            futures.append(future)
        return futures

    def _releaser(self, company_id: uuid.UUID) -> Callable[[Future[str]], None]:
        return lambda _future: self._release(company_id)

    def _release(self, company_id: uuid.UUID) -> None:
        with self.lock:
            self.in_flight -= 1
            left = self.busy.get(company_id, 1) - 1
            if left > 0:
                self.busy[company_id] = left
            else:
                self.busy.pop(company_id, None)
        wake_signal.nudge(wake_signal.NOTIFICATIONS)  # a lane is free: the idle loop looks again


def dispatcher(app: Flask | None = None) -> Dispatcher:
    app = app or current_app_object()
    existing = app.extensions.get("switchboard_outbox")
    if existing is None:
        with _DISPATCHER_LOCK:
            existing = app.extensions.get("switchboard_outbox")
            if existing is None:
                existing = app.extensions["switchboard_outbox"] = Dispatcher(app)
    assert isinstance(existing, Dispatcher)
    return existing


_DISPATCHER_LOCK = threading.Lock()


def dispatch_due(limit: int = SWEEP_LIMIT) -> int:
    """The long-running worker's job: start sending what is due and return how many were started (never waits)."""
    return len(dispatcher().dispatch(limit))


def sweep_pending(limit: int = SWEEP_LIMIT) -> dict[str, int]:
    """Lease and deliver up to `limit` due rows, waiting for them; returns a count per result."""
    counts: dict[str, int] = {}
    started = 0
    pool = dispatcher()
    while started < limit:
        futures = pool.dispatch(limit - started)
        if not futures:
            if pool.in_flight == 0:
                break
            time.sleep(0.05)  # lanes still busy with earlier work: wait for one
            continue
        started += len(futures)
        for future in futures:
            result = future.result()
            counts[result] = counts.get(result, 0) + 1
    return counts
