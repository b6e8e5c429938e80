"""Column helpers shared by every model: UUID keys, timezone-aware timestamps, portable JSON."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from enum import StrEnum
from typing import overload

from sqlalchemy import JSON, CheckConstraint, CursorResult, DateTime, Result, Table, Uuid
from sqlalchemy.dialects.postgresql import JSONB
from sqlalchemy.orm import Mapped, mapped_column

JSONType = JSON().with_variant(JSONB(), "postgresql")
# For nullable JSON columns where None must be stored as SQL NULL (not the JSON literal null).
NullableJSONType = JSON(none_as_null=True).with_variant(JSONB(none_as_null=True), "postgresql")


class ValueSet(StrEnum):
    """A column's closed set of values: code names them by member, and the database refuses any other (`one_of`)."""

    @classmethod
    def values(cls) -> tuple[str, ...]:
        return tuple(member.value for member in cls)


def one_of(column: str, values: type[ValueSet]) -> CheckConstraint:
    """CHECK that `column` holds one of the set's values, named `ck_<table>_<column>` (the naming convention).
    Migration 0015 writes the same constraints; a new value needs a migration that widens them."""
    allowed = ", ".join(f"'{value}'" for value in values.values())
    return CheckConstraint(f"{column} IN ({allowed})", name=column)


def utcnow() -> datetime:
    return datetime.now(UTC)


@overload
def as_utc(value: datetime) -> datetime: ...
@overload
def as_utc(value: None) -> None: ...
@overload
def as_utc(value: datetime | None) -> datetime | None: ...
def as_utc(value: datetime | None) -> datetime | None:
    """SQLite hands back naive datetimes; treat them as UTC so comparisons work on both backends."""
    if value is None:
        return None
    return value if value.tzinfo else value.replace(tzinfo=UTC)


def table_of(model: type) -> Table:
    """The model's Table, for Core statements (declarative types `__table__` as the wider FromClause)."""
    table = getattr(model, "__table__", None)
    if not isinstance(table, Table):
        raise TypeError(f"{model.__name__} is not mapped to a table")
    return table


def rowcount(result: Result) -> int:
    """The rows an UPDATE or DELETE matched. `Session.execute` is typed as returning the plain Result; a DML
    statement's result is a CursorResult, which carries the count."""
    if not isinstance(result, CursorResult):
        raise TypeError("rowcount needs the result of an UPDATE or DELETE")
    return result.rowcount


class IdMixin:
    id: Mapped[uuid.UUID] = mapped_column(Uuid, primary_key=True, default=uuid.uuid4)


class TimestampMixin:
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, nullable=False)
    updated_at: Mapped[datetime] = mapped_column(
        DateTime(timezone=True), default=utcnow, onupdate=utcnow, nullable=False
    )
