"""The sign-in throttle's database storage (`throttle_store.DatabaseStorage`), on the backend under test.

Threads stand in for server processes here: each acquisition runs on a connection of its own, as it would in
another process (tests/system/test_shared_throttle.py runs two real servers).
"""

from __future__ import annotations

import threading
import time

from limits import RateLimitItemPerSecond
from limits.strategies import MovingWindowRateLimiter
from sqlalchemy import func, insert, select

from app.models import ThrottleHit
from app.services.throttle_store import DatabaseStorage

WINDOW = 900


def _storage(db) -> DatabaseStorage:
    return DatabaseStorage(db.engine)


def test_attempts_racing_on_many_connections_get_exactly_the_limit(db):
    storage = _storage(db)
    start = threading.Barrier(16)
    granted: list[bool] = []

    def attempt() -> None:
        start.wait()
        granted.append(storage.acquire_entry("race", 5, WINDOW))

    threads = [threading.Thread(target=attempt) for _ in range(16)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(granted) == [False] * 11 + [True] * 5
    assert storage.get_moving_window("race", 5, WINDOW)[1] == 5
    assert db.session.scalar(select(func.count()).select_from(ThrottleHit)) == 5


def test_the_window_starts_at_the_oldest_of_the_newest_limit_entries(db):
    storage = _storage(db)
    now = time.time()
    with db.engine.begin() as connection:
        connection.execute(
            insert(ThrottleHit),
            [{"key": "k", "at": now - age, "expires_at": now - age + WINDOW} for age in (500, 400, 300, 200)],
        )
    assert storage.get_moving_window("k", 3, WINDOW) == (now - 400, 3)  # a place frees once -400 leaves
    assert storage.get_moving_window("k", 10, WINDOW) == (now - 500, 4)
    assert storage.get_moving_window("k", 10, 250) == (now - 200, 1)  # a shorter window counts fewer
    assert storage.get_moving_window("other", 3, WINDOW)[1] == 0


def test_the_limiter_refuses_until_an_entry_leaves_the_window_and_says_when(db):
    limiter = MovingWindowRateLimiter(_storage(db))
    item = RateLimitItemPerSecond(2, WINDOW)
    assert limiter.hit(item, "login", "pair")
    assert limiter.hit(item, "login", "pair")
    assert not limiter.hit(item, "login", "pair")
    assert not limiter.test(item, "login", "pair")
    assert limiter.test(item, "login", "another pair")
    stats = limiter.get_window_stats(item, "login", "pair")
    assert stats.remaining == 0
    assert time.time() < stats.reset_time <= time.time() + WINDOW
    limiter.clear(item, "login", "pair")
    assert limiter.test(item, "login", "pair")


def test_expired_entries_no_longer_count_and_are_swept(db):
    storage = _storage(db)
    now = time.time()
    with db.engine.begin() as connection:
        connection.execute(
            insert(ThrottleHit),
            [{"key": key, "at": now - 2000, "expires_at": now - 2000 + WINDOW} for key in ("k", "abandoned")],
        )
    assert storage.get_moving_window("k", 5, WINDOW)[1] == 0
    assert storage.get("k") == 0
    assert storage.acquire_entry("k", 1, WINDOW)
    keys = db.session.scalars(select(ThrottleHit.key)).all()
    assert keys == ["k"]  # both expired rows were swept, the new entry stays


def test_counters_count_live_entries_and_clear_forgets_one_key(db):
    storage = _storage(db)
    assert storage.incr("a", WINDOW) == 1
    assert storage.incr("a", WINDOW, amount=2) == 3
    assert storage.incr("b", WINDOW) == 1
    assert storage.get("a") == 3
    assert time.time() < storage.get_expiry("a") <= time.time() + WINDOW
    storage.clear("a")
    assert (storage.get("a"), storage.get("b")) == (0, 1)
    assert storage.check() is True
    assert storage.reset() == 1
    assert storage.get("b") == 0
