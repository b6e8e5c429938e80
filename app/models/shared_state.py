"""State that every server process and instance must see alike, kept in the database they share.

`ThrottleHit`: one failed authentication counted by the sign-in throttle (`app/services/throttle_store.py`), so a
guess counts once whichever process answered it.

`ProviderBreaker`: a provider's circuit breaker (`app/services/connections/shared_breakers.py`), so its timeouts are
counted across every process and a paused provider is paused for all of them.
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


class ProviderBreaker(Model):
    """A provider whose last calls timed out: how many in a row, and until when calls to it are paused (wall-clock
    seconds; None while the breaker is closed). A provider that answers has no row."""

    __tablename__ = "provider_breakers"

    # sha256 of `provider_limits.provider_key` (the server's address without its query): fixed length, not the URL.
    key_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    timeouts: Mapped[int] = mapped_column(Integer, nullable=False, default=0)
    open_until: Mapped[float | None] = mapped_column(Float(precision=53))
