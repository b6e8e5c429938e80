"""Demo data: one company with an owner, a member, two agents, a project and tasks. Safe to run repeatedly."""

from __future__ import annotations

import sys
from pathlib import Path

from sqlalchemy import select

from app.extensions import db
from app.models import Agent, Company, Issue, Project
from app.services.accounts import create_user, find_user_by_email
from app.services.agents import create_agent
from app.services.tenancy import add_membership, create_company, get_membership
from app.services.work import create_issue, wake_assignee

DEMO_COMPANY = "Acme Robotics"
DEMO_USERS = [
    {"email": "owner@example.com", "name": "Demo Owner", "password": "demo-owner-password", "role": "owner"},
    {
        "email": "member@example.com",
        "name": "Demo Member",
        "password": "demo-member-password",
        "role": "member",
    },
]
EXAMPLE_AGENT = Path(__file__).resolve().parents[2] / "examples" / "agents" / "process_agent.py"
DEMO_AGENTS = [
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
DEMO_TASKS = [
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
    for spec in DEMO_USERS:
        user = find_user_by_email(spec["email"]) or create_user(spec["email"], spec["name"], spec["password"])
        if get_membership(company.id, user.id) is None:
            add_membership(company, user, spec["role"])
        users[spec["role"]] = user
    agents = {}
    for spec in DEMO_AGENTS:
        agent = db.session.scalar(
            select(Agent).where(Agent.company_id == company.id, Agent.name == spec["name"])
        )
        if agent is None:
            agent = create_agent(
                company.id,
                name=spec["name"],
                title=spec["title"],
                instructions=spec["instructions"],
                adapter_type=spec["adapter_type"],
                adapter_config=spec["adapter_config"],
            )
        agents[spec["name"]] = agent
    project = db.session.scalar(
        select(Project).where(Project.company_id == company.id, Project.name == "Launch")
    )
    if project is None:
        project = Project(company_id=company.id, name="Launch", description="Robot arm firmware launch")
        db.session.add(project)
        db.session.flush()
    issues = []
    for spec in DEMO_TASKS:
        issue = db.session.scalar(
            select(Issue).where(Issue.company_id == company.id, Issue.title == spec["title"])
        )
        if issue is None:
            agent = agents.get(spec["agent"]) if spec["agent"] else None
            issue = create_issue(
                company.id,
                title=spec["title"],
                description=spec["description"],
                project_id=project.id,
                status=spec["status"],
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
