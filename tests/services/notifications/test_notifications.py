"""Notifications (issue 15): the outbox written with the event, mail to the addressee through a real SMTP server,
retries with back-off, never sent twice, and a worker killed between its lease and its send."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from datetime import timedelta

import pytest
from sqlalchemy import func, select, update
from sqlalchemy.exc import IntegrityError

from app.models import NotificationDelivery, NotificationPreference
from app.models.base import utcnow
from app.services import notifications
from app.services.connections.settings import update_connection
from app.workers import outbox
from app.workers.loop import run_once
from tests.conftest import TEST_CONFIG, _database_url, sign_in
from tests.factories import Factory
from tests.peers.notification_peers import SilentSmtp, free_port, start_smtp
from tests.services.runs.test_run_instructions import add_connection


@pytest.fixture
def smtp(app):
    peer = start_smtp()
    saved = app.config.get("SMTP_URL"), app.config.get("MAIL_FROM")
    app.config["SMTP_URL"] = peer.url
    app.config["MAIL_FROM"] = "Switchboard <notify@switchboard.test>"
    yield peer
    app.config["SMTP_URL"], app.config["MAIL_FROM"] = saved
    peer.stop()


@pytest.fixture
def team(make):
    owner = make.user("owner@acme.test", "Olivia Owner")
    return make.team("Acme", "ACME", owner=owner, title="Ship the report", adapter_type="manual")


def open_card(db, team, slug="notion", *, commit=True):
    _company, owner, agent, issue = team
    return Factory(db).card(issue, agent, owner, slug, commit=commit)


def deliveries(db, **filters) -> list[NotificationDelivery]:
    db.session.expire_all()
    query = select(NotificationDelivery).order_by(NotificationDelivery.created_at)
    for key, value in filters.items():
        query = query.where(getattr(NotificationDelivery, key) == value)
    return list(db.session.scalars(query))


def make_due(db, delivery_id):
    db.session.execute(
        update(NotificationDelivery)
        .where(NotificationDelivery.id == delivery_id)
        .values(next_attempt_at=utcnow() - timedelta(seconds=1))
    )
    db.session.commit()


# --- the outbox is written with the event ----------------------------------------------------------------------


def test_a_card_queues_one_mail_in_the_same_transaction(db, team, smtp):
    _company, owner, _agent, _issue = team
    open_card(db, team, commit=False)
    db.session.rollback()
    assert deliveries(db) == []  # rolled back with the card: nothing to send

    card = open_card(db, team)
    [mail] = deliveries(db)
    assert (mail.channel, mail.event, mail.recipient_user_id) == (
        "email",
        "connection_intent.created",
        owner.id,
    )
    assert mail.dedupe_key == f"email:card:{card.id}" and mail.delivered_at is None
    again = open_card(db, team)  # the same request again returns the same card, and mails nobody twice
    assert again.id == card.id and len(deliveries(db)) == 1


def test_the_database_refuses_a_second_mail_for_one_card(db, team, smtp):
    card = open_card(db, team)
    [mail] = deliveries(db)
    db.session.add(
        NotificationDelivery(
            company_id=mail.company_id,
            event=mail.event,
            channel="email",
            recipient_user_id=mail.recipient_user_id,
            payload={},
            dedupe_key=f"email:card:{card.id}",
        )
    )
    with pytest.raises(IntegrityError):
        db.session.commit()
    db.session.rollback()


def test_no_mail_is_queued_without_smtp_or_for_a_person_who_turned_it_off(app, db, team, smtp):
    _company, owner, _agent, _issue = team
    db.session.add(NotificationPreference(user_id=owner.id, email_enabled=False))
    db.session.commit()
    open_card(db, team)
    assert deliveries(db) == []
    db.session.get(NotificationPreference, owner.id).email_enabled = True
    db.session.commit()
    app.config["SMTP_URL"] = None
    open_card(db, team, slug="github")
    assert deliveries(db) == []


# --- mail through a real SMTP server -----------------------------------------------------------------------------


def test_the_addressee_gets_one_mail_with_the_task_and_a_link(db, team, smtp):
    _company, owner, _agent, issue = team
    card = open_card(db, team)
    assert outbox.sweep_pending() == {outbox.DELIVERED: 1}
    [(envelope, message)] = smtp.wait_for(1)
    assert envelope.rcpt_tos == ["owner@acme.test"]
    assert message["Subject"] == "Builder needs Notion for ACME-1"
    assert message["To"] == "Olivia Owner <owner@acme.test>"
    assert message["From"] == "Switchboard <notify@switchboard.test>"
    assert message["Auto-Submitted"] == "auto-generated"
    [mail] = deliveries(db)
    assert str(mail.id) in message["Message-ID"]
    assert message.get_content().replace("\r\n", "\n") == (
        "Builder asked you to connect Notion so it can continue the task ACME-1 \u201cShip the report\u201d.\n"
        "\n"
        f"Connect it, or answer Not now: http://127.0.0.1:5000/tasks/{issue.id}#item-{card.id}\n"
        "Everything waiting for you: http://127.0.0.1:5000/inbox\n"
        "\n"
        "--\n"
        "You get this mail from Switchboard. Turn notification email off: "
        "http://127.0.0.1:5000/settings/notifications\n"
    )
    assert mail.delivered_at is not None and mail.attempts == 1
    # Delivered rows are never leased again.
    assert outbox.sweep_pending() == {}
    make_due(db, mail.id)
    assert outbox.sweep_pending() == {}
    assert len(smtp.messages) == 1


def test_a_person_who_turns_mail_off_before_the_send_gets_nothing(db, team, smtp, client):
    _company, owner, _agent, _issue = team
    open_card(db, team)
    csrf = sign_in(client, owner)
    page = client.get("/settings/notifications")
    assert page.status_code == 200 and 'name="email_enabled"' in page.get_data(as_text=True)
    saved = client.post("/settings/notifications", data={"csrf_token": csrf})
    assert saved.status_code == 303
    assert notifications.email_enabled(owner.id) is False
    assert outbox.sweep_pending() == {outbox.GAVE_UP: 1}
    [mail] = deliveries(db)
    assert mail.gave_up_at is not None and mail.last_error == "The person turned notification email off"
    assert smtp.messages == []


def test_a_failed_send_is_retried_with_back_off_and_then_delivered(app, db, team):
    port = free_port()  # nothing listens there yet
    app.config["SMTP_URL"] = f"smtp://127.0.0.1:{port}"
    try:
        open_card(db, team)
        before = utcnow()
        assert outbox.sweep_pending() == {outbox.FAILED: 1}
        [mail] = deliveries(db)
        assert mail.attempts == 1 and mail.delivered_at is None and "Error" in mail.last_error
        assert mail.next_attempt_at.replace(tzinfo=None) >= (before + timedelta(seconds=29)).replace(
            tzinfo=None
        )
        assert outbox.sweep_pending() == {}  # not due yet
        assert [outbox.retry_delay(n).total_seconds() for n in (1, 2, 3, 4, 8, 20)] == [
            30,
            60,
            120,
            240,
            3600,
            3600,
        ]
        peer = start_smtp(port)
        try:
            make_due(db, mail.id)
            assert outbox.sweep_pending() == {outbox.DELIVERED: 1}
            assert len(peer.wait_for(1)) == 1
            [mail] = deliveries(db)
            assert mail.attempts == 2 and mail.last_error is None
        finally:
            peer.stop()
    finally:
        app.config["SMTP_URL"] = None


def test_retries_stop_after_a_day(app, db, team):
    app.config["SMTP_URL"] = f"smtp://127.0.0.1:{free_port()}"
    try:
        open_card(db, team)
        [mail] = deliveries(db)
        db.session.execute(
            update(NotificationDelivery)
            .where(NotificationDelivery.id == mail.id)
            .values(created_at=utcnow() - timedelta(days=1, minutes=1))
        )
        db.session.commit()
        assert outbox.sweep_pending() == {outbox.GAVE_UP: 1}
        [mail] = deliveries(db)
        assert mail.gave_up_at is not None and mail.delivered_at is None
        make_due(db, mail.id)
        assert outbox.sweep_pending() == {}
    finally:
        app.config["SMTP_URL"] = None


def test_a_crash_after_the_lease_loses_nothing_and_sends_once(db, team, smtp):
    open_card(db, team)
    [leased] = outbox.claim_due()  # the worker leased the row and then died before sending
    assert outbox.claim_due() == []  # nobody else takes a leased row
    assert outbox.sweep_pending() == {}
    make_due(db, leased)  # the lease ran out
    assert outbox.sweep_pending() == {outbox.DELIVERED: 1}
    assert len(smtp.wait_for(1)) == 1
    assert outbox.sweep_pending() == {}


def test_a_worker_killed_between_commit_and_send_loses_nothing_and_sends_once(app, db, team, smtp, tmp_path):
    """A real worker process leases the row, connects to a server that never greets, and is SIGKILLed there."""
    open_card(db, team)
    silent = SilentSmtp()
    env = {
        **os.environ,
        "DATABASE_URL": _database_url(),
        "SWITCHBOARD_SMTP_URL": silent.url,
        "SWITCHBOARD_ENCRYPTION_KEY": TEST_CONFIG["ENCRYPTION_KEY"],
        "SECRET_KEY": TEST_CONFIG["SECRET_KEY"],
        "SWITCHBOARD_SMTP_TIMEOUT_SECONDS": "600",
        "SWITCHBOARD_INSTANCE_PATH": str(tmp_path),
    }
    code = (
        "from app import create_app\n"
        "from app.workers.loop import run_once\n"
        "run_once(create_app(), ('notifications',))\n"
    )
    worker = subprocess.Popen([sys.executable, "-c", code], env=env)
    try:
        assert silent.accepted.wait(60), "the worker never tried to send"
        [mail] = deliveries(db)
        assert mail.delivered_at is None and mail.next_attempt_at.replace(tzinfo=None) > utcnow().replace(
            tzinfo=None
        )  # leased and committed, not sent
        worker.send_signal(signal.SIGKILL)
        worker.wait(30)
    finally:
        if worker.poll() is None:
            worker.kill()
        silent.stop()
    assert worker.returncode == -signal.SIGKILL
    assert smtp.messages == []
    assert outbox.sweep_pending() == {}  # still leased by the dead worker
    make_due(db, mail.id)  # its lease runs out
    assert run_once(app, ("notifications",)) == 1
    assert len(smtp.wait_for(1)) == 1
    [mail] = deliveries(db)
    assert mail.delivered_at is not None and mail.attempts == 1
    make_due(db, mail.id)
    assert run_once(app, ("notifications",)) == 0
    assert len(smtp.messages) == 1


@pytest.mark.postgres_only
def test_concurrent_workers_lease_each_row_once(app, db, team, smtp):
    import threading

    company, owner, agent, issue = team
    for slug in ("notion", "github", "linear", "slack"):
        open_card(db, team, slug=slug)
    total = db.session.scalar(select(func.count(NotificationDelivery.id)))
    barrier = threading.Barrier(4)
    claimed: list = []

    def work():
        with app.app_context():
            barrier.wait()
            claimed.extend(outbox.claim_due())
            from app.extensions import db as _db

            _db.session.remove()

    threads = [threading.Thread(target=work) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert sorted(map(str, claimed)) == sorted({str(c) for c in claimed}) and len(claimed) == total


# --- connection events ------------------------------------------------------------------------------------------


def test_the_owner_is_mailed_when_a_connection_needs_reauthorization(db, team, smtp):
    company, owner, _agent, _issue = team
    connection = add_connection(db, company, name="Team Notion", slug="notion", grants=[("user", owner)])
    grant = connection.grants[0]
    notifications.connection_needs_reauthorization(connection, grant)
    db.session.commit()
    assert outbox.sweep_pending() == {outbox.DELIVERED: 1}
    [(envelope, message)] = smtp.wait_for(1)
    assert envelope.rcpt_tos == ["owner@acme.test"]
    assert message["Subject"] == "Team Notion needs you to sign in again"
    body = message.get_content()
    assert "The connection Team Notion stopped working" in body
    assert f"Reconnect it: http://127.0.0.1:5000/apps/{connection.id}/permissions" in body


def test_disabling_a_connection_is_told_once(db, team, make):
    company, owner, _agent, _issue = team
    connection = add_connection(db, company, name="Team Notion", slug="notion")
    actor = make.membership(company, owner)
    # No webhook endpoint and no mail for this event: nothing is queued, and the change still saves.
    update_connection(actor, connection, None, enabled=False)
    db.session.commit()
    assert deliveries(db) == []


def _email_section(client) -> str:
    import re
    from html import unescape

    page = client.get("/settings/notifications")
    assert page.status_code == 200
    section = page.get_data(as_text=True).split('id="email-notifications"', 1)[1].split(">", 1)[1]
    section = section.split("</section>", 1)[0]
    inline = re.sub(r"</?(strong|code|a)\b[^>]*>", "", section)
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", inline)).split()), section


def test_the_settings_page_says_no_email_is_sent_without_a_mail_server(app, db, team, client):
    _company, owner, _agent, _issue = team
    assert not app.config.get("SMTP_URL")
    sign_in(client, owner)
    text, section = _email_section(client)
    assert text == (
        "Email This Switchboard sends no email. No mail server is set up, so nothing is sent to owner@acme.test: "
        "cards, approvals and connections that need you show only in your Inbox. To turn email on, the person who "
        "runs this Switchboard sets SWITCHBOARD_SMTP_URL (for example smtp+starttls://mail.example.com:587) and "
        "restarts it. Then you can choose here whether to get email."
    )
    # No switch that would do nothing.
    assert 'name="email_enabled"' not in section and "<form" not in section


def test_the_settings_page_says_whether_email_is_on_or_off_with_a_mail_server(db, team, smtp, client):
    _company, owner, _agent, _issue = team
    csrf = sign_in(client, owner)
    text, section = _email_section(client)
    assert text.startswith(
        "Email Email is on: owner@acme.test gets one mail when a card or an approval waits for you (at most one per "
        "card), and one when a connection of yours needs you to sign in again. Nothing else is emailed."
    )
    assert 'name="email_enabled"' in section and "checked" in section
    saved = client.post("/settings/notifications", data={"csrf_token": csrf}, follow_redirects=True)
    assert 'id="notifications-saved">Saved. Email is off.</p>' in saved.get_data(as_text=True)
    text, section = _email_section(client)
    assert text.startswith(
        "Email Email is off: nothing is sent to owner@acme.test. Cards, approvals and connections that need you "
        "show only in your Inbox."
    )
    assert "checked" not in section
