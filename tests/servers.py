"""Real Switchboard processes on the test database, for tests across processes and instances: gunicorn with the
production `gunicorn.conf.py` (an "instance"), and `switchboard` commands such as `worker` and `cache refresh`.

Each is started with this checkout's code (`cwd` is the project root: the `switchboard` script of the virtualenv may
belong to another checkout) and the settings every process of one installation must share (`TEST_CONFIG`'s keys).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.conftest import TEST_CONFIG
from tests.paths import ROOT

GUNICORN = Path(sys.executable).parent / "gunicorn"
SWITCHBOARD = [sys.executable, "-c", "from app.cli import main; main()"]
PATIENCE = 30.0  # an upper bound for waiting on another process; never asserted
BOOT_PATIENCE = 120.0  # a gunicorn worker importing the app on a loaded machine


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until(condition: Callable[[], object], what: str, patience: float = PATIENCE) -> None:
    deadline = time.monotonic() + patience
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"gave up waiting: {what}")
        time.sleep(0.02)


def serving(port: int) -> bool:
    """The worker answers (gunicorn's master listens before its worker has imported the app, which can take many
    seconds on a loaded machine: a call sent then would spend the test's patience waiting for the import)."""
    try:
        return httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1.0).status_code == 200
    except httpx.HTTPError:
        return False


def installation_env(app, folder: Path, extra_env: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of one process of the test installation: its database, its keys (the same for every
    process), an instance folder of its own (`folder`) and no catalog ingest at start (the test database has it)."""
    return {
        **os.environ,
        "DATABASE_URL": app.config["SQLALCHEMY_DATABASE_URI"],
        "SECRET_KEY": TEST_CONFIG["SECRET_KEY"],
        "SWITCHBOARD_ENCRYPTION_KEY": TEST_CONFIG["ENCRYPTION_KEY"],
        "PUBLIC_BASE_URL": TEST_CONFIG["PUBLIC_BASE_URL"],
        "SWITCHBOARD_INSTANCE_PATH": str(folder),
        "SWITCHBOARD_CATALOG_INGEST_ON_START": "0",
        **(extra_env or {}),
    }


@dataclass
class Instance:
    """One gunicorn server (an app instance) started by `launch`."""

    port: int
    process: subprocess.Popen

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def wait_serving(self) -> Instance:
        wait_until(
            lambda: self.process.poll() is not None or serving(self.port), "gunicorn serving", BOOT_PATIENCE
        )
        assert self.process.poll() is None, "gunicorn exited"
        return self

    def stop(self) -> None:
        """SIGTERM (a drain) unless it already exited; killed if it does not end within PATIENCE."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
        try:
            self.process.wait(PATIENCE)
        except subprocess.TimeoutExpired:
            self.process.kill()
            self.process.wait()


def launch(app, tmp_path: Path, *, processes: int = 1, extra_env: dict[str, str] | None = None) -> Instance:
    """Start a gunicorn server with the production `gunicorn.conf.py` and `processes` worker processes (not waited
    for: several may boot at once; `wait_serving`)."""
    port = free_port()
    env = installation_env(
        app,
        tmp_path / f"instance-{port}",
        {"SWITCHBOARD_BIND": f"127.0.0.1:{port}", "WEB_CONCURRENCY": str(processes), **(extra_env or {})},
    )
    process = subprocess.Popen(
        [str(GUNICORN), "-c", "gunicorn.conf.py", "wsgi:app"],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    return Instance(port, process)


@contextmanager
def gunicorn(
    app, tmp_path: Path, *, processes: int = 1, extra_env: dict[str, str] | None = None
) -> Iterator[Instance]:
    """A gunicorn server serving once its workers answer; SIGTERM (a drain) when the block ends, unless the test
    already stopped it."""
    instance = launch(app, tmp_path, processes=processes, extra_env=extra_env)
    try:
        yield instance.wait_serving()
    finally:
        instance.stop()


def switchboard(app, tmp_path: Path, *args: str, extra_env: dict[str, str] | None = None) -> str:
    """Run one `switchboard` command to its end as a process of the installation; its standard output."""
    done = subprocess.run(
        [*SWITCHBOARD, *args],
        cwd=ROOT,
        env=installation_env(app, tmp_path / "instance-cli", extra_env),
        capture_output=True,
        text=True,
        timeout=BOOT_PATIENCE,
    )
    assert done.returncode == 0, done.stderr
    return done.stdout


def start_worker(
    app, tmp_path: Path, *, name: str = "worker", extra_env: dict[str, str] | None = None
) -> subprocess.Popen:
    """A `switchboard worker` process polling every 0.2 s (its standard error is a pipe: read it or stop it)."""
    return subprocess.Popen(
        [*SWITCHBOARD, "worker", "--poll-seconds", "0.2"],
        cwd=ROOT,
        env=installation_env(app, tmp_path / f"instance-{name}", extra_env),
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )
