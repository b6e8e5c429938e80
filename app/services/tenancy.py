"""Companies and memberships: who belongs where, with which role and permissions."""

from __future__ import annotations

import functools
import re
import uuid

from sqlalchemy import Select, Uuid, bindparam, select, update
from sqlalchemy.orm import contains_eager, joinedload

from app.core.errors import Conflict, Forbidden, Unprocessable
from app.extensions import db
from app.models import Company, Membership, User
from app.models.tenancy import KNOWN_PERMISSIONS, MANAGE_MEMBERS, MembershipStatus, Role
from app.services.accounts import create_user, find_user_by_email
from app.services.activity import record_activity


def create_company(name: str, issue_prefix: str | None = None) -> Company:
    prefix = issue_prefix or (re.sub(r"[^A-Za-z]", "", name)[:4].upper() or "TASK")
    company = Company(name=name.strip(), issue_prefix=prefix)
    db.session.add(company)
    db.session.flush()
    return company


def get_membership(
    company_id: uuid.UUID, user_id: uuid.UUID, *, with_company: bool = False
) -> Membership | None:
    """The person's membership of the company, if any; `with_company` loads the company in the same statement
    (board pages show its name in the header)."""
    if with_company:
        return db.session.scalar(_membership_with_company(), {"company_id": company_id, "user_id": user_id})
    return db.session.scalar(
        select(Membership).where(Membership.company_id == company_id, Membership.user_id == user_id)
    )


def active_memberships(user: User) -> list[Membership]:
    """The person's active memberships by company name, each with its company (one statement: the header shows
    the current company's name and the others' in the company switcher)."""
    return list(db.session.scalars(_active_memberships(), {"user_id": user.id}))


# Every board page runs one of these two: built once, for their parameters (building a statement cost about as
# much CPU as running it).


@functools.cache
def _membership_with_company() -> Select:
    return (
        select(Membership)
        .options(joinedload(Membership.company, innerjoin=True))
        .where(
            Membership.company_id == bindparam("company_id", type_=Uuid),
            Membership.user_id == bindparam("user_id", type_=Uuid),
        )
    )


@functools.cache
def _active_memberships() -> Select:
    return (
        select(Membership)
        .join(Company)
        .options(contains_eager(Membership.company))
        .where(Membership.user_id == bindparam("user_id", type_=Uuid), Membership.status == "active")
        .order_by(Company.name)
    )


def company_members(company_id: uuid.UUID) -> list[Membership]:
    return list(
        db.session.scalars(
            select(Membership).join(User).where(Membership.company_id == company_id).order_by(User.name)
        )
    )


def add_membership(
    company: Company, user: User, role: str, permissions: list[str] | None = None
) -> Membership:
    membership = Membership(company_id=company.id, user_id=user.id, role=role, permissions=permissions or [])
    db.session.add(membership)
    db.session.flush()
    return membership


def allocate_issue_identifier(company_id: uuid.UUID) -> str:
    """Take the next task number atomically (an UPDATE ... RETURNING holds the row until commit)."""
    row = db.session.execute(
        update(Company)
        .where(Company.id == company_id)
        .values(issue_counter=Company.issue_counter + 1)
        .returning(Company.issue_prefix, Company.issue_counter)
    ).one()
    return f"{row.issue_prefix}-{row.issue_counter}"


def _require_member_manager(actor: Membership) -> None:
    if not actor.has_permission(MANAGE_MEMBERS):
        raise Forbidden("Only owners and admins can manage members")


def invite_member(actor: Membership, *, email: str, name: str, role: str, password: str) -> Membership:
    """Add a person to the actor's company, creating their account when it does not exist yet."""
    _require_member_manager(actor)
    if role not in Role.values():
        raise Unprocessable(f"role must be one of {', '.join(Role.values())}")
    if role == "owner" and actor.role != "owner":
        raise Forbidden("Only owners can add owners")
    user = find_user_by_email(email)
    if user is None:
        user = create_user(email, name or email, password)
    elif get_membership(actor.company_id, user.id) is not None:
        raise Conflict("That person is already a member")
    membership = add_membership(actor.company, user, role)
    record_activity(
        company_id=actor.company_id,
        actor_type="user",
        actor_id=actor.user_id,
        action="member.added",
        entity_type="membership",
        entity_id=membership.id,
        details={"userId": str(user.id), "role": role},
    )
    return membership


def change_member(
    actor: Membership,
    target: Membership,
    *,
    role: str | None = None,
    status: str | None = None,
    permissions: list[str] | None = None,
) -> Membership:
    _require_member_manager(actor)
    if target.company_id != actor.company_id:
        raise Forbidden("Membership belongs to another company")
    if role is not None and role not in Role.values():
        raise Unprocessable(f"role must be one of {', '.join(Role.values())}")
    if (role == "owner" or target.role == "owner") and actor.role != "owner":
        raise Forbidden("Only owners can change owners")
    if permissions is not None and any(p not in KNOWN_PERMISSIONS for p in permissions):
        raise Unprocessable("Unknown permission")
    demoting_owner = target.role == "owner" and (role not in (None, "owner") or status == "suspended")
    if demoting_owner:
        owners = db.session.scalars(
            select(Membership).where(
                Membership.company_id == actor.company_id,
                Membership.role == "owner",
                Membership.status == "active",
            )
        ).all()
        if len(owners) <= 1:
            raise Conflict("A company needs at least one active owner")
    before = {"role": target.role, "status": target.status, "permissions": list(target.permissions or [])}
    if role is not None:
        target.role = role
    if status is not None:
        if status not in MembershipStatus.values():
            raise Unprocessable("status must be active or suspended")
        target.status = status
    if permissions is not None:
        target.permissions = sorted(set(permissions))
    record_activity(
        company_id=actor.company_id,
        actor_type="user",
        actor_id=actor.user_id,
        action="member.updated",
        entity_type="membership",
        entity_id=target.id,
        details={
            "before": before,
            "after": {
                "role": target.role,
                "status": target.status,
                "permissions": list(target.permissions or []),
            },
        },
    )
    return target
