"""State that every server process and instance must see alike, kept in the database they share.

`ThrottleHit`: one failed authentication counted by the sign-in throttle (`app/services/throttle_store.py`), so a
guess counts once whichever process answered it.
"""

from __future__ import annotations

from sqlalchemy import BigInteger, Float, Index, Integer, String
from sqlalchemy.orm import Mapped, mapped_column

from app.extensions import Model


class ThrottleHit(Model):
    """One entry in a moving window: `key` names the limit and who is counted (hashed, never an email or address in
    clear); the entry counts while `at` is inside the window and is deleted once `expires_at` has passed."""

    __tablename__ = "throttle_hits"
    __table_args__ = (Index("ix_throttle_hits_key_at", "key", "at"),)

    id: Mapped[int] = mapped_column(
        BigInteger().with_variant(Integer(), "sqlite"), primary_key=True, autoincrement=True
    )
    key: Mapped[str] = mapped_column(String(200), nullable=False)
    at: Mapped[float] = mapped_column(Float(precision=53), nullable=False)
    expires_at: Mapped[float] = mapped_column(Float(precision=53), nullable=False, index=True)
