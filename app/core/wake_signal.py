"""Wake signals: a transaction that leaves work for a worker says so, and idle workers look at once.

`signal_work(topic)` is called by a service inside the transaction that queues the work (a queued run, a
continuation outbox row, a notification). It does two things:

- on PostgreSQL it sends `NOTIFY switchboard_work, '<topic>'` in that transaction. PostgreSQL delivers it at commit
  (never on rollback), to every process whose listener (`app/workers/listener.py`) waits in `LISTEN`;
- on every backend it nudges this process's waiting workers after the session commits (the in-process signal:
  SQLite has no NOTIFY, and a worker thread in the web process need not wait for the round trip).

Workers wait with `wait_for(topics, seen, timeout)`: a generation counter per topic, so a signal that arrives while
a worker is busy is not lost (it finds the counter moved and looks again), and several workers of different jobs
can wait at once. Polling stays the fallback: the wait times out after the poll interval.
"""

from __future__ import annotations

import threading

from sqlalchemy import event as sa_event
from sqlalchemy import text
from sqlalchemy.orm import Session, SessionTransaction, scoped_session

CHANNEL = "switchboard_work"
RUNS = "runs"
CONTINUATIONS = "continuations"
NOTIFICATIONS = "notifications"
TOPICS = (CONTINUATIONS, RUNS, NOTIFICATIONS)

_condition = threading.Condition()
_generations: dict[str, int] = dict.fromkeys(TOPICS, 0)
_waiting = 0
_PENDING_KEY = "switchboard_wake_topics"
_LISTENING_KEY = "switchboard_wake_listening"


def nudge(*topics: str) -> None:
    """Wake this process's workers waiting on `topics` (all topics when none is given)."""
    with _condition:
        for topic in topics or TOPICS:
            _generations[topic] = _generations.get(topic, 0) + 1
        _condition.notify_all()


def generation(topics: tuple[str, ...]) -> int:
    """A number that moves whenever any of `topics` is signalled (read it before looking for work)."""
    with _condition:
        return _sum(topics)


def wait_for(topics: tuple[str, ...], seen: int, timeout: float) -> bool:
    """Block until one of `topics` is signalled after `seen` was read, or `timeout` passes; True when signalled."""
    global _waiting
    with _condition:
        _waiting += 1
        try:
            return _condition.wait_for(lambda: _sum(topics) != seen, timeout)
        finally:
            _waiting -= 1


def waiting() -> int:
    """How many threads wait for a signal right now (tests and benches wait for idle workers with it)."""
    with _condition:
        return _waiting


def _sum(topics: tuple[str, ...]) -> int:
    return sum(_generations.get(topic, 0) for topic in topics)


def signal_work(session: Session | scoped_session, topic: str) -> None:
    """Inside the transaction that queues work on `topic`: NOTIFY (PostgreSQL) and nudge this process after commit."""
    if not isinstance(session, Session):
        session = session()
    if session.get_bind().dialect.name == "postgresql":
        # Identical notifications in one transaction are folded into one by PostgreSQL.
        session.execute(text("SELECT pg_notify(:channel, :topic)"), {"channel": CHANNEL, "topic": topic})
    if not session.info.get(_LISTENING_KEY):
        sa_event.listen(session, "after_commit", _after_commit)
        sa_event.listen(session, "after_soft_rollback", _after_rollback)
        session.info[_LISTENING_KEY] = True
    session.info.setdefault(_PENDING_KEY, set()).add(topic)


def _after_commit(session: Session) -> None:
    topics = session.info.pop(_PENDING_KEY, None)
    if topics:
        nudge(*topics)


def _after_rollback(session: Session, previous_transaction: SessionTransaction) -> None:
    # A savepoint's rollback leaves the outer transaction's signal standing.
    if not previous_transaction.nested:
        session.info.pop(_PENDING_KEY, None)
