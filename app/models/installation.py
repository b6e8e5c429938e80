"""What every process of one installation must agree on, recorded in the database they share.

`InstallationSetting`: fingerprints of a key setting (`SECRET_KEY`, `SWITCHBOARD_ENCRYPTION_KEY`, the run tokens'
instance id), never the key itself; see `app/services/installation.py`.

`CatalogIngest`: every set of app definitions the cached catalog was ingested from, so a process that ships an older
set does not ingest it back at start (`app/catalog/sync.py`).
"""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import DateTime, String, Text
from sqlalchemy.orm import Mapped, mapped_column

from app.extensions import Model
from app.models.base import utcnow


class InstallationSetting(Model):
    """One setting's fingerprints, space-separated: the first is the key in use, the others keys still accepted (the
    older encryption keys of a rotation)."""

    __tablename__ = "installation_settings"

    name: Mapped[str] = mapped_column(String(64), primary_key=True)
    fingerprints: Mapped[str] = mapped_column(Text, nullable=False)
    recorded_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)


class CatalogIngest(Model):
    __tablename__ = "catalog_ingests"

    definitions_hash: Mapped[str] = mapped_column(String(64), primary_key=True)
    ingested_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), nullable=False, default=utcnow)
