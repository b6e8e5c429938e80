"""Issue 33 items 1 and 5: hostile webhook receivers on loopback cannot hold the worker or another company's
deliveries. A receiver that drips its answer a byte a second is cut off at the attempt's deadline, another company's
delivery arrives meanwhile, a 200 MiB answer is not read, and a company's endpoints are limited."""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time
import tracemalloc

import pytest
from sqlalchemy import select

from app.core import wake_signal
from app.models import NotificationDelivery, WebhookAttempt, WebhookEndpoint
from app.models.base import utcnow
from app.services.notifications import webhooks
from app.services.secrets_box import encrypt
from app.workers import outbox
from app.workers.loop import run_worker_forever, stop_worker
from tests.conftest import TEST_CONFIG, _database_url
from tests.paths import ROOT
from tests.peers.notification_peers import HostileReceiver, start_webhook_receiver
from tests.services.gateway.test_gateway import world  # noqa: F401  (a signed-in owner with a company)
from tests.services.notifications.test_webhooks import add_webhook


@pytest.fixture
def loopback(app):
    saved = (app.config.get("OUTBOUND_ALLOWED_HOSTS"), app.config["WEBHOOK_DEADLINE_SECONDS"])
    app.config["OUTBOUND_ALLOWED_HOSTS"] = ["127.0.0.1"]
    app.config["WEBHOOK_DEADLINE_SECONDS"] = 3
    yield app
    app.config["OUTBOUND_ALLOWED_HOSTS"], app.config["WEBHOOK_DEADLINE_SECONDS"] = saved


def queue(db, company, url: str, n: int = 1) -> NotificationDelivery:
    endpoint = WebhookEndpoint(
        company_id=company.id,
        url=url,
        events=["connection.connected"],
        secret_ciphertext=encrypt(webhooks.new_secret()),
    )
    db.session.add(endpoint)
    db.session.flush()
    delivery = NotificationDelivery(
        company_id=company.id,
        event="connection.connected",
        channel="webhook",
        endpoint_id=endpoint.id,
        payload={"type": "connection.connected", "data": {"n": n}},
        next_attempt_at=utcnow(),
    )
    db.session.add(delivery)
    db.session.commit()
    wake_signal.nudge(wake_signal.NOTIFICATIONS)
    return delivery


def attempts(db, delivery_id) -> list[WebhookAttempt]:
    db.session.expire_all()
    return list(db.session.scalars(select(WebhookAttempt).where(WebhookAttempt.delivery_id == delivery_id)))


def test_a_dripping_receiver_is_cut_off_and_never_delays_another_company(app, db, make, loopback):
    slow_company, quick_company = make.company(), make.company()
    drip = HostileReceiver("drip", interval=1.0)
    quick = start_webhook_receiver()
    stop = threading.Event()
    loop = threading.Thread(
        target=run_worker_forever,
        args=(app, 5.0),
        kwargs={"jobs": ("notifications",), "stop": stop, "listen": False},
        daemon=True,
    )
    loop.start()
    try:
        slow = queue(db, slow_company, drip.url)
        assert drip.accepted.wait(10), "the worker never reached the dripping receiver"
        queued_at = time.monotonic()
        fast = queue(db, quick_company, quick.url)  # queued while the slow one is in flight
        assert len(quick.wait_for(1, timeout=10)) == 1
        quick_delay = time.monotonic() - queued_at
        assert quick_delay < 2.0, f"the other company's delivery waited {quick_delay:.1f} s"
        deadline = time.monotonic() + 15
        while not attempts(db, slow.id) and time.monotonic() < deadline:
            time.sleep(0.1)
        [cut] = attempts(db, slow.id)
        assert cut.status_code is None
        assert cut.error == "The receiver did not answer within 3 s."
        assert 2500 <= cut.duration_ms < 4500  # the whole exchange, not each byte's read timeout
        assert drip.sent <= 5
        [done] = attempts(db, fast.id)
        assert done.status_code == 200
        db.session.expire_all()
        assert db.session.get(NotificationDelivery, fast.id).delivered_at is not None
        failed = db.session.get(NotificationDelivery, slow.id)
        assert failed.delivered_at is None and failed.attempts == 1
        assert failed.last_error == "The receiver did not answer within 3 s."
    finally:
        stop_worker(stop)
        loop.join(10)
        drip.stop()
        quick.stop()


