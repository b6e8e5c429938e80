"""The task page computes its thread tag from the items it loaded (`thread_version_of`); the poller computes it in
SQL (`thread_version`). They must agree, or an open page would be swapped on its first poll (or never)."""

from __future__ import annotations

from datetime import UTC, datetime

from app.extensions import db
from app.services.work import thread_items, thread_version, thread_version_of


def tags(issue):
    db.session.expire_all()  # both read what is stored, not what this session holds
    return thread_version_of(issue, thread_items(issue)), thread_version(issue)


def test_the_two_tags_agree_as_a_thread_grows(make):
    company = make.company("Acme")
    person = make.member(company, "member")
    agent = make.agent(company, "Builder")
    issue = make.issue(company, title="Build", status="in_progress", assignee=agent, responsible=person)
    seen = []

    from_items, from_sql = tags(issue)
    assert from_items == from_sql
    seen.append(from_sql)

    make.comment(issue, person, "First")
    make.comment(issue, person, "Second")
    from_items, from_sql = tags(issue)
    assert from_items == from_sql
    seen.append(from_sql)

    pending = make.card(issue, agent, person, "notion")
    from_items, from_sql = tags(issue)
    assert from_items == from_sql
    seen.append(from_sql)

    make.card(issue, agent, person, "linear")
    pending.status = "declined"
    pending.resolved_at = datetime.now(UTC)
    db.session.commit()
    from_items, from_sql = tags(issue)
    assert from_items == from_sql
    seen.append(from_sql)

    issue.status = "blocked"
    db.session.commit()
    from_items, from_sql = tags(issue)
    assert from_items == from_sql
    seen.append(from_sql)

    assert len(set(seen)) == len(seen)  # every step changed the tag


def test_the_page_tag_keeps_the_poller_quiet(client, make):
    """End to end: the tag the page embeds makes the poller answer 204 with comments and cards in the thread."""
    import re

    from tests.conftest import sign_in

    company = make.company("Acme")
    person = make.member(company, "member")
    agent = make.agent(company, "Builder")
    issue = make.issue(company, title="Build", status="in_progress", assignee=agent, responsible=person)
    make.comment(issue, person, "Hello")
    make.card(issue, agent, person, "notion")
    sign_in(client, person)
    page = client.get(f"/tasks/{issue.id}").get_data(as_text=True)
    tag = re.search(r'/tasks/[^/]+/items\?v=([0-9a-f]+)"', page).group(1)
    assert client.get(f"/tasks/{issue.id}/items?v={tag}", headers={"HX-Request": "true"}).status_code == 204
