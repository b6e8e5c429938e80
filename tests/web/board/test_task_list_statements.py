"""The Tasks list reads every task with its assignee's name in one statement, however many agents are assigned."""

from __future__ import annotations

from app.extensions import db as _db
from tests.conftest import count_statements, sign_in


def test_the_task_list_costs_the_same_statements_for_more_assignees(client, make):
    company = make.company("Acme")
    user = make.member(company)
    sign_in(client, user)
    client.get("/tasks")

    def tasks_page() -> tuple[int, str]:
        with count_statements(_db.engine) as statements:
            page = client.get("/tasks")
        assert page.status_code == 200
        return len(statements), page.get_data(as_text=True)

    make.issue(company, title="Build the arm", assignee=make.agent(company, "Builder"))
    make.issue(company, title="Triage bugs")
    few, page = tasks_page()
    assert (
        '<td data-label="Assignee">Builder</td>' in page
        and '<td data-label="Assignee">Unassigned</td>' in page
    )
    for n in range(4):
        make.issue(company, title=f"Task {n}", assignee=make.agent(company, f"Agent {n}"))
    more, page = tasks_page()
    assert all(f'<td data-label="Assignee">Agent {n}</td>' in page for n in range(4))
    assert more == few
