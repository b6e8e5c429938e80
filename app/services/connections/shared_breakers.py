"""Providers' circuit breakers in the database every server process and instance shares, so one
instance's view of a failing provider is every instance's.

`app.adapters.providers.limits` keeps each process's bulkhead (how many of *its* threads one provider may hold) in memory, and
hands the breaker to this store when `Limits.shared` names it (gateway calls do, `calls.provider_limits_from_config`).
So the timeouts of a frozen provider are counted across all processes, and once `failure_threshold` have timed out
in a row, wherever they ran, every process refuses calls to it (`Paused`) for `reset_seconds`.

- `admit` reads the provider's row (one primary-key SELECT per call; a provider that answers has no row). When the
  pause is over, exactly one process wins the trial call, by moving `open_until` on with a conditional UPDATE; the
  others stay paused. A trial whose process dies only keeps the provider paused for one more `reset_seconds`.
- `settle` counts a timeout with one upsert (the count and the opening decided by the database, atomically), and an
  answer deletes the row when `admit` saw one.

Every statement runs on a connection of its own in autocommit: the gateway call holds no transaction while the
provider works. A database that does not answer here lets the call go on (the breaker fails open) and is logged:
the breaker protects threads, it must not stop calls by itself.
"""

from __future__ import annotations

import hashlib
import logging
import time

from sqlalchemy import Connection, Engine, case, delete, select, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.exc import SQLAlchemyError

from app.adapters.providers.limits import Limits, Paused
from app.models.shared_state import ProviderBreaker

log = logging.getLogger(__name__)


def _hash(key: str) -> str:
    return hashlib.sha256(key.encode()).hexdigest()


class DatabaseBreakers:
    def __init__(self, engine: Engine) -> None:
        self._engine = engine

    def _connect(self) -> Connection:
        return self._engine.connect().execution_options(isolation_level="AUTOCOMMIT")

    def admit(self, key: str, limits: Limits) -> tuple[bool, bool]:
        """(whether this call is the trial, whether the provider has a row), or `Paused` when calls are paused."""
        now = time.time()
        try:
            with self._connect() as connection:
                row = connection.execute(
                    select(ProviderBreaker.timeouts, ProviderBreaker.open_until).where(
                        ProviderBreaker.key_hash == _hash(key)
                    )
                ).first()
                if row is None or row.open_until is None:
                    return False, row is not None
                if now < row.open_until:
                    raise Paused(row.timeouts, row.open_until - now)
                won = connection.execute(
                    update(ProviderBreaker)
                    .where(
                        ProviderBreaker.key_hash == _hash(key), ProviderBreaker.open_until == row.open_until
                    )
                    .values(open_until=now + limits.reset_seconds)
                ).rowcount
        except SQLAlchemyError:
            log.warning("provider breaker: the database did not answer; the call goes on", exc_info=True)
            return False, False
        if won != 1:
            raise Paused(row.timeouts, limits.reset_seconds)  # another process runs the trial
        return True, True

    def settle(self, key: str, limits: Limits, *, timed_out: bool, trial: bool, seen: bool) -> None:
        """Count the call's outcome: a timeout (opening the breaker at the threshold, or again after a trial), or
        an answer (the provider's row goes)."""
        try:
            with self._connect() as connection:
                if not timed_out:
                    if seen:
                        connection.execute(
                            delete(ProviderBreaker).where(ProviderBreaker.key_hash == _hash(key))
                        )
                    return
                self._count_timeout(connection, key, limits, trial)
        except SQLAlchemyError:
            log.warning("provider breaker: the call's outcome was not recorded", exc_info=True)

    @staticmethod
    def _count_timeout(connection: Connection, key: str, limits: Limits, trial: bool) -> None:
        reopen = time.time() + limits.reset_seconds
        insert = postgresql_insert if connection.dialect.name == "postgresql" else sqlite_insert
        first = insert(ProviderBreaker).values(
            key_hash=_hash(key),
            timeouts=1,
            open_until=reopen if trial or limits.failure_threshold <= 1 else None,
        )
        timeouts = ProviderBreaker.timeouts + 1
        opens = timeouts >= limits.failure_threshold
        connection.execute(
            first.on_conflict_do_update(
                index_elements=[ProviderBreaker.key_hash],
                set_={
                    "timeouts": timeouts,
                    "open_until": reopen
                    if trial
                    else case((opens, reopen), else_=ProviderBreaker.open_until),
                },
            )
        )
