"""Races and faults on PostgreSQL: every interleaving ends with one resolution, one outbox row, one wake, none lost.

Each racer runs in its own thread with its own app context (so its own session and connection), lined up on a
`threading.Barrier`, and commits or rolls back like a request would. Cards are resolved through the services the
routes call; delivery goes through the worker functions (`claim_due`, `deliver_leased`, `deliver`, `sweep_pending`).
The fault test kills a real child process (SIGKILL) in the middle of a delivery.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
import uuid
from collections.abc import Callable
from datetime import timedelta

import pytest
from sqlalchemy import func, select, text, update

from app.core.errors import ServiceError
from app.models import (
    ConnectionInstall,
    ConnectionIntentDelivery,
    GrantDelegation,
    Membership,
    ThreadInteraction,
    WakeupRequest,
)
from app.models.base import utcnow
from app.services.intents import card as intents_card
from app.services.intents import resolution as intents_resolution
from app.services.runs.tokens import mint_run_token, open_run, verify_run_token
from app.services.runtime import context as runtime_tools_context
from app.services.runtime import request as runtime_tools_request
from app.services.tenancy import change_member
from app.services.work import update_issue
from app.workers import continuations
from app.workers.continuations import ALREADY_WOKEN, NOT_DUE, RETIRED, WOKEN, wake_key
from tests.conftest import TEST_CONFIG
from tests.factories import Factory
from tests.paths import ROOT
from tests.services.runs.test_run_instructions import add_connection

pytestmark = pytest.mark.postgres_only

ITERATIONS = 20
JOIN_SECONDS = 60
PROJECT_ROOT = ROOT


# --- helpers -------------------------------------------------------------------------------------------------


def race(app, *actions: Callable[[], object]) -> list[tuple[str, object]]:
    """Run each action in its own thread and app context, all released at once; commit on success.

    Returns one (kind, value) per action: ("ok", result), ("refused", ServiceError message) or ("error", repr).
    """
    barrier = threading.Barrier(len(actions))
    outcomes: list[tuple[str, object]] = [("error", "did not finish")] * len(actions)

    def run(slot: int, action: Callable[[], object]) -> None:
        from app.extensions import db as _db

        with app.app_context():
            try:
                barrier.wait(timeout=JOIN_SECONDS)
                value = action()
                _db.session.commit()
                outcomes[slot] = ("ok", value)
            except ServiceError as err:
                _db.session.rollback()
                outcomes[slot] = ("refused", err.message)
            except Exception as exc:  # reported by the caller (a deadlock or a 500 would land here)
                _db.session.rollback()
                outcomes[slot] = ("error", repr(exc))
            finally:
                _db.session.remove()

    threads = [threading.Thread(target=run, args=(slot, action)) for slot, action in enumerate(actions)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(JOIN_SECONDS)
        assert not thread.is_alive(), "a racer hung"
    return outcomes


def in_thread_session(fn: Callable) -> Callable[[], object]:
    """Adapt `fn(session_db)` for `race` (the racer's own scoped session)."""

    def call():
        from app.extensions import db as _db

        return fn(_db)

    return call


def open_card(db, company, addressee, agent, issue, slug: str = "notion") -> uuid.UUID:
    """A pending connection card opened by a (finished) run of the agent, committed; returns its id."""
    return Factory(db).card(issue, agent, addressee, slug, run_finished=True, expect_new=True).id


def outbox_rows(db, interaction_id) -> list[ConnectionIntentDelivery]:
    db.session.expire_all()
    return list(
        db.session.scalars(
            select(ConnectionIntentDelivery).where(ConnectionIntentDelivery.interaction_id == interaction_id)
        )
    )


def wakes_for(db, interaction_id) -> list[WakeupRequest]:
    db.session.expire_all()
    return list(
        db.session.scalars(
            select(WakeupRequest).where(
                WakeupRequest.idempotency_key.like(f"connection-intent:{interaction_id}:%")
            )
        )
    )


def undelivered(db) -> int:
    db.session.expire_all()
    return db.session.scalar(
        select(func.count())
        .select_from(ConnectionIntentDelivery)
        .where(ConnectionIntentDelivery.delivered_at.is_(None))
    )


def expire_leases(db) -> None:
    """What the clock does after LEASE_SECONDS: every unacknowledged row becomes due again."""
    db.session.execute(
        update(ConnectionIntentDelivery)
        .where(ConnectionIntentDelivery.delivered_at.is_(None))
        .values(next_attempt_at=utcnow() - timedelta(seconds=1))
    )
    db.session.commit()


def sweep_with_two_workers(app) -> list[str]:
    """Two workers sweep concurrently until nothing is due; returns every delivery result."""
    results: list[str] = []
    lock = threading.Lock()

    def worker():
        while True:
            counts = continuations.sweep_pending(limit=3)
            if not counts:
                return counts
            with lock:
                for result, n in counts.items():
                    results.extend([result] * n)

    outcomes = race(app, worker, worker)
    assert [kind for kind, _ in outcomes] == ["ok", "ok"], outcomes
    return results


def complete(interaction_id, user_id, connection_id):
    return lambda: intents_resolution.complete_intent(interaction_id, user_id, connection_id).status


def decline(interaction_id, user_id):
    return lambda: intents_resolution.decline_intent(interaction_id, user_id, "Not now").status


def close_task(issue_id, actor_user_id, company_id):
    def action():
        from app.extensions import db as _db
        from app.models import Issue

        actor = _db.session.scalar(
            select(Membership).where(Membership.company_id == company_id, Membership.user_id == actor_user_id)
        )
        issue = _db.session.get(Issue, issue_id)
        update_issue(actor, issue, status="done")
        return "closed"

    return action


@pytest.fixture
def team(make):
    company = make.company("Acme")
    owner = make.member(company, "owner")
    agent = make.agent(company, "Builder", adapter_type="manual")
    return company, owner, agent


# --- complete vs decline vs expiry-on-close ------------------------------------------------------------------


@pytest.mark.parametrize("with_close", [True, False], ids=["with-close", "complete-vs-decline"])
def test_complete_decline_and_close_resolve_each_card_once(app, db, make, team, with_close):
    company, owner, agent = team
    connection = add_connection(db, company, slug="notion", name="Notion", config={})
    cards = []
    for _ in range(ITERATIONS):
        issue = make.issue(company, status="in_progress", assignee=agent, responsible=owner)
        interaction_id = open_card(db, company, owner, agent, issue)
        racers = [complete(interaction_id, owner.id, connection.id), decline(interaction_id, owner.id)]
        names = ["complete", "decline"]
        if with_close:
            racers.append(close_task(issue.id, owner.id, company.id))
            names.append("close")
        db.session.commit()  # end the transaction; objects reload on access
        outcomes = race(app, *racers)
        errors = [
            f"{name}: {value}" for name, (kind, value) in zip(names, outcomes, strict=True) if kind == "error"
        ]
        assert errors == [], "\n".join(errors)  # a deadlock here would be a 500 for that person

        interaction = db.session.get(ThreadInteraction, interaction_id)
        winners = [value for kind, value in outcomes[:2] if kind == "ok"]
        assert (
            interaction.status in ("accepted", "rejected", "expired") and interaction.resolved_at is not None
        )
        if interaction.status == "expired":
            # The close committed first: both answers were refused and nothing was queued.
            assert winners == [] and interaction.result["outcome"] == "issue_closed"
            assert outbox_rows(db, interaction_id) == []
        else:
            assert winners == [interaction.status]  # exactly one answer won
            assert len(outbox_rows(db, interaction_id)) == 1
        if with_close:
            assert outcomes[2] == ("ok", "closed")
        cards.append((interaction_id, interaction.status))

    results = sweep_with_two_workers(app)
    resolved = [(i, status) for i, status in cards if status != "expired"]
    assert len(results) == len(resolved)  # every outbox row was handled exactly once
    assert undelivered(db) == 0
    for interaction_id, status in cards:
        wakes = wakes_for(db, interaction_id)
        if with_close or status == "expired":
            assert wakes == []  # the task closed: the continuation is retired, never delivered
        else:
            outcome = continuations.OUTCOMES[status]
            assert [w.idempotency_key for w in wakes] == [wake_key(interaction_id, outcome)]
    assert set(results) <= ({RETIRED} if with_close else {WOKEN})


# --- decline vs a repeat request from the same run ---------------------------------------------------------


def repeat_request(claims: dict, slug: str):
    """What the runtime request door does for a call of the run's token (validation, then the request)."""
    return lambda: runtime_tools_request.request_connection(
        runtime_tools_context.load_run_context(claims), slug
    )


def test_decline_racing_a_repeat_request_never_leaves_a_new_pending_card(app, db, make, team):
    company, owner, agent = team
    for _ in range(ITERATIONS):
        issue = make.issue(company, status="in_progress", assignee=agent, responsible=owner)
        run = open_run(agent, issue, owner.id)
        db.session.commit()
        claims = verify_run_token(mint_run_token(run).token)
        first = runtime_tools_request.request_connection(
            runtime_tools_context.load_run_context(claims), "notion"
        )
        db.session.commit()
        card_id = first["interactionId"]
        outcomes = race(
            app,
            decline(uuid.UUID(card_id), owner.id),
            repeat_request(claims, "notion"),
            repeat_request(claims, "notion"),
        )
        assert outcomes[0] == ("ok", "rejected"), outcomes
        for kind, value in outcomes[1:]:
            # Before the decline committed the request reused the pending card; after it, the refusal.
            assert (kind == "ok" and value["interactionId"] == card_id) or (
                kind == "refused" and value == runtime_tools_request.DECLINED_IN_CONTINUATION
            ), outcomes
        db.session.expire_all()
        cards = db.session.scalars(
            select(ThreadInteraction).where(ThreadInteraction.issue_id == issue.id)
        ).all()
        assert [(str(c.id), c.status) for c in cards] == [(card_id, "rejected")]
        # And once the decline is committed, the same run is refused.
        again = race(app, repeat_request(claims, "notion"))
        assert again == [("refused", runtime_tools_request.DECLINED_IN_CONTINUATION)]


# --- membership revocation vs complete -----------------------------------------------------------------------


def addressee_with_personal_connection(db, make, company, agent, owner):
    """A member responsible for a task, with their own Notion connection (so complete would delegate + install)."""
    member = make.member(company, "member")
    connection = add_connection(
        db, company, slug="notion", name=f"Notion of {member.name}", config={}, grants=[("user", member)]
    )
    issue = make.issue(company, status="in_progress", assignee=agent, responsible=member)
    return member, connection, open_card(db, company, member, agent, issue)


def revoke(company_id, owner_id, member_id, how: str):
    def action():
        from app.extensions import db as _db

        memberships = {
            m.user_id: m
            for m in _db.session.scalars(
                select(Membership).where(
                    Membership.company_id == company_id, Membership.user_id.in_([owner_id, member_id])
                )
            )
        }
        change_member(
            memberships[owner_id],
            memberships[member_id],
            **({"status": "suspended"} if how == "suspend" else {"role": "viewer"}),
        )
        return "revoked"

    return action


def writes_of(db, interaction_id, connection_id, agent_id) -> dict[str, int]:
    db.session.expire_all()
    count = lambda model, *where: db.session.scalar(select(func.count()).select_from(model).where(*where))  # noqa: E731
    return {
        "delegations": count(GrantDelegation, GrantDelegation.agent_id == agent_id),
        "agent_installs": count(
            ConnectionInstall,
            ConnectionInstall.connection_id == connection_id,
            ConnectionInstall.target_type == "agent",
            ConnectionInstall.target_id == agent_id,
        ),
        "outbox": len(outbox_rows(db, interaction_id)),
    }


def test_revocation_racing_complete_never_leaves_a_half_connection(app, db, make, team):
    company, owner, agent = team
    seen = set()
    for n in range(ITERATIONS):
        member, connection, interaction_id = addressee_with_personal_connection(
            db, make, company, agent, owner
        )
        db.session.commit()  # end the transaction; objects reload on access
        before = writes_of(db, interaction_id, connection.id, agent.id)
        how = "suspend" if n % 2 == 0 else "viewer"
        outcomes = race(
            app,
            complete(interaction_id, member.id, connection.id),
            revoke(company.id, owner.id, member.id, how),
        )
        assert outcomes[1] == ("ok", "revoked"), outcomes
        after = writes_of(db, interaction_id, connection.id, agent.id)
        interaction = db.session.get(ThreadInteraction, interaction_id)
        if outcomes[0] == ("ok", "accepted"):
            # Complete took the membership lock first: the whole connection landed, then access was revoked.
            assert interaction.status == "accepted"
            assert after == {
                "delegations": before["delegations"] + 1,
                "agent_installs": 1,
                "outbox": 1,
            }
            seen.add("complete first")
        else:
            # Revocation committed first: complete wrote nothing at all.
            assert outcomes[0] == ("refused", intents_card.NO_WRITE_ACCESS), outcomes
            assert interaction.status == "pending"
            assert after == before == {**before, "agent_installs": 0, "outbox": 0}
            seen.add("revocation first")
    results = sweep_with_two_workers(app)
    # A revoked addressee's continuation is retired: no wake, nothing left pending.
    assert set(results) <= {RETIRED} and undelivered(db) == 0
    assert db.session.scalar(select(func.count()).select_from(WakeupRequest)) == 0
    assert seen  # at least one ordering was exercised (which one is up to the scheduler)


def backends(db, condition: str) -> int:
    """Other backends of this database matching `condition` (a fresh transaction: activity is snapshotted)."""
    db.session.rollback()
    query = (
        "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
    )
    count = db.session.execute(text(f"{query} AND {condition}")).scalar_one()  # noqa: S608 (test constants)
    db.session.rollback()
    return count


def test_revocation_committed_while_complete_waits_writes_nothing(app, db, make, team):
    """The exact interleaving: complete has locked the card and task and waits on the membership row lock that
    an uncommitted revocation holds; the revocation commits; complete must see it and write nothing."""
    company, owner, agent = team
    member, connection, interaction_id = addressee_with_personal_connection(db, make, company, agent, owner)
    # Plain ids for the threads (the test's objects belong to the test's session).
    revocation = revoke(company.id, owner.id, member.id, "suspend")
    completion = complete(interaction_id, member.id, connection.id)
    db.session.commit()  # end the transaction; objects reload on access
    revoked_uncommitted = threading.Event()
    may_commit = threading.Event()
    outcome: dict[str, object] = {}

    def revoker():
        from app.extensions import db as _db

        with app.app_context():
            revocation()
            _db.session.flush()  # the UPDATE holds the membership row lock
            revoked_uncommitted.set()
            assert may_commit.wait(JOIN_SECONDS)
            _db.session.commit()
            _db.session.remove()

    def completer():
        from app.extensions import db as _db

        with app.app_context():
            assert revoked_uncommitted.wait(JOIN_SECONDS)
            try:
                completion()
                _db.session.commit()
                outcome["complete"] = "ok"
            except ServiceError as err:
                _db.session.rollback()
                outcome["complete"] = err.message
            finally:
                _db.session.remove()

    threads = [threading.Thread(target=revoker), threading.Thread(target=completer)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + JOIN_SECONDS
    try:
        while backends(db, "wait_event_type = 'Lock'") == 0:  # complete now waits on the membership row
            assert time.monotonic() < deadline and threads[1].is_alive(), outcome
            time.sleep(0.02)
    finally:
        may_commit.set()
    for thread in threads:
        thread.join(JOIN_SECONDS)
    assert outcome == {"complete": intents_card.NO_WRITE_ACCESS}
    assert writes_of(db, interaction_id, connection.id, agent.id) == {
        "delegations": 0,
        "agent_installs": 0,
        "outbox": 0,
    }
    assert db.session.get(ThreadInteraction, interaction_id).status == "pending"


# --- two workers delivering the same outbox row ---------------------------------------------------------------


def declined_cards(db, make, company, owner, agent, count: int) -> list[uuid.UUID]:
    ids = []
    for _ in range(count):
        issue = make.issue(company, status="in_progress", assignee=agent, responsible=owner)
        interaction_id = open_card(db, company, owner, agent, issue)
        intents_resolution.decline_intent(interaction_id, owner.id, None)
        db.session.commit()
        ids.append(interaction_id)
    db.session.commit()  # end the transaction; objects reload on access
    return ids


def test_two_workers_racing_on_the_same_row_wake_once(app, db, make, team):
    """The web fast path (`deliver` after the commit) and a worker, both on the same row at the same moment."""
    company, owner, agent = team
    for _ in range(ITERATIONS):
        [interaction_id] = declined_cards(db, make, company, owner, agent, 1)
        outcomes = race(
            app, lambda i=interaction_id: continuations.deliver(i), lambda: continuations.sweep_pending()
        )
        assert [kind for kind, _ in outcomes] == ["ok", "ok"], outcomes
        fast, sweep = outcomes[0][1], outcomes[1][1]
        assert (fast, sweep) in ((WOKEN, {}), (NOT_DUE, {WOKEN: 1})), outcomes
        assert len(wakes_for(db, interaction_id)) == 1
    assert undelivered(db) == 0


def test_overlapping_leases_on_the_same_row_wake_once(app, db, make, team):
    """A lease expires while its worker is still delivering; a second worker leases the row again and both
    deliver at the same moment: the wake's unique key lets exactly one of them wake the agent."""
    company, owner, agent = team
    for interaction_id in declined_cards(db, make, company, owner, agent, ITERATIONS):
        assert continuations.claim_due(1, interaction_id) == [interaction_id]  # worker A's lease
        db.session.commit()  # end the transaction; objects reload on access
        expire_leases(db)  # A is slow: its lease runs out
        assert continuations.claim_due(1, interaction_id) == [interaction_id]  # worker B's lease
        db.session.commit()  # end the transaction; objects reload on access
        outcomes = race(
            app,
            lambda i=interaction_id: continuations.deliver_leased(i),
            lambda i=interaction_id: continuations.deliver_leased(i),
        )
        assert sorted(value for _, value in outcomes) == sorted([WOKEN, ALREADY_WOKEN]), outcomes
        [wake] = wakes_for(db, interaction_id)
        assert wake.idempotency_key == wake_key(interaction_id, "declined")
    assert undelivered(db) == 0


# --- a worker killed with SIGKILL between enqueue and acknowledgement -----------------------------------------

CHILD_WORKER = textwrap.dedent(
    """
    import os, sys, time
    from app import create_app
    from app.extensions import db
    from app.workers import continuations

    config = {
        "SQLALCHEMY_DATABASE_URI": os.environ["RACE_DATABASE_URL"],
        "SECRET_KEY": os.environ["RACE_SECRET_KEY"],
        "ENCRYPTION_KEY": os.environ["RACE_ENCRYPTION_KEY"],
        "TESTING": True,
    }
    app = create_app(config)
    commit_enqueue = os.environ["RACE_MODE"] == "enqueue-committed"
    continuations.LEASE_SECONDS = 30

    def hang_before_ack(interaction_id):
        db.session.flush()
        if commit_enqueue:
            db.session.commit()  # the wake is durable; the acknowledgement never comes
        print("ENQUEUED", flush=True)
        time.sleep(3600)

    continuations._mark_delivered = hang_before_ack
    with app.app_context():
        claimed = continuations.claim_due(1, __import__("uuid").UUID(sys.argv[1]))
        print("LEASED", len(claimed), flush=True)
        continuations.deliver_leased(claimed[0])
    """
)


def _read_line(process: subprocess.Popen, deadline: float) -> str:
    line = process.stdout.readline()
    assert line and time.monotonic() < deadline, line or process.stderr.read()
    return line.strip()


@pytest.mark.parametrize("mode", ["enqueue-uncommitted", "enqueue-committed"])
def test_worker_killed_between_enqueue_and_ack_wakes_once(app, db, make, team, tmp_path, mode):
    """`enqueue-uncommitted` is the real window (wake inserted, transaction open); `enqueue-committed` is the
    harsher fault of a wake that became durable without its acknowledgement. Either way: one wake, nothing lost."""
    company, owner, agent = team
    [interaction_id] = declined_cards(db, make, company, owner, agent, 1)
    script = tmp_path / "child_worker.py"
    script.write_text(CHILD_WORKER)
    env = {
        **os.environ,
        "PYTHONPATH": str(PROJECT_ROOT),
        "RACE_DATABASE_URL": app.config["SQLALCHEMY_DATABASE_URI"],
        "RACE_SECRET_KEY": TEST_CONFIG["SECRET_KEY"],
        "RACE_ENCRYPTION_KEY": TEST_CONFIG["ENCRYPTION_KEY"],
        "RACE_MODE": mode,
    }
    process = subprocess.Popen(
        [sys.executable, str(script), str(interaction_id)],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        deadline = time.monotonic() + JOIN_SECONDS
        assert _read_line(process, deadline) == "LEASED 1"
        assert _read_line(process, deadline) == "ENQUEUED"
    finally:
        process.send_signal(signal.SIGKILL)
        process.wait(JOIN_SECONDS)
    assert process.returncode == -signal.SIGKILL

    # The dead worker's lease still holds the row: nobody delivers it early.
    deadline = time.monotonic() + JOIN_SECONDS
    while backends(db, "state LIKE 'idle in transaction%'"):
        # PostgreSQL notices the dropped connection and rolls back the dead worker's transaction.
        assert time.monotonic() < deadline
        time.sleep(0.05)
    assert continuations.sweep_pending() == {}
    committed = len(wakes_for(db, interaction_id))
    assert committed == (1 if mode == "enqueue-committed" else 0)

    expire_leases(db)  # the lease runs out
    results = sweep_with_two_workers(app)
    assert results == [ALREADY_WOKEN if committed else WOKEN]
    [wake] = wakes_for(db, interaction_id)
    assert wake.idempotency_key == wake_key(interaction_id, "declined") and wake.status == "claimed"
    assert undelivered(db) == 0
    assert sweep_with_two_workers(app) == []
    assert len(wakes_for(db, interaction_id)) == 1


# --- access revisions under concurrent writers ----------------------------------------------------------------


def test_concurrent_access_writes_each_raise_the_revision_once(app, db, make, team):
    """Eight writers holding a task lock and the company row (issue numbering) all commit, and each raises the
    revision exactly once: the raise is their last statement, on its own row, so none is lost or refused."""
    from app.models import AccessRevision, ToolConnection
    from app.services.connections.audience import add_agent_install
    from app.services.tenancy import allocate_issue_identifier

    company, owner, agent = team
    connection = add_connection(db, company, slug="notion", name="Notion", config={}, install=agent)
    agents = [make.agent(company, f"Helper {n}", adapter_type="manual") for n in range(8)]
    issue = make.issue(company, status="in_progress", assignee=agent, responsible=owner)
    db.session.commit()

    def revision() -> int:
        db.session.expire_all()
        value = db.session.scalar(
            select(AccessRevision.revision).where(AccessRevision.company_id == company.id)
        )
        return value or 0

    def writer(helper_id):
        def act():
            from app.extensions import db as _db
            from app.models import Issue

            # The house lock order (task first), then the company row for numbering, both held until commit.
            _db.session.execute(select(Issue.id).where(Issue.id == issue.id).with_for_update())
            allocate_issue_identifier(company.id)
            add_agent_install(_db.session.get(ToolConnection, connection.id), helper_id, owner.id)
            _db.session.flush()
            return "written"

        return act

    before = revision()
    for _ in range(3):
        outcomes = race(app, *(writer(a.id) for a in agents))
        assert outcomes == [("ok", "written")] * len(agents)
        db.session.execute(
            ConnectionInstall.__table__.delete().where(
                ConnectionInstall.target_id.in_([a.id for a in agents])
            )
        )
        db.session.commit()  # a bulk delete: one more raise
    assert revision() == before + 3 * (len(agents) + 1)
