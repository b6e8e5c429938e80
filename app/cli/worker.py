"""`switchboard worker`: execute queued runs and deliver connection continuations (several may run at once)."""

from __future__ import annotations

import signal
import threading

import click

from app.cli.database import needs_database
from app.extensions import current_app_object


@click.command("worker")
@click.option("--once", is_flag=True, help="Do one pass over the pending work and exit.")
@click.option("--poll-seconds", default=2.0, show_default=True, help="Idle wait between polls.")
@needs_database
def worker_command(once: bool, poll_seconds: float) -> None:
    """Run the background worker (runs and continuation delivery)."""
    from app.workers import shutdown
    from app.workers.loop import run_once, run_worker_forever

    app = current_app_object()
    if once:
        click.echo(f"worker: {run_once(app)} unit(s) of work done")
        return
    click.echo("worker: running (Ctrl+C or SIGTERM to stop)")
    stop = threading.Event()
    grace = float(app.config.get("WORKER_SHUTDOWN_GRACE_SECONDS", 30))

    def _shut_down(signum: int, _frame: object) -> None:
        # Stop claiming now; the turn in progress has `grace` seconds, then is ended and handed back (shutdown.py).
        signal.signal(signum, signal.SIG_IGN)
        click.echo(f"worker: stopping (the turn in progress has {grace:g} s to finish)", err=True)
        shutdown.begin(stop, grace)

    signal.signal(signal.SIGTERM, _shut_down)
    signal.signal(signal.SIGINT, _shut_down)
    # One thread per background job: continuation delivery never waits behind notifications (issue 33), and the
    # notification thread only hands rows to its own delivery lanes (app/workers/outbox.py).
    for job in ("continuations", "notifications"):
        threading.Thread(
            target=run_worker_forever,
            args=(app, poll_seconds),
            kwargs={"jobs": (job,), "stop": stop},
            name=f"switchboard-worker-{job}",
            daemon=True,
        ).start()
    run_worker_forever(app, poll_seconds, jobs=("runs",), stop=stop)
    click.echo("worker: stopped", err=True)
