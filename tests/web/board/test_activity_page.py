"""The Activity page lists the company's log newest first, filters by kind, escapes details, and stays scoped."""

from app.services.activity import record_activity
from tests.conftest import sign_in
from tests.services.runtime import test_runtime_rest

providers = test_runtime_rest.providers  # honcho -> the real MCP peer


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


def test_activity_reads_as_sentences_with_the_code_behind_a_disclosure(app, db, make, providers):
    """Issue 15: people read what happened; the raw event code and ids stay one click away."""
    from tests.web.api.test_intents_api import open_honcho_card
    from tests.web.cards.test_intent_cards import Htmx, setup_form

    card = open_honcho_card(app, db, make, "/intents")
    assert Htmx(app, card.member).post(f"{card.url}/setup", setup_form(card)).status_code == 200
    record_activity(  # what the worker writes when it finishes a run
        company_id=card.company.id,
        actor_type="system",
        actor_id="worker",
        action="run.succeeded",
        entity_type="heartbeat_run",
        entity_id=card.run.id,
        agent_id=card.agent.id,
        run_id=card.run.id,
        details={"status": "succeeded"},
    )
    db.session.commit()
    page = Htmx(app, card.member).client.get("/activity").get_data(as_text=True)
    name, task = card.member.name, card.issue.identifier
    assert f"{name} connected Honcho for Builder on {task}" in page
    assert f"{name} finished setting up Honcho (3 tools)" in page
    assert f"Builder asked for a connection on {task}" in page
    assert "<summary>Event code and ids</summary>" in page
    assert "Builder&#39;s run succeeded" in page  # the sentence, HTML-escaped
    assert "<code>issue.connection_intent_connected</code>" in page
