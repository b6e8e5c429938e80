"""Continuation delivery: exactly one wake per resolved connection card, crash-safe, retired when moot."""

from __future__ import annotations

import threading
from datetime import timedelta

import pytest
from sqlalchemy import func, select, update

from app.models import ConnectionIntentDelivery, HeartbeatRun, Membership, WakeupRequest
from app.models.base import utcnow
from app.services.intents import resolution
from app.services.runs.invocation import prepare_invocation
from app.workers import continuations
from app.workers.continuations import (
    ALREADY_WOKEN,
    NOT_DUE,
    RETIRED,
    RETRY,
    WOKEN,
    deliver,
    sweep_pending,
    wake_key,
)
from app.workers.run_executor import execute_next_run
from tests.factories import Factory
from tests.services.runs.test_run_instructions import add_connection


@pytest.fixture
def team(make):
    return make.team(adapter_type="manual")


def card(db, company, owner, agent, issue, slug="notion"):
    """A pending connection card opened by a run of the agent, committed."""
    return Factory(db).card(issue, agent, owner, slug, run_finished=True)


def declined(db, team):
    company, owner, agent, issue = team
    interaction = card(db, company, owner, agent, issue)
    resolution.decline_intent(interaction.id, owner.id, "Not now")
    db.session.commit()
    return interaction


def wakes_for(db, interaction_id) -> list[WakeupRequest]:
    return list(
        db.session.scalars(
            select(WakeupRequest).where(
                WakeupRequest.idempotency_key.like(f"connection-intent:{interaction_id}:%")
            )
        )
    )


def reset_lease(db, interaction_id):
    db.session.execute(
        update(ConnectionIntentDelivery)
        .where(ConnectionIntentDelivery.interaction_id == interaction_id)
        .values(next_attempt_at=utcnow() - timedelta(seconds=1))
    )
    db.session.commit()


def delivery_of(db, interaction_id) -> ConnectionIntentDelivery:
    db.session.expire_all()
    return db.session.get(ConnectionIntentDelivery, interaction_id)


def test_declined_card_wakes_the_assignee_once_with_a_fresh_session(db, team):
    _company, owner, agent, issue = team
    interaction = declined(db, team)
    assert deliver(interaction.id) == WOKEN
    [wake] = wakes_for(db, interaction.id)
    assert wake.idempotency_key == wake_key(interaction.id, "declined") and wake.agent_id == agent.id
    run = db.session.get(HeartbeatRun, wake.run_id)
    context = run.context_snapshot
    assert context["interactionId"] == str(interaction.id) and context["outcome"] == "declined"
    assert context["issueId"] == str(issue.id) and context["forceFreshSession"] is True
    assert run.responsible_user_id == owner.id and run.status == "queued"
    assert delivery_of(db, interaction.id).delivered_at is not None

    assert deliver(interaction.id) == NOT_DUE
    assert sweep_pending() == {}
    reset_lease(db, interaction.id)  # even a due-looking delivered row is never delivered again
    assert deliver(interaction.id) == NOT_DUE
    assert len(wakes_for(db, interaction.id)) == 1

    run.status = "running"
    db.session.commit()
    prompt = prepare_invocation(run).prompt
    assert "declined the connection request for Notion" in prompt and "Pursue alternatives" in prompt


def test_connected_card_wakes_with_the_connected_outcome(db, team):
    company, owner, agent, issue = team
    connection = add_connection(db, company, slug="notion", name="Notion", config={})
    interaction = card(db, company, owner, agent, issue)
    resolution.complete_intent(interaction.id, owner.id, connection.id)
    db.session.commit()
    assert sweep_pending() == {WOKEN: 1}
    [wake] = wakes_for(db, interaction.id)
    assert wake.idempotency_key == wake_key(interaction.id, "connected")
    run = db.session.get(HeartbeatRun, wake.run_id)
    assert (
        run.context_snapshot["outcome"] == "connected" and run.context_snapshot["forceFreshSession"] is True
    )


def test_a_crash_after_enqueue_gives_exactly_one_wake(db, team, monkeypatch):
    _company, _owner, agent, issue = team
    interaction = declined(db, team)

    def broken(*args, **kwargs):
        raise RuntimeError("worker crashed while waking")

    monkeypatch.setattr(continuations, "request_wakeup", broken)
    assert deliver(interaction.id) == RETRY
    assert delivery_of(db, interaction.id).delivered_at is None
    assert deliver(interaction.id) == NOT_DUE  # the lease holds the row for a minute
    monkeypatch.undo()

    # A previous worker enqueued the wake and died before marking the row delivered.
    from app.services.runs.wakeups import request_wakeup

    request_wakeup(
        agent, issue=issue, source="automation", idempotency_key=wake_key(interaction.id, "declined")
    )
    db.session.commit()
    reset_lease(db, interaction.id)
    assert deliver(interaction.id) == ALREADY_WOKEN
    assert delivery_of(db, interaction.id).delivered_at is not None
    assert len(wakes_for(db, interaction.id)) == 1
    assert deliver(interaction.id) == NOT_DUE
    assert len(wakes_for(db, interaction.id)) == 1


