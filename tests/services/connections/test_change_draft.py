"""A kept draft's method and identity can change after a failed attempt (the rule in `change_draft_choices`)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from sqlalchemy import func, select

from app.catalog.loader import get_app
from app.core.errors import Forbidden, Unprocessable, ValidationFailed
from app.models import ConnectionGrant, OAuthState
from app.models.base import utcnow
from app.services.connections.setup import change_draft_choices, start_connection


def _draft(make, company, user, slug="linear", method_key="mcp-key", identity="user"):
    return start_connection(
        make.membership(company, user), get_app(slug), method_key=method_key, identity=identity
    )


def _grants(db, draft) -> list[tuple[str, object]]:
    rows = db.session.scalars(select(ConnectionGrant).where(ConnectionGrant.connection_id == draft.id))
    return sorted((g.kind, g.subject_user_id) for g in rows)


def test_a_kept_draft_follows_a_new_method_and_identity(db, make, acme):
    company, owner, *_ = acme
    draft = _draft(make, company, owner)
    db.session.add(
        OAuthState(
            state_hash="a" * 64,
            company_id=company.id,
            connection_id=draft.id,
            user_id=owner.id,
            identity="user",
            redirect_uri="http://127.0.0.1/oauth/callback",
            provider={},
            expires_at=utcnow() + timedelta(minutes=10),
        )
    )
    db.session.flush()
    assert _grants(db, draft) == [("user", owner.id)]

    same = change_draft_choices(
        make.membership(company, owner),
        draft,
        get_app("linear"),
        method_key="mcp-oauth",
        identity="organization",
    )
    assert same.id == draft.id and same.status == "draft"
    assert (draft.method_key, draft.auth_kind, draft.config["identity"]) == (
        "mcp-oauth",
        "oauth",
        "organization",
    )
    assert draft.config["methodConfig"] == {}
    assert _grants(db, draft) == [("organization", None)]
    # A sign-in started for the earlier choice can no longer finish this draft.
    assert db.session.scalar(select(func.count()).select_from(OAuthState)) == 0


def test_a_member_cannot_switch_a_draft_to_the_organization_and_a_bad_method_is_refused(db, make, acme):
    company, _owner, member, *_ = acme
    draft = _draft(make, company, member)
    membership = make.membership(company, member)
    with pytest.raises(Forbidden):
        change_draft_choices(
            membership, draft, get_app("linear"), method_key="mcp-key", identity="organization"
        )
    with pytest.raises(ValidationFailed):
        change_draft_choices(membership, draft, get_app("linear"), method_key="nope", identity="user")
    assert (draft.method_key, draft.config["identity"]) == ("mcp-key", "user")


def test_only_an_unfinished_setup_changes_its_choices(db, make, acme):
    company, owner, *_ = acme
    draft = _draft(make, company, owner)
    draft.status = "active"
    with pytest.raises(Unprocessable):
        change_draft_choices(
            make.membership(company, owner), draft, get_app("linear"), method_key="mcp-oauth", identity="user"
        )
