"""Sign-in throttling across server processes (issue 31 item 1): two real gunicorn servers (one worker process each,
the production `gunicorn.conf.py`) on the test database count one client's wrong passwords as one.

By default the count lives in the database both servers share; a Redis storage URI is the other option, tested
against a real `redis-server` on loopback. A store that cannot be reached refuses sign-in with a 503 (no password
is checked uncounted) and makes `/readyz` say not ready, while `/healthz` (liveness) stays 200.
"""

from __future__ import annotations

import shutil
import socket
import subprocess
from collections import Counter
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import ExitStack, contextmanager
from itertools import cycle

import httpx
import pytest

from app.services.login_throttle import UNAVAILABLE_MESSAGE
from tests.factories import DEFAULT_PASSWORD
from tests.services.gateway.test_cancellation import _free_port, _wait_until, gunicorn_server
from tests.web.test_auth import LOGIN_CSRF_RE

EMAIL = "owner@example.com"
GUESSES = 28
LIMIT = 5  # LOGIN_MAX_FAILURES's default, which the servers run with


@contextmanager
def two_servers(app, tmp_path, extra_env: dict[str, str] | None = None) -> Iterator[list[str]]:
    with ExitStack() as stack:
        urls = [stack.enter_context(gunicorn_server(app, tmp_path, extra_env=extra_env)) for _ in range(2)]
        yield [url.split("/mcp/", 1)[0] for url in urls]


def sign_in(base: str, password: str, email: str = EMAIL) -> httpx.Response:
    with httpx.Client(base_url=base, timeout=30) as browser:
        page = browser.get("/login")
        token = LOGIN_CSRF_RE.search(page.text).group(1)
        return browser.post("/login", data={"csrf_token": token, "email": email, "password": password})


def wrong_passwords_over(bases: list[str], *, at_once: int) -> Counter[int]:
    """GUESSES wrong passwords, spread over the servers in turn, `at_once` in flight; how they were answered."""
    targets = [base for base, _ in zip(cycle(bases), range(GUESSES), strict=False)]
    with ThreadPoolExecutor(at_once) as pool:
        answers = pool.map(lambda pair: sign_in(pair[1], f"guess {pair[0]}").status_code, enumerate(targets))
        return Counter(answers)


@pytest.fixture
def owner(make):
    return make.member(make.company(), "owner", user=make.user(email=EMAIL))


def test_wrong_passwords_spread_over_two_processes_are_counted_once(app, db, owner, tmp_path):
    with two_servers(app, tmp_path) as bases:
        assert wrong_passwords_over(bases, at_once=1) == {401: LIMIT, 429: GUESSES - LIMIT}
        for base in bases:  # the right password is refused by either process now
            refused = sign_in(base, DEFAULT_PASSWORD)
            assert refused.status_code == 429
            assert "Too many failed sign-in attempts. Try again in 15 minutes" in refused.text
        # Another email, guessed in parallel through both processes: still exactly LIMIT passwords checked.
        other = sign_in(bases[0], "guess", email="someone@example.com")
        assert other.status_code == 401
        with ThreadPoolExecutor(8) as pool:
            answers = Counter(
                pool.map(
                    lambda base: sign_in(base, "guess", email="parallel@example.com").status_code,
                    [base for base, _ in zip(cycle(bases), range(GUESSES), strict=False)],
                )
            )
        assert answers == {401: LIMIT, 429: GUESSES - LIMIT}


@contextmanager
def redis_server() -> Iterator[int]:
    port = _free_port()
    process = subprocess.Popen(
        [shutil.which("redis-server") or "redis-server", "--port", str(port), "--bind", "127.0.0.1"]
        + ["--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        _wait_until(lambda: _accepts(port), "redis-server listening")
        yield port
    finally:
        process.terminate()
        process.wait(30)


def _accepts(port: int) -> bool:
    try:
        socket.create_connection(("127.0.0.1", port), timeout=1).close()
    except OSError:
        return False
    return True


@pytest.mark.backend_independent
def test_redis_stays_an_option_for_the_shared_count(app, db, owner, tmp_path):
    with (
        redis_server() as port,
        two_servers(
            app, tmp_path, {"SWITCHBOARD_LOGIN_THROTTLE_STORAGE_URI": f"redis://127.0.0.1:{port}/0"}
        ) as bases,
    ):
        assert wrong_passwords_over(bases, at_once=1) == {401: LIMIT, 429: GUESSES - LIMIT}
        ready = httpx.get(f"{bases[1]}/readyz", timeout=30)
        assert ready.status_code == 200
        assert ready.json() == {
            "status": "ready",
            "database": "ok",
            "schema": "ok",
            "settings": "ok",
            "catalog": {"status": "current"},
            "throttle_store": {"kind": "RedisStorage", "status": "ok"},
        }


def test_an_unreachable_store_refuses_sign_in_with_503_and_readiness_says_so(app, db, owner, tmp_path):
    closed = _free_port()  # nothing listens there
    uri = f"redis://:hunter2@127.0.0.1:{closed}/0"
    with gunicorn_server(app, tmp_path, extra_env={"SWITCHBOARD_LOGIN_THROTTLE_STORAGE_URI": uri}) as url:
        base = url.split("/mcp/", 1)[0]
        for password in (DEFAULT_PASSWORD, "a guess"):
            refused = sign_in(base, password)
            assert refused.status_code == 503
            assert UNAVAILABLE_MESSAGE in refused.text
            assert refused.headers["Retry-After"] == "60"
            # The store failed, not the person: nothing they typed is marked wrong.
            assert "aria-invalid" not in refused.text
            assert 'aria-describedby="login-error"' in refused.text
        api = httpx.get(f"{base}/api/companies", headers={"Authorization": "Bearer sb_guess"}, timeout=30)
        assert (api.status_code, api.json()) == (503, {"error": UNAVAILABLE_MESSAGE})
        ready = httpx.get(f"{base}/readyz", timeout=30)
        assert ready.status_code == 503
        assert ready.json() == {
            "status": "not ready",
            "database": "ok",
            "schema": "ok",
            "settings": "ok",
            "catalog": {"status": "current"},
            "throttle_store": {"kind": "RedisStorage", "status": "unreachable"},
        }
        assert "hunter2" not in ready.text
        assert httpx.get(f"{base}/healthz", timeout=30).status_code == 200
