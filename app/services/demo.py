"""Demo data: one company with an owner, a member, two agents, a project and tasks. Safe to run repeatedly."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TypedDict

from sqlalchemy import select

from app.extensions import db
from app.models import Agent, Company, Issue, Project
from app.services.accounts import create_user, find_user_by_email
from app.services.agents import create_agent
from app.services.tenancy import add_membership, create_company, get_membership
from app.services.work import create_issue, wake_assignee


class DemoUser(TypedDict):
    email: str
    name: str
    password: str
    role: str


class DemoAgent(TypedDict):
    name: str
    title: str
    instructions: str
    adapter_type: str
    adapter_config: dict


class DemoTask(TypedDict):
    title: str
    status: str
    agent: str | None  # the name of a DEMO_AGENTS entry; None leaves the task unassigned
    description: str


DEMO_COMPANY = "Acme Robotics"
DEMO_USERS: list[DemoUser] = [
    {"email": "owner@example.com", "name": "Demo Owner", "password": "demo-owner-password", "role": "owner"},
    {
        "email": "member@example.com",
        "name": "Demo Member",
        "password": "demo-member-password",
        "role": "member",
    },
]
EXAMPLE_AGENT = Path(__file__).resolve().parents[2] / "examples" / "agents" / "process_agent.py"
DEMO_AGENTS: list[DemoAgent] = [
    {
        "name": "Builder",
        "title": "Builds and ships changes",
        "instructions": "You build and ship small, well-tested changes. Explain what you changed.",
        "adapter_type": "process",
        "adapter_config": {"command": [sys.executable, str(EXAMPLE_AGENT)], "timeoutSeconds": 120},
    },
    {
        "name": "Researcher",
        "title": "Finds and summarises information",
        "instructions": "You research questions and cite your sources.",
        "adapter_type": "manual",
        "adapter_config": {},
    },
]
# The local memory provider `make run` starts (examples/demo_provider.py): what to type in the Honcho setup form.
DEMO_PROVIDER = {"app": "honcho", "apiKey": "demo-honcho-key", "workspace": "demo", "port": 5341}
DEMO_TASKS: list[DemoTask] = [
    {
        "title": "Write the launch notes in Notion",
        "status": "in_progress",
        "agent": "Builder",
        "description": "Draft the launch notes for the robot arm firmware release and save them in our Notion workspace.",
    },
    {
        "title": "Summarise competitor grippers",
        "status": "todo",
        "agent": "Researcher",
        "description": "Collect public specs of three competing grippers.",
    },
    {
        # The offline loop: assign it to Builder, who asks for Honcho; `make run` serves a local Honcho-compatible
        # provider, so the card can be answered without internet and Builder continues with its tools.
        "title": "Record the launch decisions in Honcho",
        "status": "in_progress",
        "agent": None,
        "description": "Keep the decisions of the robot arm firmware launch in our Honcho memory, so every agent "
        "recalls them. Assign it to Builder to watch it ask for Honcho.",
    },
    {
        "title": "Triage open firmware bugs",
        "status": "todo",
        "agent": None,
        "description": "Label and prioritise the open firmware bugs.",
    },
]


def load_demo() -> dict:
    """Create the demo company once; later runs return the same records."""
    company = db.session.scalar(select(Company).where(Company.name == DEMO_COMPANY))
    if company is None:
        company = create_company(DEMO_COMPANY, "ACME")
    users = {}
    for user_spec in DEMO_USERS:
        user = find_user_by_email(user_spec["email"]) or create_user(
            user_spec["email"], user_spec["name"], user_spec["password"]
        )
        if get_membership(company.id, user.id) is None:
            add_membership(company, user, user_spec["role"])
        users[user_spec["role"]] = user
    agents = {}
    for agent_spec in DEMO_AGENTS:
        agent = db.session.scalar(
            select(Agent).where(Agent.company_id == company.id, Agent.name == agent_spec["name"])
        )
        if agent is None:
            agent = create_agent(
                company.id,
                name=agent_spec["name"],
                title=agent_spec["title"],
                instructions=agent_spec["instructions"],
                adapter_type=agent_spec["adapter_type"],
                adapter_config=agent_spec["adapter_config"],
            )
        agents[agent_spec["name"]] = agent
    project = db.session.scalar(
        select(Project).where(Project.company_id == company.id, Project.name == "Launch")
    )
    if project is None:
        project = Project(company_id=company.id, name="Launch", description="Robot arm firmware launch")
        db.session.add(project)
        db.session.flush()
    issues = []
    for task_spec in DEMO_TASKS:
        issue = db.session.scalar(
            select(Issue).where(Issue.company_id == company.id, Issue.title == task_spec["title"])
        )
        if issue is None:
            agent = agents.get(task_spec["agent"]) if task_spec["agent"] else None
            issue = create_issue(
                company.id,
                title=task_spec["title"],
                description=task_spec["description"],
                project_id=project.id,
                status=task_spec["status"],
                assignee_agent_id=agent.id if agent else None,
                responsible_user_id=users["owner"].id,
            )
            if issue.status == "in_progress":
                # The demo starts with work in flight: the worker runs Builder on this task right away.
                wake_assignee(issue, source="demo", reason="Demo data: pick up the task.")
        issues.append(issue)
    return {
        "demoProvider": DEMO_PROVIDER,
        "company": {"id": str(company.id), "name": company.name},
        "users": [{"email": s["email"], "password": s["password"], "role": s["role"]} for s in DEMO_USERS],
        "agents": [{"id": str(a.id), "name": a.name} for a in agents.values()],
        "issues": [
            {
                "id": str(i.id),
                "identifier": i.identifier,
                "title": i.title,
                "status": i.status,
                "assigneeAgentId": str(i.assignee_agent_id) if i.assignee_agent_id else None,
                "responsibleUserId": str(i.responsible_user_id) if i.responsible_user_id else None,
            }
            for i in issues
        ],
    }
