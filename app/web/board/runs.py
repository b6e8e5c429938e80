"""Runs: the page of one heartbeat run (who ran, on which task, when, what context it was given, and the gateway's
decisions for it)."""

from flask import render_template
from flask.typing import ResponseReturnValue

from app.extensions import db
from app.models import HeartbeatRun, Issue
from app.services.gateway.timeline import run_timeline
from app.services.run_progress import progress_of
from app.services.runs.lifecycle import run_log
from app.web.board import bp
from app.web.context import load_scoped


@bp.get("/runs/<run_id>")
def run(run_id: str) -> ResponseReturnValue:
    run, _membership = load_scoped(HeartbeatRun, run_id)
    issue = db.session.get(Issue, run.issue_id) if run.issue_id else None
    snapshot_keys = sorted((run.context_snapshot or {}).keys())
    return render_template(
        "board/run.html",
        run=run,
        progress=progress_of([run])[0],
        issue=issue,
        snapshot_keys=snapshot_keys,
        run_log=run_log(run),
        timeline=run_timeline(run),
    )
