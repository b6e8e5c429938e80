"""Wakeups, runs and the run executor: one active run per agent and task, logs, and session compatibility."""

from __future__ import annotations

import sys
import textwrap

import pytest
from sqlalchemy import func, select

from app.cli.worker import worker_command
from app.models import HeartbeatRun, WakeupRequest
from app.models.run_logs import RUN_LOG_LIMIT, AgentTaskSession, RunLog
from app.services.runs.wakeups import WakeAlreadyExists, claim_next_run, request_wakeup
from app.workers.run_executor import execute_next_run, execute_pending_runs
from tests.conftest import serving
from tests.paths import ROOT
from tests.services.runs.test_run_instructions import add_connection

EXAMPLE_AGENT = str(ROOT / "examples" / "agents" / "process_agent.py")

# A tiny agent that behaves like a real session-keeping CLI: it resumes PAPERCLIP_SESSION_ID when given one and
# otherwise starts a new session named after the run.
SESSION_AGENT = textwrap.dedent(
    """
    import json, os, sys
    prompt = sys.stdin.read()
    resumed = os.environ.get("PAPERCLIP_SESSION_ID", "")
    session = resumed or "session-" + os.environ["PAPERCLIP_RUN_ID"][:8]
    print("resumed=" + resumed)
    print("mode=" + (sys.argv[1] if len(sys.argv) > 1 else "ok"))
    if len(sys.argv) > 1 and sys.argv[1] == "flood":
        print("y" * (RUN_LOG_LIMIT * 2))
    print(json.dumps({"paperclipSession": {"id": session}}))
    if len(sys.argv) > 1 and sys.argv[1] == "fail":
        print("something broke", file=sys.stderr)
        sys.exit(2)
    """
).replace("RUN_LOG_LIMIT", str(RUN_LOG_LIMIT))


@pytest.fixture
def agent_script(tmp_path):
    path = tmp_path / "session_agent.py"
    path.write_text(SESSION_AGENT)
    return str(path)


@pytest.fixture
def team(make, agent_script):
    return make.team(adapter_type="process", adapter_config={"command": [sys.executable, agent_script]})


def wake(db, agent, issue, **kwargs):
    request = request_wakeup(agent, issue=issue, **kwargs)
    db.session.commit()
    return request


def runs_of(db, agent):
    return list(
        db.session.scalars(
            select(HeartbeatRun).where(HeartbeatRun.agent_id == agent.id).order_by(HeartbeatRun.created_at)
        )
    )


def test_a_wake_queues_behind_the_active_run(db, team):
    _company, owner, agent, issue = team
    first = wake(db, agent, issue, reason="assigned")
    second = wake(db, agent, issue, reason="commented")
    runs = runs_of(db, agent)
    assert len(runs) == 1 and runs[0].status == "queued" and runs[0].responsible_user_id == owner.id
    assert first.status == "claimed" and first.run_id == runs[0].id
    assert second.status == "queued" and second.run_id is None

    assert execute_next_run()
    db.session.expire_all()
    runs = runs_of(db, agent)
    assert [r.status for r in runs] == ["succeeded", "queued"]
    assert db.session.get(WakeupRequest, first.id).status == "finished"
    assert db.session.get(WakeupRequest, second.id).run_id == runs[1].id
    assert execute_pending_runs() == 1
    assert not execute_next_run()


def test_manual_agents_are_not_executed(db, make, team):
    company, owner, *_ = team
    manual = make.agent(company, "Human-driven")
    issue = make.issue(company, status="in_progress", assignee=manual, responsible=owner)
    wake(db, manual, issue)
    assert claim_next_run() is None


def test_connection_intent_keys_wake_once(db, team):
    _company, _owner, agent, issue = team
    key = "connection-intent:00000000-0000-0000-0000-000000000001:connected"
    wake(db, agent, issue, idempotency_key=key)
    with pytest.raises(WakeAlreadyExists):
        request_wakeup(agent, issue=issue, idempotency_key=key)
    db.session.rollback()
    count = db.session.scalar(select(func.count()).where(WakeupRequest.idempotency_key == key))
    assert count == 1


