"""The Activity page lists the company's log newest first, filters by kind, escapes details, and stays scoped."""

from app.services.activity import record_activity
from tests.conftest import sign_in


def test_activity_page_lists_filters_and_escapes(client, db, make):
    company = make.company("Acme")
    owner = make.member(company, "owner")
    agent = make.agent(company, "Builder")
    issue = make.issue(company, title="Ship it", assignee=agent, responsible=owner)
    make.comment(issue, owner, "First!")
    record_activity(
        company_id=company.id,
        actor_type="agent",
        actor_id=agent.id,
        action="tool_gateway.call",
        entity_type="tool_connection",
        entity_id=issue.id,
        details={"tool": "<script>x</script>"},
    )
    other = make.company("Elsewhere")
    record_activity(
        company_id=other.id,
        actor_type="system",
        actor_id="worker",
        action="run.started",
        entity_type="heartbeat_run",
        entity_id=other.id,
        details={},
    )
    db.session.commit()
    sign_in(client, owner)
    page = client.get("/activity").get_data(as_text=True)
    assert page.index("tool_gateway.call") < page.index("issue.comment_added")
    assert "Builder" in page and owner.name in page
    assert "<script>x</script>" not in page and "&lt;script&gt;x&lt;/script&gt;" in page
    assert "run.started" not in page
    filtered = client.get("/activity?action=issue.").get_data(as_text=True)
    assert "issue.comment_added" in filtered and "tool_gateway.call" not in filtered
    assert client.get("/activity?action=bogus").status_code == 200
