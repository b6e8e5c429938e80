"""The company access revision: raised in the same transaction as any change to what its agents can find or reach.

Runtime search (`runtime_tools`) and gateway listings (`gateway`) answer from per-process caches per audience, valid
while the company's revision is unchanged, so every write that could change such an answer must raise it. Rather than trusting each
writer to remember, session events watch the models the snapshot reads: any flushed insert, update or delete of a
connection, grant, install, tool, policy, delegation or membership marks its company, and a change to the cached
catalog marks every company. ORM bulk statements on those models mark the companies named in their parameters, or
every company when the statement does not say. Code that writes them without the ORM calls `touch`.

The revision rows are raised once, just before the outermost commit, as the transaction's last statements: the row
lock is held only while committing, so it cannot take part in a lock-order cycle with task or card locks.
"""

from __future__ import annotations

import itertools
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Hashable, Sequence
from typing import Any, Generic, TypeVar

from sqlalchemy import ColumnElement, Integer, event, func, inspect, literal_column, select, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert
from sqlalchemy.orm import ORMExecuteState, Session, SessionTransaction, UOWTransaction

from app.core import wake_signal
from app.extensions import db
from app.models import (
    AccessRevision,
    CatalogApp,
    Company,
    ConnectionGrant,
    ConnectionInstall,
    ConnectionTool,
    GrantDelegation,
    Membership,
    ToolConnection,
    ToolPolicy,
)
from app.models.base import table_of

# Models whose rows decide a search answer; each carries `company_id`.
TRACKED = (
    ToolConnection,
    ConnectionGrant,
    ConnectionInstall,
    ConnectionTool,
    ToolPolicy,
    GrantDelegation,
    Membership,
)
_CHANGED = "access_revision.changed"
EVERY_COMPANY = "*"


def touch(company_id: uuid.UUID | None = None, session: Session | None = None) -> None:
    """Raise the company's revision (every company's when None) when the current transaction commits."""
    _mark(session or db.session(), company_id or EVERY_COMPANY)


def _mark(session: Session, company_id: uuid.UUID | str) -> None:
    session.info.setdefault(_CHANGED, set()).add(company_id)


# Columns no answer reads: changing only these leaves the revision alone (an OAuth refresh rewrites a grant's
# token bookkeeping every hour or so; it must not invalidate every cached answer of the company).
UNREAD_COLUMNS: dict[type, frozenset[str]] = {
    ConnectionGrant: frozenset({"provider_tenant", "scopes", "updated_at"}),
    ToolConnection: frozenset({"updated_at"}),
    Membership: frozenset({"updated_at"}),
    ToolPolicy: frozenset({"updated_at"}),
}


def _changes_an_answer(instance: object) -> bool:
    """For an updated row: did a column that answers read change? (History is read without loading.)"""
    unread = UNREAD_COLUMNS.get(type(instance), frozenset())
    return any(attr.history.has_changes() for attr in inspect(instance).attrs if attr.key not in unread)


@event.listens_for(Session, "after_flush")
def _collect_flushed(session: Session, flush_context: UOWTransaction) -> None:
    # Still the pre-flush state here (and each of these properties builds a new set: read them once).
    new, dirty, deleted = session.new, session.dirty, session.deleted
    updated = [instance for instance in dirty if instance not in deleted]
    for instance in itertools.chain(new, deleted, updated):
        if isinstance(instance, CatalogApp):
            _mark(session, EVERY_COMPANY)
        elif isinstance(instance, TRACKED):
            if instance not in new and instance not in deleted and not _changes_an_answer(instance):
                continue
            # Read without loading: a deleted row's attributes may be expired, and nothing may be queried here.
            _mark(session, instance.__dict__.get("company_id") or EVERY_COMPANY)


@event.listens_for(Session, "do_orm_execute")
def _collect_bulk(state: ORMExecuteState) -> None:
    if not (state.is_insert or state.is_update or state.is_delete):
        return
    mapper = state.bind_mapper
    if mapper is None or not issubclass(mapper.class_, (*TRACKED, CatalogApp)):
        return
    rows = state.parameters if isinstance(state.parameters, Sequence) else [state.parameters or {}]
    companies = {row.get("company_id") for row in rows}
    if mapper.class_ is CatalogApp or None in companies or not state.is_insert:
        # An UPDATE or DELETE names its rows by criteria we do not evaluate here: assume every company.
        companies = {EVERY_COMPANY}
    for company_id in companies:
        _mark(state.session, company_id or EVERY_COMPANY)  # None was replaced above


