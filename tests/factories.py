"""Small factories for test data; every object is flushed and committed so other threads can see it.

They go through the services where one exists (companies, people, agents, tasks, runs and their tokens, connection
cards, installs). A connection's stored rows (grants, indexed tools, policies) are written directly: the services that
write them verify against a provider, and the tests that use `connection()` read only stored state.
"""

from __future__ import annotations

import itertools
from types import SimpleNamespace

from app.models import (
    Agent,
    Company,
    ConnectionGrant,
    ConnectionTool,
    GrantSecret,
    HeartbeatRun,
    Membership,
    ThreadInteraction,
    ToolConnection,
    ToolPolicy,
    User,
)
from app.services.accounts import create_user
from app.services.agents import create_agent
from app.services.connections.audience import add_agent_install, add_company_install
from app.services.intents import creation as intents_creation
from app.services.intents import service as intents_service
from app.services.runs.tokens import mint_run_token, open_run
from app.services.runs.wakeups import claim_next_run, request_wakeup
from app.services.secrets_box import encrypt
from app.services.tenancy import add_membership, create_company
from app.services.work import add_comment, create_issue

_seq = itertools.count(1)
DEFAULT_PASSWORD = "correct horse battery staple"
FACTORY_KEY = "factory-stored-key"  # noqa: S105 (a placeholder credential of factory grants)


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

    # -- runs ------------------------------------------------------------------------------------------------------

    def run(self, agent: Agent, issue, responsible: User | None = None) -> tuple[HeartbeatRun, str]:
        """A live run of the agent on the task (as the runtime opens one) and its run-bound token."""
        run = open_run(agent, issue, responsible.id if responsible else None)
        self.db.session.commit()
        return run, mint_run_token(run).token

    def claimed_run(self, agent: Agent, issue, **wake) -> HeartbeatRun:
        """Wake the agent on the task and claim the run (status running), as the run worker does."""
        request_wakeup(agent, issue=issue, **wake)
        self.db.session.commit()
        run = claim_next_run()
        self.db.session.commit()
        assert run is not None and run.agent_id == agent.id
        return run

    def team(
        self,
        company_name: str = "Acme",
        prefix: str | None = None,
        *,
        owner: User | None = None,
        title: str | None = None,
        **agent_settings,
    ) -> tuple[Company, User, Agent, object]:
        """(company, owner, agent, issue): an owner (the task's responsible person) and an agent Builder
        (`agent_settings`: its adapter) assigned an in-progress task."""
        company = self.company(company_name, prefix)
        owner = self.member(company, "owner", user=owner)
        agent = self.agent(company, "Builder", **agent_settings)
        issue = self.issue(company, title=title, status="in_progress", assignee=agent, responsible=owner)
        return company, owner, agent, issue

    def task_run(self, company_name: str = "Acme", *, client=None) -> SimpleNamespace:
        """`team()` with a live run and its token; with `client`, that test client is signed in as the owner
        (`client`, `csrf`)."""
        company, owner, agent, issue = self.team(company_name)
        run, token = self.run(agent, issue)
        world = SimpleNamespace(company=company, owner=owner, agent=agent, issue=issue, run=run, token=token)
        if client is not None:
            from tests.conftest import sign_in

            world.client, world.csrf = client, sign_in(client, owner)
        return world

    # -- connection cards ------------------------------------------------------------------------------------------

    def card(
        self,
        issue,
        agent: Agent,
        addressee: User,
        slug: str = "notion",
        *,
        run_finished: bool = False,
        expect_new: bool = False,
        commit: bool = True,
    ) -> ThreadInteraction:
        """A pending connection card for `slug`, opened by a run of the agent on the task and addressed to
        `addressee` (the run's responsible person), through the service the runtime's request uses.
        `run_finished`: the opening run has since succeeded (as a run that asked and ended)."""
        source = open_run(agent, issue, addressee.id)
        service = intents_service.resolve_service(issue.company_id, slug, addressee.id, agent.id)
        interaction, created = intents_creation.create_connection_intent(
            issue, agent, service, addressee_user_id=addressee.id, run_id=source.id
        )
        if expect_new:
            assert created
        if run_finished:
            source.status = "succeeded"
        if commit:
            self.db.session.commit()
        return interaction

    def requested_card(self, slug: str = "honcho", url_prefix: str = "/intents") -> SimpleNamespace:
        """A member is responsible for the task; the agent Builder's run asked for `slug` over the runtime door, which
        opened a card addressed to the member (`id`, `url` under `url_prefix`, the door's `answer`)."""
        from flask import current_app

        from tests.doors import request_service

        company = self.company("Acme")
        owner = self.member(company, "owner")
        member = self.member(company, "member")
        agent = self.agent(company, "Builder")
        issue = self.issue(company, status="in_progress", assignee=agent, responsible=member)
        run, token = self.run(agent, issue)
        answer = request_service(current_app.test_client(), token, slug).json
        interaction_id = answer["interactionId"]
        return SimpleNamespace(
            company=company,
            owner=owner,
            member=member,
            agent=agent,
            issue=issue,
            run=run,
            token=token,
            answer=answer,
            id=interaction_id,
            url=f"{url_prefix}/{interaction_id}",
        )

    # -- connections (stored rows; see the module docstring) ---------------------------------------------------------

    def connection(
        self,
        company: Company,
        *,
        slug: str = "custom",
        name: str | None = None,
        config: dict | None = None,
        instructions: dict | None = None,
        health_status: str = "healthy",
        grants=(),
        install_for: Agent | None = None,
        installed: bool = True,
        tools: dict[str, str | None] | None = None,
        describe_tools: bool = False,
        version_hash: str = "v1",
    ) -> ToolConnection:
        """An active api-key connection with `grants` ((kind, subject) pairs), installed company-wide (or for
        `install_for`, or nowhere), and indexed `tools` (name: policy action, None for no policy row)."""
        connection = ToolConnection(
            company_id=company.id,
            app_slug=slug,
            name=name or f"{slug} connection {next(_seq)}",
            status="active",
            enabled=True,
            health_status=health_status,
            auth_kind="api_key",
            config=config if config is not None else {},
            agent_instructions=instructions,
        )
        self.db.session.add(connection)
        self.db.session.flush()
        for kind, subject in grants:
            self.grant(connection, kind, subject=subject, default=kind == "organization", commit=False)
        if installed and install_for is None:
            add_company_install(connection, None)
        elif installed:
            add_agent_install(connection, install_for.id, None)
        for tool, action in (tools or {}).items():
            described = {"description": f"{tool} tool"} if describe_tools else {}
            self.db.session.add(
                ConnectionTool(
                    company_id=company.id,
                    connection_id=connection.id,
                    name=tool,
                    version_hash=version_hash,
                    **described,
                )
            )
            if action is not None:
                self.db.session.add(
                    ToolPolicy(
                        company_id=company.id, connection_id=connection.id, tool_name=tool, action=action
                    )
                )
        return self._commit(connection)

    def grant(
        self,
        connection: ToolConnection,
        kind: str,
        *,
        subject=None,
        default: bool = False,
        status: str = "active",
        commit: bool = True,
        credential: bool = True,
    ) -> ConnectionGrant:
        """An identity of the connection: `organization`, or `user` / `agent` for `subject`, holding a stored key
        (as a verified setup leaves it) unless `credential` is False."""
        row = ConnectionGrant(
            company_id=connection.company_id,
            connection_id=connection.id,
            kind=kind,
            subject_user_id=subject.id if kind == "user" else None,
            subject_agent_id=subject.id if kind == "agent" else None,
            is_default=default,
            status=status,
        )
        self.db.session.add(row)
        if credential:
            self.db.session.flush()
            self.db.session.add(
                GrantSecret(
                    company_id=row.company_id,
                    grant_id=row.id,
                    key="authorization",
                    ciphertext=encrypt(FACTORY_KEY),
                )
            )
        return self._commit(row) if commit else row
