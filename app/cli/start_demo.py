"""`switchboard start-demo`: what `make run` serves. The demo data, the offline Honcho-compatible provider and the app
(with its worker in process), and the sign-ins printed last, once the login page answers (a newcomer's
first five minutes). Request logs stay quiet unless `--verbose`.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import FrameType

import click

from app.cli.database import needs_database
from app.extensions import db

PROJECT_ROOT = Path(__file__).resolve().parents[2]
DEMO_PROVIDER = PROJECT_ROOT / "examples" / "demo_provider.py"
READY_TIMEOUT_SECONDS = 120.0


def _wait_until_answering(url: str, server: subprocess.Popen, deadline: float) -> bool:
    """Poll `url` until it answers 200, the server exits, or the deadline passes."""
    while time.monotonic() < deadline:
        if server.poll() is not None:
            return False
        try:
            with urllib.request.urlopen(url, timeout=2) as answer:  # noqa: S310 (our own loopback server)
                if answer.status == 200:
                    return True
        except (urllib.error.URLError, OSError):
            pass
        time.sleep(0.2)
    return False


def _banner(base_url: str, data: dict, provider_port: int) -> str:
    lines = [
        "",
        f"Switchboard is ready: {base_url}",
        "",
        "Sign in as:",
    ]
    for user in data["users"]:
        lines.append(f"  {user['email']} / {user['password']}  ({user['role']})")
    provider = data["demoProvider"]
    lines += [
        "",
        "Without internet: assign the task 'Record the launch decisions in Honcho' to Builder, and answer its card",
        f"with API key {provider['apiKey']} and workspace {provider['workspace']} (a local Honcho-compatible server on",
        f"127.0.0.1:{provider_port}).",
        "",
        "Press Ctrl+C to stop.",
    ]
    return "\n".join(lines)


@click.command("start-demo")
@click.option("--host", default="127.0.0.1", show_default=True)
@click.option("--port", default=5000, show_default=True, type=int)
@click.option(
    "--provider-port", default=5341, show_default=True, type=int, help="The offline demo provider's port."
)
@click.option("--verbose", is_flag=True, help="Show request logs and the demo provider's output.")
@needs_database
def start_demo_command(host: str, port: int, provider_port: int, verbose: bool) -> None:
    """Serve the demo: demo data, the offline demo provider and the app with its worker; sign-ins printed last."""
    from app.services.demo import load_demo

    data = load_demo()
    db.session.commit()
    base_url = os.environ.get("PUBLIC_BASE_URL") or f"http://{host}:{port}"
    env = {
        **os.environ,
        "RUN_WORKER_IN_PROCESS": os.environ.get("RUN_WORKER_IN_PROCESS", "1"),
        "PUBLIC_BASE_URL": base_url,
        "SWITCHBOARD_PROVIDER_SERVER_URLS": os.environ.get("SWITCHBOARD_PROVIDER_SERVER_URLS")
        or f'{{"honcho": "http://127.0.0.1:{provider_port}/mcp"}}',
        "SWITCHBOARD_OUTBOUND_ALLOWED_HOSTS": os.environ.get(
            "SWITCHBOARD_OUTBOUND_ALLOWED_HOSTS", "127.0.0.1"
        ),
        "SWITCHBOARD_REQUEST_LOG": "1" if verbose else os.environ.get("SWITCHBOARD_REQUEST_LOG", "0"),
    }
    quiet = None if verbose else subprocess.DEVNULL
    provider = subprocess.Popen(  # noqa: S603 (our own example server)
        [sys.executable, str(DEMO_PROVIDER), "--port", str(provider_port)], stdout=quiet, stderr=quiet
    )
    server = subprocess.Popen(  # noqa: S603 (this same command line's app)
        [sys.executable, "-c", "from app.cli import main; main()", "run", "--host", host, "--port", str(port)]
        + ["--no-reload", "--with-threads"],
        env=env,
        cwd=str(PROJECT_ROOT),
    )

    def stop(_signum: int | None = None, _frame: FrameType | None = None) -> None:
        for child in (server, provider):
            if child.poll() is None:
                child.terminate()
        for child in (server, provider):
            try:
                child.wait(timeout=10)
            except subprocess.TimeoutExpired:
                child.kill()

    def interrupted(_signum: int, _frame: FrameType | None) -> None:
        raise KeyboardInterrupt  # SIGTERM ends it like Ctrl+C: both children are stopped below

    signal.signal(signal.SIGTERM, interrupted)
    try:
        login = f"http://{host}:{port}/login"
        if not _wait_until_answering(login, server, time.monotonic() + READY_TIMEOUT_SECONDS):
            stop()
            raise click.ClickException(f"The app did not answer at {login}; run with --verbose to see why.")
        click.echo(_banner(base_url, data, provider_port))
        server.wait()
    except KeyboardInterrupt:
        pass
    finally:
        stop()
