"""Graceful worker shutdown (issue 31 item 3): a real `switchboard worker` process gets SIGTERM during an agent's
turn. It claims nothing more; a turn that ends within the grace period is recorded as usual; a turn still running
when the grace period is over has its process group ended and its run handed back to the queue, still holding its
wake, so a card's continuation runs again instead of using up its one wake.

The agent is a real process (the process adapter) that starts a child of its own, so ending the group is seen on
both. Nothing here measures time: the test waits for files the agent writes and for the worker to exit.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import pytest
from sqlalchemy import select

from app.models import ActivityLog, HeartbeatRun, WakeupRequest
from app.models.keys import wake_key
from app.services.runs.lifecycle import RECOVERED_ACTION
from app.services.runs.wakeups import WakeAlreadyExists, request_wakeup
from app.workers.run_executor import execute_next_run
from tests import servers

PATIENCE = 120.0  # a bound for waiting on another process (a worker importing the app on a loaded machine)

AGENT = textwrap.dedent(
    """
    import json, os, pathlib, subprocess, sys, time
    folder = pathlib.Path(sys.argv[1])
    turn = len(list(folder.glob("turn-*")))
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    (folder / f"turn-{turn}").write_text(json.dumps(
        {"run": os.environ["PAPERCLIP_RUN_ID"], "pid": os.getpid(), "child": child.pid}))
    while not (folder / "release").exists():
        time.sleep(0.05)
    print(json.dumps({"paperclipSession": {"id": "session-" + str(turn)}}))
    child.kill()
    """
)


def _wait_for(condition, what: str) -> None:
    deadline = time.monotonic() + PATIENCE
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting: {what}")
        time.sleep(0.05)


def _running(pid: int) -> bool:
    """The process exists and is not a zombie (an orphan's zombie waits for a reaper, but runs nothing)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError, IndexError):
        return False
    return state not in ("Z", "X")


@pytest.fixture
def folder(tmp_path):
    (tmp_path / "agent.py").write_text(AGENT)
    turns = tmp_path / "turns"
    turns.mkdir()
    return turns


@pytest.fixture
def team(make, folder):
    command = [sys.executable, str(folder.parent / "agent.py"), str(folder)]
    return make.team(adapter_type="process", adapter_config={"command": command, "timeoutSeconds": 600})


def start_worker(
    app, tmp_path: Path, grace: float, extra_env: dict[str, str] | None = None
) -> subprocess.Popen:
    settings = {"SWITCHBOARD_WORKER_SHUTDOWN_GRACE_SECONDS": str(grace), **(extra_env or {})}
    return servers.start_worker(app, tmp_path, name=f"worker-{uuid.uuid4().hex[:8]}", extra_env=settings)


def turn_started(worker: subprocess.Popen, folder: Path) -> None:
    try:
        _wait_for(
            lambda: (folder / "turn-0").exists() or worker.poll() is not None, "the agent's turn started"
        )
    finally:
        if not (folder / "turn-0").exists():
            worker.kill()
            raise AssertionError(f"the worker ran no turn: {worker.communicate()[1]}")


def stop(worker: subprocess.Popen) -> tuple[int, str]:
    worker.send_signal(signal.SIGTERM)
    try:
        _, err = worker.communicate(timeout=PATIENCE)
    except subprocess.TimeoutExpired:
        worker.kill()
        worker.communicate()
        raise
    return worker.returncode, err


def continuation(db, agent, issue) -> str:
    key = wake_key(uuid.uuid4(), "connected")
    request_wakeup(
        agent, issue=issue, source="automation", reason="connection_intent.resolved", idempotency_key=key
    )
    db.session.commit()
    return key


def test_a_turn_past_the_grace_period_is_ended_and_its_continuation_runs_again(
    app, db, team, folder, tmp_path
):
    _company, _owner, agent, issue = team
    key = continuation(db, agent, issue)
    worker = start_worker(app, tmp_path, grace=1)
    turn_started(worker, folder)
    started = json.loads((folder / "turn-0").read_text())
    code, err = stop(worker)
    assert code == 0, err
    assert "worker: stopped" in err
    # The agent's process group is ended: the agent and the child it started.
    assert not _running(started["pid"]) and not _running(started["child"])

    db.session.expire_all()
    (run,) = db.session.scalars(select(HeartbeatRun).where(HeartbeatRun.agent_id == agent.id)).all()
    assert str(run.id) == started["run"]
    assert (run.status, run.started_at, run.finished_at) == ("queued", None, None)
    (wake,) = db.session.scalars(select(WakeupRequest).where(WakeupRequest.idempotency_key == key)).all()
    assert (wake.status, wake.run_id) == ("claimed", run.id)  # the card's one wake is still this run's
    with pytest.raises(WakeAlreadyExists):
        request_wakeup(agent, issue=issue, source="automation", reason="again", idempotency_key=key)
    db.session.rollback()

    # The next worker runs the same wake again, and this time the turn ends.
    (folder / "release").write_text("")
    assert execute_next_run()
    db.session.expire_all()
    assert db.session.get(HeartbeatRun, run.id).status == "succeeded"
    again = json.loads((folder / "turn-1").read_text())
    assert again["run"] == started["run"]
    assert db.session.get(WakeupRequest, wake.id).status == "finished"


def test_a_turn_that_ends_within_the_grace_period_is_recorded_and_nothing_more_is_claimed(
    app, db, make, team, folder, tmp_path
):
    company, owner, agent, issue = team
    continuation(db, agent, issue)
    worker = start_worker(app, tmp_path, grace=600)
    try:
        turn_started(worker, folder)
        other_task = make.issue(
            company, title="Next", status="in_progress", assignee=agent, responsible=owner
        )
        request_wakeup(agent, issue=other_task, reason="assigned")
        db.session.commit()
        worker.send_signal(signal.SIGTERM)
        _wait_for(lambda: "worker: stopping" in worker.stderr.readline(), "the worker stopping")
        (folder / "release").write_text("")  # the turn ends within the grace period
    except BaseException:
        worker.kill()
        raise
    code, err = stop(worker)
    assert code == 0, err
    db.session.expire_all()
    runs = db.session.scalars(
        select(HeartbeatRun).where(HeartbeatRun.agent_id == agent.id).order_by(HeartbeatRun.created_at)
    ).all()
    assert [(r.issue_id, r.status) for r in runs] == [(issue.id, "succeeded"), (other_task.id, "queued")]
    assert not (folder / "turn-1").exists()


def test_a_continuation_whose_worker_is_killed_reaches_the_agent_once_through_another_worker(
    app, db, make, folder, tmp_path
):
    """SIGKILL: nothing runs in the worker to hand the run back. The run's lease (the agent's turn timeout plus
    `SWITCHBOARD_RUN_ABANDONED_GRACE_SECONDS`, shortened here) runs out, and another worker hands it back with its
    wake and runs it: the card's continuation ends once, in one more turn of the same run."""
    command = [sys.executable, str(folder.parent / "agent.py"), str(folder)]
    _company, _owner, agent, issue = make.team(
        adapter_type="process", adapter_config={"command": command, "timeoutSeconds": 5}
    )
    key = continuation(db, agent, issue)
    lease = {"SWITCHBOARD_RUN_ABANDONED_GRACE_SECONDS": "0"}
    killed = start_worker(app, tmp_path, grace=600, extra_env=lease)
    turn_started(killed, folder)
    started = json.loads((folder / "turn-0").read_text())
    killed.kill()
    killed.communicate()
    # A worker killed with its machine takes the agent with it (its process group, the child too).
    os.killpg(os.getpgid(started["pid"]), signal.SIGKILL)
    db.session.expire_all()
    (run,) = db.session.scalars(select(HeartbeatRun).where(HeartbeatRun.agent_id == agent.id)).all()
    assert (str(run.id), run.status) == (started["run"], "running")  # nobody handed it back

    (folder / "release").write_text("")  # the next turn ends at once
    other = start_worker(app, tmp_path, grace=600, extra_env=lease)
    try:
        _wait_for(lambda: _run_status(db, run.id) == "succeeded" or other.poll() is not None, "the run again")
    finally:
        code, err = stop(other)
    assert code == 0, err
    again = json.loads((folder / "turn-1").read_text())
    assert again["run"] == started["run"]
    assert not (folder / "turn-2").exists()
    runs = db.session.scalars(select(HeartbeatRun).where(HeartbeatRun.agent_id == agent.id)).all()
    assert [(r.id, r.status) for r in runs] == [(run.id, "succeeded")]
    (wake,) = db.session.scalars(select(WakeupRequest).where(WakeupRequest.idempotency_key == key)).all()
    assert (wake.status, wake.run_id) == ("finished", run.id)
    recovered = db.session.scalars(
        select(ActivityLog.action).where(ActivityLog.run_id == run.id, ActivityLog.action == RECOVERED_ACTION)
    ).all()
    assert recovered == [RECOVERED_ACTION]


def _run_status(db, run_id) -> str:
    db.session.expire_all()
    return db.session.get(HeartbeatRun, run_id).status
