"""A long task thread in Chromium (issue 33 item 9): the newest 30 items, "Load earlier" brings 30 more in place
(htmx, no navigation), and a comment posted afterwards joins the wider window."""

from __future__ import annotations

from datetime import timedelta

import pytest
from playwright.sync_api import expect

from app.models import Comment
from app.models.base import utcnow
from tests.browser.conftest import sign_in_through_the_form
from tests.factories import DEFAULT_PASSWORD


@pytest.fixture
def long_thread(db, make):
    company = make.company("Acme")
    member = make.member(company, "member", user=make.user(name="Lee Member"))
    issue = make.issue(company, title="Long thread")
    start = utcnow() - timedelta(hours=1)
    for n in range(45):
        db.session.add(
            Comment(
                company_id=company.id,
                issue_id=issue.id,
                body=f"Comment {n:03d}",
                created_at=start + timedelta(seconds=n),
            )
        )
    db.session.commit()
    return member, issue


@pytest.mark.browser
def test_load_earlier_widens_the_thread_in_place(long_thread, live_server, page):
    member, issue = long_thread
    sign_in_through_the_form(page, live_server, member.email, DEFAULT_PASSWORD)
    page.goto(f"{live_server}/tasks/{issue.id}")
    items = page.locator("#thread-items > li.thread-item")
    expect(items).to_have_count(30)
    expect(items.first).to_contain_text("Comment 015")
    expect(page.locator("#thread-items")).to_contain_text("15 earlier items not shown")
    url = page.url
    page.get_by_role("link", name="Load earlier").click()
    expect(items).to_have_count(45)
    expect(items.first).to_contain_text("Comment 000")
    expect(page.get_by_role("link", name="Load earlier")).to_have_count(0)
    assert page.url == url  # swapped in place
    page.get_by_label("Add a comment").fill("The newest word")
    page.get_by_role("button", name="Comment").click()
    expect(page.locator("#thread-items")).to_contain_text("The newest word")
