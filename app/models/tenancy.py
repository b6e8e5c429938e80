"""Companies, people, memberships, personal API keys and sign-in throttling."""

from __future__ import annotations

import uuid
from datetime import datetime

from flask_login import UserMixin
from sqlalchemy import Boolean, DateTime, ForeignKey, Integer, String, UniqueConstraint, Uuid
from sqlalchemy.orm import Mapped, mapped_column, relationship

from app.extensions import Model
from app.models.base import IdMixin, JSONType, TimestampMixin, ValueSet, one_of, utcnow


class Role(ValueSet):
    OWNER = "owner"
    ADMIN = "admin"
    MEMBER = "member"
    VIEWER = "viewer"


class MembershipStatus(ValueSet):
    ACTIVE = "active"
    SUSPENDED = "suspended"


MANAGE_CONNECTIONS = "tools:manage_connections"
MANAGE_MEMBERS = "members:manage"
# Choosing how an agent runs (its adapter, the program, its secrets) runs programs on the server: owners and admins.
MANAGE_AGENTS = "agents:manage"
KNOWN_PERMISSIONS = (MANAGE_CONNECTIONS, MANAGE_MEMBERS)
DEFAULT_ROLE_PERMISSIONS = {
    "owner": {MANAGE_CONNECTIONS, MANAGE_MEMBERS, MANAGE_AGENTS},
    "admin": {MANAGE_CONNECTIONS, MANAGE_MEMBERS, MANAGE_AGENTS},
    "member": set(),
    "viewer": set(),
}


class Company(IdMixin, TimestampMixin, Model):
    __tablename__ = "companies"

    name: Mapped[str] = mapped_column(String(200), nullable=False)
    issue_prefix: Mapped[str] = mapped_column(String(10), nullable=False)
    issue_counter: Mapped[int] = mapped_column(Integer, nullable=False, default=0)


class AccessRevision(Model):
    """A counter per company, raised in the same transaction as any change to what its agents can reach or find
    (connections, grants, installs, tools, policies, delegations, memberships, the catalog).

    Runtime search and gateway listings keep per-process answers keyed on it (`app.services.access.revision`). It
    has its own table, so the commit-time raise never contends with locks on the company row (the issue counter).
    """

    __tablename__ = "access_revisions"

    company_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("companies.id", ondelete="CASCADE"), primary_key=True
    )
    revision: Mapped[int] = mapped_column(Integer, nullable=False, default=0)


class User(IdMixin, TimestampMixin, UserMixin, Model):
    __tablename__ = "users"

    email: Mapped[str] = mapped_column(String(320), unique=True, nullable=False)
    name: Mapped[str] = mapped_column(String(200), nullable=False)
    password_hash: Mapped[str] = mapped_column(String(255), nullable=False)
    is_instance_admin: Mapped[bool] = mapped_column(Boolean, nullable=False, default=False)
    # The generation of the user's browser sessions: each session carries the value it was signed in under
    # (`get_id`), and one that does not match is signed out. Signing out (or a password change) moves it on, so a
    # session cookie captured before then no longer signs anyone in (the cookie itself lives in the browser).
    session_epoch: Mapped[int] = mapped_column(Integer, nullable=False, default=0, server_default="0")

    memberships: Mapped[list[Membership]] = relationship(back_populates="user")

    def get_id(self) -> str:
        """What the session stores (Flask-Login's alternative id): the user's id and its session generation."""
        return f"{self.id}:{self.session_epoch}"


class Membership(IdMixin, TimestampMixin, Model):
    __tablename__ = "memberships"
    __table_args__ = (
        UniqueConstraint("company_id", "user_id"),
        one_of("role", Role),
        one_of("status", MembershipStatus),
    )

    company_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("companies.id", ondelete="CASCADE"), nullable=False, index=True
    )
    user_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("users.id", ondelete="CASCADE"), nullable=False, index=True
    )
    role: Mapped[str] = mapped_column(String(20), nullable=False, default="member")
    status: Mapped[str] = mapped_column(String(20), nullable=False, default="active")
    permissions: Mapped[list] = mapped_column(JSONType, nullable=False, default=list)

    company: Mapped[Company] = relationship()
    user: Mapped[User] = relationship(back_populates="memberships")

    @property
    def is_active_member(self) -> bool:
        return self.status == "active"

    @property
    def has_write_access(self) -> bool:
        """Write access means an active membership with a role other than viewer."""
        return self.write_access(self.status, self.role)

    @staticmethod
    def write_access(status: str | None, role: str | None) -> bool:
        """`has_write_access` of a membership's status and role read as plain columns (None: no membership)."""
        return status == MembershipStatus.ACTIVE and role in Role.values() and role != Role.VIEWER

    def has_permission(self, permission: str) -> bool:
        if not self.has_write_access:
            return False
        return permission in DEFAULT_ROLE_PERMISSIONS.get(self.role, set()) or permission in (
            self.permissions or []
        )


class ApiKey(IdMixin, TimestampMixin, Model):
    """A personal board API key. Only the SHA-256 of the token is stored; the token is shown once."""

    __tablename__ = "api_keys"

    user_id: Mapped[uuid.UUID] = mapped_column(
        Uuid, ForeignKey("users.id", ondelete="CASCADE"), nullable=False, index=True
    )
    name: Mapped[str] = mapped_column(String(120), nullable=False)
    token_hash: Mapped[str] = mapped_column(String(64), nullable=False, unique=True)
    token_prefix: Mapped[str] = mapped_column(String(16), nullable=False)
    last_used_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))
    revoked_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True))

    user: Mapped[User] = relationship()


class LoginFailure(IdMixin, Model):
    """One failed sign-in; recent rows for an email throttle further attempts."""

    __tablename__ = "login_failures"

    email: Mapped[str] = mapped_column(String(320), nullable=False, index=True)
    remote_addr: Mapped[str | None] = mapped_column(String(64))
    created_at: Mapped[datetime] = mapped_column(DateTime(timezone=True), default=utcnow, nullable=False)