def test_run_log_and_session_are_recorded(db, team):
    _company, _owner, agent, issue = team
    wake(db, agent, issue)
    execute_next_run()
    [run] = runs_of(db, agent)
    log = db.session.get(RunLog, run.id)
    assert run.status == "succeeded" and log.exit_code == 0 and "resumed=\n" in log.stdout
    assert log.session_id == f"session-{str(run.id)[:8]}" and log.resumed_session_id is None
    session = db.session.scalar(select(AgentTaskSession))
    assert session.session_id == log.session_id and session.last_run_id == run.id


def test_failed_and_flooding_runs_keep_a_bounded_log(db, make, team, agent_script):
    company, owner, *_ = team
    for mode in ("fail", "flood"):
        agent = make.agent(
            company,
            f"Agent {mode}",
            adapter_type="process",
            adapter_config={"command": [sys.executable, agent_script, mode]},
        )
        issue = make.issue(company, status="in_progress", assignee=agent, responsible=owner)
        wake(db, agent, issue)
        execute_next_run()
        [run] = runs_of(db, agent)
        log = db.session.get(RunLog, run.id)
        if mode == "fail":
            assert run.status == "failed" and "code 2" in run.error and "something broke" in log.stderr
        else:
            assert run.status == "succeeded" and log.truncated and len(log.stdout) <= RUN_LOG_LIMIT


def test_bad_configuration_fails_the_run_and_starts_the_next_wake(db, make, team):
    company, owner, *_ = team
    agent = make.agent(company, "Broken", adapter_type="http", adapter_config={"url": "http://10.0.0.1/"})
    issue = make.issue(company, status="in_progress", assignee=agent, responsible=owner)
    wake(db, agent, issue)
    wake(db, agent, issue)
    execute_next_run()
    runs = runs_of(db, agent)
    assert runs[0].status == "failed" and "not allowed" in runs[0].error
    assert runs[1].status == "queued"


def _turn(db, agent, issue, **kwargs) -> RunLog:
    wake(db, agent, issue, **kwargs)
    assert execute_next_run()
    run = runs_of(db, agent)[-1]
    return db.session.get(RunLog, run.id)


def test_session_is_kept_while_the_digest_holds_and_replaced_when_it_changes(db, team):
    company, _owner, agent, issue = team
    connection = add_connection(db, company)
    first = _turn(db, agent, issue)
    assert first.resumed_session_id is None and first.instructions_digest is not None

    kept = _turn(db, agent, issue)
    assert kept.resumed_session_id == first.session_id and kept.session_id == first.session_id
    assert kept.instructions_digest == first.instructions_digest

    connection.agent_instructions = {"enabled": True, "text": "Edited guidance."}
    db.session.commit()
    changed = _turn(db, agent, issue)
    assert changed.resumed_session_id is None and changed.session_id != first.session_id
    assert changed.instructions_digest != first.instructions_digest

    again = _turn(db, agent, issue)
    assert again.resumed_session_id == changed.session_id

    connection.agent_instructions = {**connection.agent_instructions, "enabled": False}
    db.session.commit()
    removed = _turn(db, agent, issue)
    assert removed.resumed_session_id is None and removed.instructions_digest is None
    assert _turn(db, agent, issue).resumed_session_id == removed.session_id


def test_a_continuation_always_starts_a_fresh_session(db, team):
    _company, _owner, agent, issue = team
    first = _turn(db, agent, issue)
    assert _turn(db, agent, issue).resumed_session_id == first.session_id
    continuation = _turn(db, agent, issue, context={"forceFreshSession": True})
    assert continuation.resumed_session_id is None and continuation.session_id != first.session_id


def test_worker_command_once(app, db, team):
    _company, _owner, agent, issue = team
    wake(db, agent, issue)
    result = app.test_cli_runner().invoke(worker_command, ["--once"])
    assert result.exit_code == 0, result.output
    assert "1 unit(s) of work done" in result.output
    db.session.expire_all()
    assert runs_of(db, agent)[0].status == "succeeded"


# --- the example agent, end to end -----------------------------------------------------------------------------


@pytest.fixture
def live_base_url(app, db):
    saved = app.config["PUBLIC_BASE_URL"]
    with serving(app) as base:
        app.config["PUBLIC_BASE_URL"] = base
        try:
            yield base
        finally:
            app.config["PUBLIC_BASE_URL"] = saved