@event.listens_for(Session, "before_commit")
def _raise_revisions(session: Session) -> None:
    session.flush()  # what is still pending marks its companies first
    changed = session.info.pop(_CHANGED, None)
    if not changed:
        return
    table = table_of(AccessRevision)
    dialect = session.get_bind().dialect.name
    insert = postgresql_insert if dialect == "postgresql" else sqlite_insert
    if EVERY_COMPANY in changed:
        missing = select(Company.id, literal_column("0", Integer)).where(
            ~Company.id.in_(select(table.c.company_id))
        )
        session.execute(
            insert(table).from_select(["company_id", "revision"], missing).on_conflict_do_nothing()
        )
        session.execute(update(table).values(revision=table.c.revision + 1))
        return
    ids = sorted(changed)
    session.execute(
        insert(table).values([{"company_id": c, "revision": 0} for c in ids]).on_conflict_do_nothing()
    )
    session.execute(update(table).where(table.c.company_id.in_(ids)).values(revision=table.c.revision + 1))


@event.listens_for(Session, "after_transaction_end")
def _forget_on_rollback(session: Session, transaction: SessionTransaction) -> None:
    """A rolled-back outermost transaction changed nothing (a committed one has already popped its marks)."""
    if transaction.parent is None:
        session.info.pop(_CHANGED, None)


def refresh_every_company(session: Session | None = None) -> int:
    """After a change made outside the app (an SQL fix, a restore): raise every company's revision and signal the
    workers; the caller commits. Returns how many companies there are.

    No process keeps the revision itself: every agent request reads it with its run (one statement), so from the
    commit on, each process of each instance answers that request from the database and files the result under
    the new revision. Caches keyed on content (parsed catalog rows by content hash, prepared instruction blocks,
    provider targets by their inputs) already compare what they were built from. Workers are nudged (NOTIFY on
    PostgreSQL) so restored queued work is looked at now rather than at the next poll.
    """
    session = session or db.session()
    _mark(session, EVERY_COMPANY)
    for topic in wake_signal.TOPICS:
        wake_signal.signal_work(session, topic)
    return int(session.scalar(select(func.count()).select_from(Company)) or 0)


def current_revision(company_id: uuid.UUID) -> int:
    """The company's committed revision (one statement; 0 before its first change)."""
    return int(
        db.session.scalar(select(AccessRevision.revision).where(AccessRevision.company_id == company_id)) or 0
    )


def changed_in_this_transaction(company_id: uuid.UUID, session: Session | None = None) -> bool:
    """Whether this transaction has written something that will raise the company's revision at commit.

    A cache filed under the committed revision does not describe such a transaction's own view: callers that
    read inside it build afresh. (Pending objects are flushed first, as a query would autoflush them.)
    """
    session = session or db.session()
    session.flush()
    changed = session.info.get(_CHANGED) or set()
    return company_id in changed or EVERY_COMPANY in changed


def revision_column() -> ColumnElement[Any]:
    """The company's revision as a column for a query joined to `AccessRevision` (0 before its first change)."""
    return db.func.coalesce(AccessRevision.revision, 0)


T = TypeVar("T")


class RevisionCache(Generic[T]):
    """Per-process values by key (an audience), each valid while its company's access revision is unchanged.

    Bounded (least recently used goes first) and safe across threads. Building happens outside the lock, so two
    threads may build the same value once each; either result is valid for the revision it was built under.
    """

    def __init__(self, size: int) -> None:
        self.size = size
        self._entries: OrderedDict[Hashable, tuple[int, T]] = OrderedDict()
        self._lock = threading.Lock()

    def get_or_build(self, key: Hashable, revision: int, build: Callable[[], T]) -> T:
        found = self.get(key, revision)
        if found is not None:
            return found
        value = build()
        self.put(key, revision, value)
        return value

    def get(self, key: Hashable, revision: int) -> T | None:
        """The value kept for `key` under `revision`, or None."""
        with self._lock:
            cached = self._entries.get(key)
            if cached is not None and cached[0] == revision:
                self._entries.move_to_end(key)
                return cached[1]
        return None

    def put(self, key: Hashable, revision: int, value: T) -> None:
        with self._lock:
            self._entries[key] = (revision, value)
            self._entries.move_to_end(key)
            while len(self._entries) > self.size:
                self._entries.popitem(last=False)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