def test_a_company_with_many_due_rows_does_not_fill_every_lane(app, db, make, loopback):
    busy_company, other_company = make.company(), make.company()
    for n in range(6):
        queue(db, busy_company, "http://127.0.0.1:9/a", n)  # older rows of one company
    other = queue(db, other_company, "http://127.0.0.1:9/b")
    claimed = outbox.claim_due(3, per_company=2)
    assert other.id in claimed and len(claimed) == 3
    db.session.expire_all()
    by_company = {
        row.company_id for row in db.session.scalars(select(NotificationDelivery)) if row.id in set(claimed)
    }
    assert by_company == {busy_company.id, other_company.id}


def test_a_huge_answer_is_not_read(app, db, make, loopback):
    huge = HostileReceiver("huge", size=200 * 1024 * 1024)
    company = make.company()
    delivery = queue(db, company, huge.url)
    try:
        tracemalloc.start()
        started = time.monotonic()
        assert outbox.sweep_pending() == {outbox.DELIVERED: 1}
        elapsed = time.monotonic() - started
        _, peak = tracemalloc.get_traced_memory()
        tracemalloc.stop()
        assert peak < 5 * 1024 * 1024, f"{peak} bytes allocated at the peak"
        assert elapsed < 3
        huge.closed.wait(5)
        assert huge.sent < 20 * 1024 * 1024  # the sender hung up long before 200 MiB
        [attempt] = attempts(db, delivery.id)
        assert attempt.status_code == 200
    finally:
        huge.stop()


def test_a_company_may_have_ten_webhooks(db, world, loopback):  # noqa: F811
    receiver = start_webhook_receiver()
    try:
        for _ in range(10):
            assert add_webhook(world.client, world.csrf, receiver.url).status_code == 201
        refused = add_webhook(world.client, world.csrf, receiver.url)
        assert refused.status_code == 422
        assert (
            "A company can have at most 10 webhooks. Remove one before adding another."
            in refused.get_data(as_text=True)
        )
        db.session.expire_all()
        assert len(list(db.session.scalars(select(WebhookEndpoint)))) == 10
    finally:
        receiver.stop()


def test_the_worker_delivers_continuations_while_a_webhook_drips(app, db, make, tmp_path):
    """`switchboard worker` in a process of its own: a receiver holds a webhook attempt for a minute, and a card
    resolved meanwhile still wakes its agent at once (continuations never wait behind notifications)."""
    from tests.workers.test_continuations import declined, wakes_for

    team = make.team(adapter_type="manual")
    drip = HostileReceiver("drip", interval=1.0)
    queue(db, team[0], drip.url)
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "SWITCHBOARD_ENCRYPTION_KEY": TEST_CONFIG["ENCRYPTION_KEY"],
        "SECRET_KEY": TEST_CONFIG["SECRET_KEY"],
        "SWITCHBOARD_INSTANCE_PATH": str(tmp_path),
        "SWITCHBOARD_OUTBOUND_ALLOWED_HOSTS": "127.0.0.1",
        "SWITCHBOARD_WEBHOOK_DEADLINE_SECONDS": "60",
        "SWITCHBOARD_CATALOG_INGEST_ON_START": "0",
    }
    code = (
        "from app import create_app\n"
        "app = create_app()\n"
        "app.test_cli_runner().invoke(args=['worker', '--poll-seconds', '0.2'], catch_exceptions=False)\n"
    )
    worker = subprocess.Popen([sys.executable, "-c", code], env=env, cwd=ROOT)
    try:
        assert drip.accepted.wait(60), "the worker never reached the dripping receiver"
        interaction = declined(db, team)
        resolved_at = time.monotonic()
        while not wakes_for(db, interaction.id) and time.monotonic() - resolved_at < 30:
            time.sleep(0.1)
        delay = time.monotonic() - resolved_at
        assert wakes_for(db, interaction.id), "the continuation was not delivered"
        assert delay < 5, f"the continuation waited {delay:.1f} s"
        assert drip.sent < 30  # the webhook attempt is still in flight
    finally:
        worker.kill()
        worker.wait(30)
        drip.stop()