def test_example_process_agent_requests_a_connection_and_continues_after_the_decline(db, make, live_base_url):
    from app.models import ThreadInteraction
    from app.services.intents import resolution as intents
    from app.workers.continuations import WOKEN, deliver

    company = make.company("Acme")
    owner = make.member(company, "owner")
    agent = make.agent(
        company,
        "Builder",
        adapter_type="process",
        adapter_config={"command": [sys.executable, EXAMPLE_AGENT]},
    )
    issue = make.issue(
        company,
        title="Write the launch notes in Notion",
        status="in_progress",
        assignee=agent,
        responsible=owner,
    )
    add_connection(db, company, name="Handbook")
    wake(db, agent, issue)
    assert execute_next_run()
    [run] = runs_of(db, agent)
    log = db.session.get(RunLog, run.id)
    assert run.status == "succeeded", (run.error, log.stdout, log.stderr)
    assert "=== prompt for the model ===" in log.stdout and "release handbook" in log.stdout
    assert "connection_request('notion')" in log.stdout and '"status": "needs_user_action"' in log.stdout
    card = db.session.scalar(select(ThreadInteraction).where(ThreadInteraction.issue_id == issue.id))
    assert card.status == "pending" and card.source_run_id == run.id

    intents.decline_intent(card.id, owner.id, "Not now")
    db.session.commit()
    assert deliver(card.id) == WOKEN
    assert execute_next_run()
    continuation = runs_of(db, agent)[-1]
    log = db.session.get(RunLog, continuation.id)
    assert continuation.status == "succeeded" and '"status": "alternatives"' in log.stdout
    assert "declined the connection request for Notion" in log.stdout
    assert log.resumed_session_id is None


def test_a_run_abandoned_by_a_dead_worker_runs_again_once_and_then_is_failed(db, team):
    from datetime import timedelta

    from app.models.base import utcnow
    from app.services.runs.lifecycle import ABANDONED_MESSAGE, recover_abandoned_runs

    _company, _owner, agent, issue = team
    wake(db, agent, issue, reason="assigned")
    run = claim_next_run()  # a worker claimed it ... and died before finishing
    db.session.commit()
    wake(db, agent, issue, reason="commented")  # queued behind the stuck run
    assert recover_abandoned_runs() == 0  # still within its turn time
    run.started_at = utcnow() - timedelta(hours=2)
    db.session.commit()
    assert recover_abandoned_runs() == 1  # handed back with its wake
    db.session.commit()
    db.session.expire_all()
    assert [(r.status, r.error) for r in runs_of(db, agent)] == [("queued", None)]

    again = claim_next_run()  # another worker claims the same run ... and dies too
    assert again is not None and again.id == run.id
    again.started_at = utcnow() - timedelta(hours=2)
    db.session.commit()
    assert execute_pending_runs() == 2  # failed this time, then the waiting wake executed
    db.session.expire_all()
    runs = runs_of(db, agent)
    assert [(r.status, r.error) for r in runs] == [("failed", ABANDONED_MESSAGE), ("succeeded", None)]


def test_the_example_agent_fails_its_run_when_it_cannot_reach_the_runtime_tools(app, db, make, monkeypatch):
    """A runtime URL nobody answers (a server started on another port than PUBLIC_BASE_URL says): the agent exits
    non-zero, so its run is failed with the reason in its log, not reported as succeeded."""
    import socket

    with socket.socket() as probe:  # a loopback port that nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    monkeypatch.setitem(app.config, "PUBLIC_BASE_URL", f"http://127.0.0.1:{closed}")
    company = make.company("Acme")
    owner = make.member(company, "owner")
    agent = make.agent(
        company,
        "Builder",
        adapter_type="process",
        adapter_config={"command": [sys.executable, EXAMPLE_AGENT]},
    )
    issue = make.issue(
        company,
        title="Write the launch notes in Notion",
        status="in_progress",
        assignee=agent,
        responsible=owner,
    )
    wake(db, agent, issue)
    assert execute_next_run()
    [run] = runs_of(db, agent)
    log = db.session.get(RunLog, run.id)
    assert run.status == "failed", (run.status, log.stdout, log.stderr)
    assert "runtime tools failed:" in log.stderr and "Connection refused" in log.stderr
