"""What every board page pays before its own content (issue 19): the header's company comes with the membership,
the company switcher costs no statement per company, and the session cookie is sent again only when the company
the person works in changes."""

from __future__ import annotations

from app.extensions import db as _db
from tests.conftest import count_statements, sign_in


def company_statements(statements: list[str]) -> list[str]:
    """Statements that read the companies table on its own (not joined to a membership)."""
    return [s for s in statements if "FROM companies" in s and "memberships" not in s]


def test_the_task_page_reads_its_company_with_the_membership(client, make):
    company = make.company("Acme Robotics")
    user = make.member(company)
    task = make.issue(company, title="Build the arm")
    sign_in(client, user)
    with count_statements(_db.engine) as statements:
        page = client.get(f"/tasks/{task.id}")
    assert page.status_code == 200
    assert '<span class="company-name" title="Current company">Acme Robotics</span>' in page.get_data(
        as_text=True
    )
    assert company_statements(statements) == []


def test_the_company_switcher_costs_the_same_statements_for_more_companies(client, make):
    user = make.user(name="Pat")
    first = make.company("Acme")
    make.member(first, user=user)
    sign_in(client, user)
    client.get("/")  # the chosen company is remembered

    def home() -> tuple[int, str]:
        with count_statements(_db.engine) as statements:
            page = client.get("/")
        assert page.status_code == 200
        assert company_statements(statements) == []
        return len(statements), page.get_data(as_text=True)

    make.member(make.company("Beta Labs"), user=user)
    with_two, page = home()
    assert "Switch to Beta Labs" in page
    make.member(make.company("Gamma Works"), user=user)
    with_three, page = home()
    assert "Switch to Beta Labs" in page and "Switch to Gamma Works" in page
    assert "Switch to Acme" not in page  # the current company is the header's, not a switch
    assert with_three == with_two


def test_the_session_cookie_is_sent_again_only_when_the_company_changes(client, make):
    user = make.user()
    acme, beta = make.company("Acme"), make.company("Beta")
    make.member(acme, user=user)
    make.member(beta, user=user)
    acme_task, beta_task = make.issue(acme, title="In Acme"), make.issue(beta, title="In Beta")
    sign_in(client, user)
    client.get("/")  # the first page chooses a company (Acme: companies by name) and remembers it
    assert "Set-Cookie" not in client.get("/").headers
    assert "Set-Cookie" not in client.get(f"/tasks/{acme_task.id}").headers
    assert "Set-Cookie" not in client.get("/inbox/badge").headers
    moved = client.get(f"/tasks/{beta_task.id}")  # a page of another company makes it the current one
    assert moved.status_code == 200 and "session=" in moved.headers["Set-Cookie"]
    home = client.get("/")
    assert '<span class="company-name" title="Current company">Beta</span>' in home.get_data(as_text=True)
    assert "Set-Cookie" not in home.headers
