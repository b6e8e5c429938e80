"""Every path that ends a run hands on to the next queued wake of the agent on the task (issue 26 item 5).

The paths: `switchboard runs close` (and its service), completion (succeeded or failed), failure before the adapter
ran, and recovery of a run abandoned by a dead worker. A race on PostgreSQL: a wake recorded while the run ends is
never left queued behind a finished run.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta

import pytest
from sqlalchemy import select

from app.adapters import AdapterResult
from app.models import HeartbeatRun, WakeupRequest
from app.models.base import utcnow
from app.services.runs import lifecycle
from app.services.runs.tokens import open_run
from app.services.runs.wakeups import request_wakeup
from tests.conftest import backend_name


@pytest.fixture
def team(make):
    return make.team(adapter_type="manual")


def _queued_behind(db, agent, issue) -> WakeupRequest:
    wake = request_wakeup(agent, issue=issue, source="comment", reason="A comment arrived")
    db.session.commit()
    assert wake.status == "queued" and wake.run_id is None  # waits behind the active run
    return wake


def _cli_close(app, db, run) -> None:
    result = app.test_cli_runner().invoke(args=["runs", "close", str(run.id)])
    assert result.exit_code == 0, result.output
    assert result.output == f"{run.id}: succeeded\n"


def _service_close(app, db, run) -> None:
    lifecycle.close_run(run.id)
    db.session.commit()


def _complete_ok(app, db, run) -> None:
    lifecycle.complete_run(run, AdapterResult(ok=True, stdout="done"))
    db.session.commit()


def _complete_failed(app, db, run) -> None:
    lifecycle.complete_run(run, AdapterResult(ok=False, error="exit 2"))
    db.session.commit()


def _fail(app, db, run) -> None:
    lifecycle.fail_run(run, "The agent has no executable adapter.")
    db.session.commit()


def _recover(app, db, run) -> None:
    run.started_at = utcnow() - timedelta(hours=2)
    db.session.commit()
    assert lifecycle.recover_abandoned_runs() == 1  # handed back once with its wake
    db.session.commit()
    db.session.refresh(run)
    assert run.status == "queued"
    run.status, run.started_at = (
        "running",
        utcnow() - timedelta(hours=2),
    )  # claimed again; that worker died too
    db.session.commit()
    assert lifecycle.recover_abandoned_runs() == 1  # abandoned again: ended
    db.session.commit()


PATHS: dict[str, tuple[Callable, str]] = {
    "cli-close": (_cli_close, "succeeded"),
    "service-close": (_service_close, "succeeded"),
    "complete-ok": (_complete_ok, "succeeded"),
    "complete-failed": (_complete_failed, "failed"),
    "fail": (_fail, "failed"),
    "recover-abandoned": (_recover, "failed"),
}


@pytest.mark.parametrize("path", list(PATHS))
def test_every_path_that_ends_a_run_starts_the_next_queued_wake(app, db, team, path):
    _company, owner, agent, issue = team
    run = open_run(agent, issue, owner.id)
    db.session.commit()
    wake = _queued_behind(db, agent, issue)
    end, status = PATHS[path]

    end(app, db, run)

    db.session.expire_all()
    ended = db.session.get(HeartbeatRun, run.id)
    assert ended.status == status and ended.finished_at is not None
    wake = db.session.get(WakeupRequest, wake.id)
    assert wake.status == "claimed" and wake.run_id is not None
    nxt = db.session.get(HeartbeatRun, wake.run_id)
    assert (nxt.status, nxt.agent_id, nxt.issue_id, nxt.invocation_source) == (
        "queued",
        agent.id,
        issue.id,
        "comment",
    )
    assert nxt.context_snapshot["wakeupRequestId"] == str(wake.id)


def test_closing_a_run_records_its_end_and_finishes_its_wake(app, db, team):
    """`runs close` on a woken run: the run's wake is finished (not left claimed) and the end is in the activity."""
    from app.models import ActivityLog

    _company, _owner, agent, issue = team
    first = request_wakeup(agent, issue=issue, source="assignment", reason="assigned")
    db.session.commit()
    run = db.session.get(HeartbeatRun, first.run_id)
    _cli_close(app, db, run)
    db.session.expire_all()
    assert db.session.get(WakeupRequest, first.id).status == "finished"
    actions = list(db.session.scalars(select(ActivityLog.action).where(ActivityLog.entity_id == str(run.id))))
    assert actions == ["run.succeeded"]


def test_closing_an_ended_run_changes_nothing_and_starts_nothing(app, db, team):
    _company, owner, agent, issue = team
    run = open_run(agent, issue, owner.id)
    db.session.commit()
    _cli_close(app, db, run)
    again = app.test_cli_runner().invoke(args=["runs", "close", str(run.id)])
    assert again.exit_code == 0 and again.output == f"{run.id}: succeeded\n"
    db.session.expire_all()
    assert db.session.scalars(select(HeartbeatRun).where(HeartbeatRun.agent_id == agent.id)).all() == [
        db.session.get(HeartbeatRun, run.id)
    ]


@pytest.mark.skipif(backend_name() != "postgresql", reason="a race between two connections needs PostgreSQL")
@pytest.mark.parametrize("path", ["service-close", "fail"])
def test_a_wake_recorded_while_the_run_ends_is_never_stranded(app, db, team, path):
    """The ending and a new wake race (each in its own transaction): whichever commits first, the wake becomes the
    next run."""
    from app.models import Agent, Issue
    from tests.system.test_races_postgres import in_thread_session, race

    _company, owner, agent, issue = team
    agent_id, issue_id = agent.id, issue.id
    for _ in range(10):
        run_id = open_run(agent, issue, owner.id).id
        db.session.commit()

        def end(session_db, run_id=run_id):
            if path == "service-close":
                return lifecycle.close_run(run_id).status
            return lifecycle.fail_run(session_db.session.get(HeartbeatRun, run_id), "stopped").status

        def wake(session_db):
            agent_now = session_db.session.get(Agent, agent_id)
            return request_wakeup(
                agent_now, issue=session_db.session.get(Issue, issue_id), reason="later"
            ).status

        outcomes = race(app, in_thread_session(end), in_thread_session(wake))
        assert [kind for kind, _ in outcomes] == ["ok", "ok"], outcomes
        db.session.expire_all()
        stranded = db.session.scalars(
            select(WakeupRequest).where(WakeupRequest.agent_id == agent_id, WakeupRequest.status == "queued")
        ).all()
        assert stranded == []
        # The woken run ends too, so the next round starts with no active run.
        for live in db.session.scalars(
            select(HeartbeatRun).where(HeartbeatRun.agent_id == agent_id, HeartbeatRun.status == "queued")
        ).all():
            lifecycle.close_run(live.id)
        db.session.commit()
