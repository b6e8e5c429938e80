"""A pooled PostgreSQL connection the server ended is replaced on checkout, without a ping for the live ones.

`app.core.db_liveness` checks the socket of a pooled connection when it is checked out (no round trip); only a
socket with something to read or hung up is pinged. These tests end a pooled connection server-side with
`pg_terminate_backend` (what a restart does to every connection) and show the next request is answered, on a new
connection; an engine without the check fails on the same kind of connection, so the test can tell.
"""

from __future__ import annotations

import time

import pytest
from sqlalchemy import create_engine, text
from sqlalchemy.exc import OperationalError
from sqlalchemy.pool import NullPool

from app.core import db_liveness

pytestmark = pytest.mark.postgres_only


def backend_pid(engine) -> int:
    with engine.connect() as connection:
        return connection.execute(text("SELECT pg_backend_pid()")).scalar_one()


def terminate(url, pid: int) -> None:
    """End backend `pid` from another connection and wait until it has exited (its socket is closed)."""
    # Autocommit: pg_stat_activity is a snapshot taken once per transaction.
    admin = create_engine(url, poolclass=NullPool, isolation_level="AUTOCOMMIT")
    try:
        with admin.connect() as connection:
            assert connection.execute(text("SELECT pg_terminate_backend(:pid)"), {"pid": pid}).scalar_one()
            for _ in range(200):
                gone = not connection.execute(
                    text("SELECT count(*) FROM pg_stat_activity WHERE pid = :pid"), {"pid": pid}
                ).scalar_one()
                if gone:
                    return
                time.sleep(0.02)
        raise AssertionError(f"backend {pid} did not exit")
    finally:
        admin.dispose()


def test_the_next_request_after_a_pooled_connection_was_terminated_is_answered(app, db):
    engine = db.engine
    assert engine.pool._pre_ping is False  # the round trip per checkout is gone
    engine.dispose()
    client = app.test_client()
    assert client.get("/healthz").status_code == 200
    pid = backend_pid(engine)  # the pool's one idle connection: the one the request used
    assert backend_pid(engine) == pid  # a live pooled connection is reused as it is

    terminate(engine.url, pid)

    response = client.get("/healthz")
    assert response.status_code == 200, response.data
    assert backend_pid(engine) != pid  # replaced on checkout


def test_an_engine_without_the_check_fails_on_a_terminated_connection(app, db):
    plain = create_engine(db.engine.url, pool_size=1)
    try:
        pid = backend_pid(plain)
        terminate(plain.url, pid)
        with pytest.raises(OperationalError), plain.connect() as connection:
            connection.execute(text("SELECT 1"))
    finally:
        plain.dispose()


def test_a_quiet_idle_connection_is_not_suspect_and_a_terminated_one_is(app, db):
    engine = create_engine(db.engine.url, pool_size=1)
    try:
        pid = backend_pid(engine)
        connection = engine.raw_connection()
        try:
            assert db_liveness.socket_suspect(connection.dbapi_connection) is False
        finally:
            connection.close()
        terminate(engine.url, pid)
        connection = engine.raw_connection()  # no check installed on this engine: the dead one comes back
        try:
            deadline = time.monotonic() + 5
            while not db_liveness.socket_suspect(connection.dbapi_connection):
                assert time.monotonic() < deadline, "the terminated connection never looked suspect"
                time.sleep(0.01)
        finally:
            connection.invalidate()
    finally:
        engine.dispose()
