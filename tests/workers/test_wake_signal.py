"""Wake signals: an idle worker starts on the commit that leaves it work, not at its next poll.

Every worker here polls once an hour, so a delivery proves the signal woke it. On PostgreSQL the resolution also
runs in another process, so only the NOTIFY (through the worker's LISTEN) can reach the worker.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading
import time

import pytest
from sqlalchemy import select

from app.core import wake_signal
from app.models import ConnectionIntentDelivery, HeartbeatRun, WakeupRequest
from app.services.intents import resolution
from app.workers import listener as listener_module
from app.workers.loop import run_worker_forever, stop_worker
from tests.conftest import _database_url, backend_name
from tests.paths import ROOT
from tests.workers.test_continuations import card, team  # noqa: F401  (the fixture)

AN_HOUR = 3600.0


def _until(predicate, what: str, limit: float = 30.0) -> None:
    """Wait for `predicate` (a hang guard, not a timing assertion)."""
    deadline = time.monotonic() + limit
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting for {what}")
        time.sleep(0.01)


class Worker:
    """`run_worker_forever` in a thread, polling hourly; counts its passes."""

    def __init__(self, app, jobs):
        self.stop = threading.Event()
        self.passes = 0
        self.app = app
        self.jobs = jobs
        self.thread = threading.Thread(target=self._run, daemon=True)

    def _run(self):
        import app.workers.loop as loop

        real = loop.run_once

        def counted(app, jobs):
            done = real(app, jobs)
            self.passes += 1
            return done

        loop_run_once, loop.run_once = loop.run_once, counted
        try:
            run_worker_forever(self.app, AN_HOUR, jobs=self.jobs, stop=self.stop)
        finally:
            loop.run_once = loop_run_once

    def __enter__(self):
        self.others = wake_signal.waiting()
        self.thread.start()
        _until(lambda: self.passes >= 1 and wake_signal.waiting() > self.others, "the worker to go idle")
        return self

    def until_idle_again(self):
        _until(
            lambda: self.passes >= 3 and wake_signal.waiting() > self.others, "the worker to go idle again"
        )

    def __exit__(self, *exc):
        stop_worker(self.stop)
        self.thread.join(timeout=10)


def _delivered(db, interaction_id) -> bool:
    db.session.expire_all()
    row = db.session.get(ConnectionIntentDelivery, interaction_id)
    done = row is not None and row.delivered_at is not None
    db.session.rollback()
    return done


def test_an_idle_worker_delivers_a_resolution_at_once(app, db, team):  # noqa: F811
    company, owner, agent, issue = team
    interaction = card(db, company, owner, agent, issue)
    with Worker(app, ("continuations",)) as worker:
        resolution.decline_intent(interaction.id, owner.id, None)
        db.session.commit()  # nobody calls deliver(): only the signal can wake the worker
        _until(lambda: _delivered(db, interaction.id), "the delivery")
        # Idle, woken by the signal and delivered, idle again: all within the first of its hourly polls.
        worker.until_idle_again()
    wake = db.session.scalar(select(WakeupRequest).where(WakeupRequest.idempotency_key.is_not(None)))
    assert wake is not None and wake.status == "claimed"


def test_a_rolled_back_resolution_wakes_nobody(app, db, team):  # noqa: F811
    company, owner, agent, issue = team
    interaction = card(db, company, owner, agent, issue)
    seen = wake_signal.generation(("continuations",))
    resolution.decline_intent(interaction.id, owner.id, None)
    db.session.rollback()
    assert wake_signal.generation(("continuations",)) == seen


def test_a_queued_run_wakes_the_run_worker(app, db, make):
    company = make.company("Acme")
    owner = make.member(company, "owner")
    agent = make.agent(company, "Builder", adapter_type="manual")  # not executable: claimed by nobody
    issue = make.issue(company, status="in_progress", assignee=agent, responsible=owner)
    db.session.commit()
    seen = wake_signal.generation(("runs",))
    from app.services.runs.wakeups import request_wakeup

    request_wakeup(agent, issue=issue, reason="test")
    assert wake_signal.generation(("runs",)) == seen  # not before the commit
    db.session.commit()
    assert wake_signal.generation(("runs",)) > seen
    assert db.session.scalar(select(HeartbeatRun.status)) == "queued"


RESOLVE_ELSEWHERE = """
import sys, uuid
from app import create_app
from app.extensions import db
from app.services.intents import resolution
from tests.conftest import TEST_CONFIG
app = create_app({**TEST_CONFIG, "SQLALCHEMY_DATABASE_URI": sys.argv[1]})
with app.app_context():
    resolution.decline_intent(uuid.UUID(sys.argv[2]), uuid.UUID(sys.argv[3]), None)
    db.session.commit()
"""


@pytest.mark.postgres_only
def test_a_worker_in_listen_wakes_on_a_notify_from_another_process(app, db, team):  # noqa: F811
    assert backend_name() == "postgresql"
    company, owner, agent, issue = team
    interaction_id, owner_id = card(db, company, owner, agent, issue).id, owner.id
    db.session.remove()
    with Worker(app, ("continuations",)) as worker:
        listener = listener_module.ensure_listener(db.engine.url)
        assert listener is not None
        _until(listener.listening.is_set, "the listener")
        received = listener.received
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        subprocess.run(
            [sys.executable, "-c", RESOLVE_ELSEWHERE, _database_url(), str(interaction_id), str(owner_id)],
            cwd=ROOT,
            env=env,
            check=True,
            timeout=120,
        )
        _until(lambda: _delivered(db, interaction_id), "the delivery")
        worker.until_idle_again()
        assert listener.received > received  # the resolution's NOTIFY reached this process
