"""Pooled PostgreSQL connections are checked for life on checkout without a round trip.

SQLAlchemy's `pool_pre_ping` sends `SELECT 1` to the server on every checkout: one round trip per unit of work,
two per gateway call (the request's session, and the activity row written on a connection of its own). This check
asks the operating system instead: a pooled connection sits idle, and an idle PostgreSQL connection receives
nothing unless the server ends it (a restart, `pg_terminate_backend`, an idle timeout), when the server sends its
FATAL notice and closes the socket. So a socket that is readable (or hung up) at checkout is suspect; only then is
the server pinged, and a connection that fails the ping is replaced before the request uses it (`DisconnectionError`
makes the pool connect afresh; after a restart each pooled connection is found dead at its own checkout). A quiet
socket is used without a ping.

What it cannot see, nor could the ping without waiting for TCP to give up: a connection dropped silently on the
way (no FIN ever arrives). `pool_recycle` (`RECYCLE_SECONDS`, set in `app.config`) bounds how old a pooled connection gets, and a
statement that fails on a dead connection invalidates the pool (SQLAlchemy's own disconnect handling), so only the
request in flight fails. Fresh connections are never checked (SQLAlchemy marks them so).
"""

from __future__ import annotations

import select
from typing import Any

from sqlalchemy import event, exc
from sqlalchemy.engine import Engine
from sqlalchemy.pool import ConnectionPoolEntry, PoolProxiedConnection

RECYCLE_SECONDS = 1800

_SUSPECT = select.POLLIN | select.POLLPRI | select.POLLERR | select.POLLHUP | select.POLLNVAL


def socket_suspect(dbapi_connection: Any) -> bool:
    """Whether the connection's socket has something to read, hung up, or is gone: the server may have ended it."""
    if getattr(dbapi_connection, "closed", False):
        return True
    try:
        fileno = dbapi_connection.fileno()
    except Exception:  # noqa: BLE001 - psycopg raises when the connection is closed or broken
        return True
    poller = select.poll()
    poller.register(fileno, _SUSPECT)
    return bool(poller.poll(0))


def install(engine: Engine) -> None:
    """Check every non-fresh checkout of `engine`'s pool (PostgreSQL only; SQLite has no socket to lose)."""
    if engine.dialect.name != "postgresql":
        return
    dialect = engine.dialect

    def on_checkout(dbapi_connection: Any, record: ConnectionPoolEntry, proxy: PoolProxiedConnection) -> None:
        if not socket_suspect(dbapi_connection):
            return
        try:
            alive = bool(dialect.do_ping(dbapi_connection))
        except Exception:  # noqa: BLE001 - any failure of the ping means the connection is unusable
            alive = False
        if not alive:
            # Only this one: every other pooled connection is checked on its own checkout.
            raise exc.DisconnectionError("the server ended this pooled connection")

    event.listen(engine.pool, "checkout", on_checkout)