def test_reassignment_retires_without_waking(db, make, team):
    company, _owner, _agent, issue = team
    interaction = declined(db, team)
    issue.assignee_agent_id = make.agent(company, "Successor").id
    db.session.commit()
    assert deliver(interaction.id) == RETIRED
    assert wakes_for(db, interaction.id) == []
    assert delivery_of(db, interaction.id).delivered_at is not None


def test_closed_task_and_lost_membership_retire(db, make, team):
    company, owner, agent, issue = team
    first = declined(db, team)
    issue.status = "done"
    db.session.commit()
    assert deliver(first.id) == RETIRED

    other_issue = make.issue(company, status="in_progress", assignee=agent, responsible=owner)
    second = card(db, company, owner, agent, other_issue)
    resolution.decline_intent(second.id, owner.id, None)
    db.session.execute(update(Membership).where(Membership.user_id == owner.id).values(status="suspended"))
    db.session.commit()
    assert deliver(second.id) == RETIRED
    assert wakes_for(db, first.id) == [] and wakes_for(db, second.id) == []


def test_a_task_not_in_progress_is_retried_later(db, team):
    *_, issue = team
    interaction = declined(db, team)
    issue.status = "blocked"
    db.session.commit()
    assert deliver(interaction.id) == RETRY
    assert delivery_of(db, interaction.id).delivered_at is None
    issue.status = "in_review"
    db.session.commit()
    reset_lease(db, interaction.id)
    assert deliver(interaction.id) == WOKEN


def test_continuation_queues_behind_an_active_run(db, make, team):
    company, owner, _agent, _issue = team
    agent = make.agent(company, "Runner", adapter_type="process", adapter_config={"command": ["true"]})
    issue = make.issue(company, status="in_progress", assignee=agent, responsible=owner)
    interaction = card(db, company, owner, agent, issue)
    from app.services.runs.wakeups import request_wakeup

    request_wakeup(agent, issue=issue)
    db.session.commit()
    resolution.decline_intent(interaction.id, owner.id, None)
    db.session.commit()
    assert deliver(interaction.id) == WOKEN
    [wake] = wakes_for(db, interaction.id)
    assert wake.status == "queued" and wake.run_id is None
    assert execute_next_run()
    db.session.expire_all()
    wake = db.session.get(WakeupRequest, wake.id)
    assert wake.run_id is not None
    assert db.session.get(HeartbeatRun, wake.run_id).context_snapshot["outcome"] == "declined"


@pytest.mark.postgres_only
def test_two_workers_deliver_200_resolutions_exactly_once(app, db, make, team):
    company, owner, agent, _issue = team
    issues = [make.issue(company, status="in_progress", assignee=agent, responsible=owner) for _ in range(20)]
    ids = []
    for n in range(200):
        interaction = card(db, company, owner, agent, issues[n % 20])
        resolution.decline_intent(interaction.id, owner.id, None)
        db.session.commit()
        ids.append(interaction.id)
    db.session.remove()

    results: list[list[str]] = [[], []]
    errors: list[BaseException] = []
    start = threading.Barrier(2)

    def worker(slot: int) -> None:
        try:
            with app.app_context():
                from app.extensions import db as _db

                start.wait()
                try:
                    while True:
                        claimed = continuations.claim_due(limit=5)
                        if not claimed:
                            break
                        for interaction_id in claimed:
                            results[slot].append(continuations.deliver_leased(interaction_id))
                finally:
                    _db.session.remove()
        except BaseException as exc:  # surfaced below
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(slot,)) for slot in (0, 1)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    delivered = results[0] + results[1]
    assert len(delivered) == 200 and set(delivered) == {WOKEN}
    assert results[0] and results[1]  # both workers took part
    keys = list(
        db.session.scalars(
            select(WakeupRequest.idempotency_key).where(WakeupRequest.idempotency_key.is_not(None))
        )
    )
    assert sorted(keys) == sorted(wake_key(i, "declined") for i in ids)
    pending = db.session.scalar(
        select(func.count())
        .select_from(ConnectionIntentDelivery)
        .where(ConnectionIntentDelivery.delivered_at.is_(None))
    )
    assert pending == 0


def test_a_sweep_delivers_a_batch_in_constant_statements(app, db, make, team):
    from tests.conftest import count_statements

    company, owner, agent, _issue = team
    counts = []
    for size in (3, 12):
        ids = []
        for _ in range(size):
            issue = make.issue(company, status="in_progress", assignee=agent, responsible=owner)
            interaction = card(db, company, owner, agent, issue)
            resolution.decline_intent(interaction.id, owner.id, None)
            db.session.commit()
            ids.append(interaction.id)
        db.session.expunge_all()  # nothing answered from the identity map
        with count_statements(db.engine) as statements:
            assert sweep_pending() == {WOKEN: size}
        counts.append(len(statements))
        assert {len(wakes_for(db, i)) for i in ids} == {1}
        company, owner, agent = (db.session.merge(o, load=True) for o in (company, owner, agent))
    assert counts[0] == counts[1]
    runs = db.session.scalars(select(HeartbeatRun).where(HeartbeatRun.status == "queued")).all()
    assert len(runs) == 15  # each task got its continuation run
