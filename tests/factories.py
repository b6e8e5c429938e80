"""Small factories for test data; every object is flushed and committed so other threads can see it."""

from __future__ import annotations

import itertools

from app.models import Agent, Company, Membership, User
from app.services.accounts import create_user
from app.services.agents import create_agent
from app.services.tenancy import add_membership, create_company
from app.services.work import add_comment, create_issue

_seq = itertools.count(1)
DEFAULT_PASSWORD = "correct horse battery staple"


class Factory:
    def __init__(self, db):
        self.db = db

    def _commit(self, obj):
        self.db.session.commit()
        return obj

    def company(self, name: str | None = None, prefix: str | None = None) -> Company:
        n = next(_seq)
        return self._commit(create_company(name or f"Company {n}", prefix or f"C{n}"))

    def user(
        self, email: str | None = None, name: str | None = None, password: str = DEFAULT_PASSWORD
    ) -> User:
        n = next(_seq)
        return self._commit(create_user(email or f"user{n}@example.com", name or f"User {n}", password))

    def member(
        self,
        company: Company,
        role: str = "member",
        *,
        status: str = "active",
        permissions=None,
        user: User | None = None,
    ) -> User:
        user = user or self.user()
        membership = add_membership(company, user, role, permissions)
        membership.status = status
        self._commit(membership)
        return user

    def membership(self, company: Company, user: User) -> Membership:
        return self.db.session.query(Membership).filter_by(company_id=company.id, user_id=user.id).one()

    def agent(self, company: Company, name: str | None = None, **kwargs) -> Agent:
        return self._commit(create_agent(company.id, name=name or f"Agent {next(_seq)}", **kwargs))

    def issue(
        self,
        company: Company,
        *,
        title: str | None = None,
        status: str = "todo",
        assignee=None,
        responsible=None,
    ):
        return self._commit(
            create_issue(
                company.id,
                title=title or f"Task {next(_seq)}",
                status=status,
                assignee_agent_id=assignee.id if assignee else None,
                responsible_user_id=responsible.id if responsible else None,
            )
        )

    def comment(self, issue, user, body: str = "A comment"):
        return self._commit(add_comment(issue, body, author_user_id=user.id))
