"""Members: owners and admins add people and change roles."""

import secrets
import uuid

from flask import redirect, render_template, url_for
from flask.typing import ResponseReturnValue

from app.core.errors import Forbidden, ServiceError, Unprocessable
from app.extensions import db
from app.models import Membership
from app.models.tenancy import MANAGE_MEMBERS
from app.services.accounts import find_user_by_email
from app.services.tenancy import change_member, company_members, invite_member
from app.web.board import bp
from app.web.context import current_membership, load_scoped
from app.web.forms import AddMemberForm, MemberRoleForm

MANAGE_FORBIDDEN = "Only owners and admins can manage members"


def _render(
    membership: Membership,
    form: AddMemberForm | None = None,
    created_password: str | None = None,
    existing_account: str | None = None,
    role_error: tuple[uuid.UUID, str] | None = None,
    status: int = 200,
) -> ResponseReturnValue:
    members = company_members(membership.company_id)
    return render_template(
        "board/members.html",
        members=members,
        form=form or AddMemberForm(formdata=None),
        role_forms={m.id: MemberRoleForm(formdata=None, role=m.role) for m in members},
        can_manage=membership.has_permission(MANAGE_MEMBERS),
        created_password=created_password,
        existing_account=existing_account,
        role_error=role_error,
    ), status


def _require_member_manager(membership: Membership) -> None:
    # Authorize before validating, so a person without the right learns nothing from form errors.
    if not membership.has_permission(MANAGE_MEMBERS):
        raise Forbidden(MANAGE_FORBIDDEN)


@bp.get("/members")
def members() -> ResponseReturnValue:
    return _render(current_membership())


@bp.post("/members")
def add_member() -> ResponseReturnValue:
    membership = current_membership()
    _require_member_manager(membership)
    form = AddMemberForm()
    if not form.validate_on_submit():
        return _render(membership, form=form, status=422)
    # A person who already has an account keeps their password: an admin of one company must not be able to set
    # the password of someone else's account, and a generated one would be shown but never work.
    existing = find_user_by_email(form.email.data)
    password = form.password.data or secrets.token_urlsafe(12)
    invite_member(
        membership, email=form.email.data, name=form.name.data, role=form.role.data, password=password
    )
    if existing is not None:
        return _render(membership, existing_account=existing.email)
    return _render(membership, created_password=None if form.password.data else password)


@bp.post("/members/<membership_id>/role")
def change_role(membership_id: str) -> ResponseReturnValue:
    target, membership = load_scoped(Membership, membership_id)
    _require_member_manager(membership)
    form = MemberRoleForm()
    if not form.validate_on_submit():
        raise Unprocessable("Choose a valid role")
    try:
        change_member(membership, target, role=form.role.data)
    except ServiceError as err:
        # A refused change (the last owner, an admin changing an owner) re-renders the page with the saved roles,
        # so the select shows the role that still holds, and the reason beside it.
        db.session.rollback()
        return _render(membership, role_error=(target.id, err.message), status=err.status)
    return redirect(url_for("board.members"), code=303)
