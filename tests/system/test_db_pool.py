"""The database pool's size is a setting sized from the request threads (issue 31 item 9).

On a real gunicorn server (the production `gunicorn.conf.py`, one process of 3 threads) on PostgreSQL, a burst of
readiness checks from more clients than threads never has more connections open than the pool allows, and the
process keeps at most `pool_size` open afterwards.
"""

from __future__ import annotations

import os
import subprocess
import threading
import time
from concurrent.futures import ThreadPoolExecutor
from urllib.parse import urlsplit, urlunsplit

import httpx
import psycopg
import pytest

from app.config import DEFAULT_THREADS, load_config
from tests.conftest import TEST_CONFIG
from tests.services.gateway.test_cancellation import (
    BOOT_PATIENCE,
    GUNICORN,
    PATIENCE,
    PROJECT_ROOT,
    _free_port,
    _serving,
    _wait_until,
)

THREADS = 3
CLIENTS = 9
REQUESTS = 90


def _pool(monkeypatch, tmp_path, **env: str) -> dict:
    for name in ("SWITCHBOARD_THREADS", "SWITCHBOARD_DB_POOL_SIZE", "SWITCHBOARD_DB_MAX_OVERFLOW"):
        monkeypatch.delenv(name, raising=False)
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    options = load_config(str(tmp_path))["SQLALCHEMY_ENGINE_OPTIONS"]
    return {key: options[key] for key in ("pool_size", "max_overflow")}


def test_the_pool_is_sized_from_the_threads_unless_set(monkeypatch, tmp_path):
    assert _pool(monkeypatch, tmp_path) == {"pool_size": DEFAULT_THREADS, "max_overflow": DEFAULT_THREADS}
    assert _pool(monkeypatch, tmp_path, SWITCHBOARD_THREADS="4") == {"pool_size": 4, "max_overflow": 4}
    assert _pool(
        monkeypatch,
        tmp_path,
        SWITCHBOARD_THREADS="4",
        SWITCHBOARD_DB_POOL_SIZE="6",
        SWITCHBOARD_DB_MAX_OVERFLOW="0",
    ) == {"pool_size": 6, "max_overflow": 0}
    with pytest.raises(ValueError, match="SWITCHBOARD_DB_MAX_OVERFLOW"):
        _pool(monkeypatch, tmp_path, SWITCHBOARD_DB_MAX_OVERFLOW="-1")
    with pytest.raises(ValueError, match="expected a positive number"):
        _pool(monkeypatch, tmp_path, SWITCHBOARD_DB_POOL_SIZE="0")


def _named(url: str, name: str) -> str:
    parts = urlsplit(url)
    query = f"{parts.query}&" if parts.query else ""
    return urlunsplit(parts._replace(query=f"{query}application_name={name}"))


@pytest.mark.postgres_only
def test_a_server_process_stays_within_its_pool(app, db):
    port = _free_port()
    name = f"pool-test-{port}"
    url = app.config["SQLALCHEMY_DATABASE_URI"]
    admin_url = url.replace("postgresql+psycopg://", "postgresql://", 1)
    env = {
        **os.environ,
        "DATABASE_URL": _named(url, name),
        "SECRET_KEY": TEST_CONFIG["SECRET_KEY"],
        "SWITCHBOARD_ENCRYPTION_KEY": TEST_CONFIG["ENCRYPTION_KEY"],
        "SWITCHBOARD_CATALOG_INGEST_ON_START": "0",
        "SWITCHBOARD_BIND": f"127.0.0.1:{port}",
        "WEB_CONCURRENCY": "1",
        "SWITCHBOARD_THREADS": str(THREADS),
    }
    env.pop("SWITCHBOARD_DB_POOL_SIZE", None)
    env.pop("SWITCHBOARD_DB_MAX_OVERFLOW", None)
    process = subprocess.Popen(
        [str(GUNICORN), "-c", "gunicorn.conf.py", "wsgi:app"],
        cwd=PROJECT_ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    seen: list[int] = []
    done = threading.Event()
    try:
        _wait_until(lambda: process.poll() is not None or _serving(port), "gunicorn serving", BOOT_PATIENCE)
        assert process.poll() is None, "gunicorn exited"
        with psycopg.connect(admin_url, autocommit=True) as admin:

            def open_connections() -> int:
                query = "SELECT count(*) FROM pg_stat_activity WHERE application_name = %s"
                return admin.execute(query, (name,)).fetchone()[0]

            def sample() -> None:
                while not done.is_set():
                    seen.append(open_connections())

            sampler = threading.Thread(target=sample)
            sampler.start()
            with httpx.Client(timeout=PATIENCE) as http, ThreadPoolExecutor(CLIENTS) as pool:
                statuses = list(
                    pool.map(
                        lambda _: http.get(f"http://127.0.0.1:{port}/readyz").status_code, range(REQUESTS)
                    )
                )
            done.set()
            sampler.join(PATIENCE)
            # A response reaches the client before its request's teardown gives the connection back (and the pool
            # closes one over its size): wait for that, boundedly, rather than sample mid-teardown.
            deadline = time.monotonic() + PATIENCE
            while (after := open_connections()) > THREADS and time.monotonic() < deadline:
                time.sleep(0.05)
    finally:
        done.set()
        process.terminate()
        process.wait(PATIENCE)
    assert statuses == [200] * REQUESTS
    assert 0 < max(seen) <= 2 * THREADS  # pool_size + max_overflow, both sized from the threads
    assert 0 < after <= THREADS  # connections over pool_size are closed when given back
