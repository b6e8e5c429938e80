"""Company context for board views: which company a page is about, and the caller's membership in it.

Every object is loaded through `load_scoped`, which answers 404 unless the signed-in person is an active member of the
object's company, so another company's objects are indistinguishable from missing ones.
"""

from __future__ import annotations

import uuid
from typing import Protocol, TypeVar

from flask import abort, g, session
from flask_login import current_user

from app.core.errors import Forbidden
from app.extensions import db
from app.models import Membership
from app.services.tenancy import active_memberships, get_membership

WRITE_FORBIDDEN = "You have read-only access to this company"


def parse_uuid(value: object) -> uuid.UUID:
    try:
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))
    except (ValueError, TypeError):
        abort(404)


def membership_for(company_id: uuid.UUID) -> Membership:
    membership = get_membership(company_id, current_user.id, with_company=True)
    if membership is None or not membership.is_active_member:
        abort(404)
    g.membership = membership
    return membership


def remember_company(company_id: uuid.UUID) -> None:
    """Keep the company the person works in for the next page. Written only when it changes: writing the same
    value marked the session modified, so every page (and every badge poll) signed and sent the cookie again."""
    value = str(company_id)
    if session.get("company_id") != value:
        session["company_id"] = value


def current_membership() -> Membership:
    """The membership of the company the person is working in (chosen in the header, else their first)."""
    memberships = active_memberships(current_user)
    if not memberships:
        abort(404)
    chosen = session.get("company_id")
    membership = next((m for m in memberships if str(m.company_id) == chosen), memberships[0])
    remember_company(membership.company_id)
    g.membership = membership
    g.memberships = memberships
    return membership


class CompanyOwned(Protocol):
    @property
    def company_id(self) -> uuid.UUID: ...


Owned = TypeVar("Owned", bound=CompanyOwned)


def load_scoped(model: type[Owned], object_id: object) -> tuple[Owned, Membership]:
    """Load a company-owned object for the signed-in person, or 404. Returns (object, membership)."""
    obj = db.session.get(model, parse_uuid(object_id))
    if obj is None:
        abort(404)
    membership = membership_for(obj.company_id)
    remember_company(obj.company_id)
    return obj, membership


def require_write(membership: Membership) -> None:
    if not membership.has_write_access:
        raise Forbidden(WRITE_FORBIDDEN)
