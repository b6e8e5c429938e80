"""A `limits` storage in the app's own database: one moving-window count shared by every process and instance.

The sign-in throttle (`login_throttle`) keeps its counters here by default, so a guess is counted once whichever
server process answered it, with no server beside the database (Redis stays an option through a storage URI). It
works on PostgreSQL and on the embedded SQLite alike: both are shared by every process that opens them.

Each hit is one row (`ThrottleHit`) of a key, the time it happened and when it leaves the window. Every access runs
on a connection of its own, outside the request's unit of work: a hit is durable at once, even when the request
answers an error and rolls back (the request holds no write lock then: the throttle is consulted before anything is
written, see `record_activity_now` for the same rule).

`acquire_entry` counts and inserts in one transaction that holds the key: on PostgreSQL a transaction-scoped
advisory lock on the key's hash, on SQLite the database's writer lock (taken by its first statement, a DELETE). So
attempts racing through several processes get exactly `limit` places, never one more nor one less.

Times are the app's wall clock (`time.time()`), which instances are expected to keep in step (NTP); a skew of a few
seconds only moves a window's end by as much.
"""

from __future__ import annotations

import time

from limits.storage import MovingWindowSupport, Storage
from sqlalchemy import ColumnElement, Connection, Engine, delete, func, insert, select, text
from sqlalchemy.exc import SQLAlchemyError

from app.models.shared_state import ThrottleHit

# Names the throttle's keys among this database's advisory locks (the two-integer form: the first says whose lock).
ADVISORY_LOCK_CLASS = 31_001
# Expired entries of other keys deleted by one acquisition at most (abandoned keys are swept a little at a time).
SWEEP_BATCH = 200


class DatabaseStorage(Storage, MovingWindowSupport):
    """Moving-window counters in the `throttle_hits` table of `engine`'s database.

    Built for `limits.strategies.MovingWindowRateLimiter`; the counter methods (`incr`, `get`, `get_expiry`) that
    other strategies use count the same rows, each entry expiring on its own.
    """

    STORAGE_SCHEME = None  # made from the app's engine (`login_throttle.init_app`), never from a URI

    def __init__(self, engine: Engine) -> None:
        super().__init__(wrap_exceptions=True)
        self._engine = engine

    @property
    def base_exceptions(self) -> type[Exception] | tuple[type[Exception], ...]:
        return SQLAlchemyError

    def _connect(self) -> Connection:
        return self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")

    @staticmethod
    def _live(key: str, now: float, expiry: float | None = None) -> tuple[ColumnElement[bool], ...]:
        """The key's entries still counting: inside `expiry` seconds when given, else not yet expired."""
        after = ThrottleHit.at > now - expiry if expiry is not None else ThrottleHit.expires_at > now
        return (ThrottleHit.key == key, after)

    @staticmethod
    def _hold(connection: Connection, key: str, now: float) -> None:
        """Hold `key` until the transaction ends, and sweep expired entries (the DELETE takes SQLite's writer lock;
        PostgreSQL skips rows another sweep holds, so two sweeps never wait on each other)."""
        if connection.dialect.name == "postgresql":
            connection.execute(
                text("SELECT pg_advisory_xact_lock(:class, hashtext(:key))"),
                {"class": ADVISORY_LOCK_CLASS, "key": key},
            )
        expired = (
            select(ThrottleHit.id)
            .where(ThrottleHit.expires_at <= now)
            .limit(SWEEP_BATCH)
            .with_for_update(skip_locked=True)
        )
        connection.execute(delete(ThrottleHit).where(ThrottleHit.id.in_(expired.scalar_subquery())))

    @staticmethod
    def _add(connection: Connection, key: str, expiry: float, amount: int, now: float) -> None:
        connection.execute(
            insert(ThrottleHit), [{"key": key, "at": now, "expires_at": now + expiry}] * amount
        )

    def _count(self, connection: Connection, key: str, now: float, expiry: float | None = None) -> int:
        return connection.scalar(select(func.count()).where(*self._live(key, now, expiry))) or 0

    # Moving window (what the sign-in throttle uses).

    def acquire_entry(self, key: str, limit: int, expiry: int, amount: int = 1) -> bool:
        if amount > limit:
            return False
        now = time.time()
        with self._engine.begin() as connection:
            self._hold(connection, key, now)
            if self._count(connection, key, now, expiry) + amount > limit:
                return False
            self._add(connection, key, expiry, amount, now)
            return True

    def get_moving_window(self, key: str, limit: int, expiry: int) -> tuple[float, int]:
        """(when the window's counted entries began, how many count, at most `limit`): the window frees a place once
        the oldest of the newest `limit` entries leaves it."""
        now = time.time()
        with self._connect() as connection:
            count = min(self._count(connection, key, now, expiry), limit)
            if count == 0:
                return now, 0
            start = connection.scalar(
                select(ThrottleHit.at)
                .where(*self._live(key, now, expiry))
                .order_by(ThrottleHit.at.desc())
                .limit(1)
                .offset(count - 1)
            )
        return float(start if start is not None else now), count

    # Counters (the base interface).

    def incr(self, key: str, expiry: int, amount: int = 1) -> int:
        now = time.time()
        with self._engine.begin() as connection:
            self._hold(connection, key, now)
            self._add(connection, key, expiry, amount, now)
            return self._count(connection, key, now)

    def get(self, key: str) -> int:
        with self._connect() as connection:
            return self._count(connection, key, time.time())

    def get_expiry(self, key: str) -> float:
        now = time.time()
        with self._connect() as connection:
            soonest = connection.scalar(select(func.min(ThrottleHit.expires_at)).where(*self._live(key, now)))
        return float(soonest) if soonest is not None else now

    def clear(self, key: str) -> None:
        with self._connect() as connection:
            connection.execute(delete(ThrottleHit).where(ThrottleHit.key == key))

    def reset(self) -> int | None:
        with self._connect() as connection:
            return connection.execute(delete(ThrottleHit)).rowcount

    def check(self) -> bool:
        """The table answers (the database is reachable and the schema has it)."""
        try:
            with self._connect() as connection:
                connection.execute(select(ThrottleHit.id).limit(1))
        except SQLAlchemyError:
            return False
        return True
