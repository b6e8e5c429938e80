"""Issue 33 item 9: a task thread of 200 long comments is not sent whole. The page shows the newest 30 with "Load
earlier" (htmx, with a real href fallback), the window widens 30 at a time, and the poller keeps the window."""

from __future__ import annotations

import re
from datetime import timedelta

from app.models import Comment
from app.models.base import utcnow
from tests.conftest import sign_in
from tests.web.board.test_board_pages import HX, board  # noqa: F401

LONG = 20_000  # the longest comment allowed


def long_comments(db, issue, count=200):
    start = utcnow() - timedelta(hours=1)
    for n in range(count):
        body = f"Comment {n:03d} " + "x" * (LONG - 12)
        db.session.add(
            Comment(
                company_id=issue.company_id,
                issue_id=issue.id,
                body=body,
                created_at=start + timedelta(seconds=n),
            )
        )
    db.session.commit()


def shown_numbers(html: str) -> list[int]:
    return [int(n) for n in re.findall(r"Comment (\d{3}) x", html)]


def test_two_hundred_long_comments_page_in_windows_of_thirty(client, db, board):  # noqa: F811
    sign_in(client, board["user"])
    issue = board["build"]
    long_comments(db, issue)
    page = client.get(f"/tasks/{issue.id}")
    html = page.get_data(as_text=True)
    assert len(html) < 700_000, f"the task page is {len(html):,} characters"
    assert shown_numbers(html) == list(range(170, 200))
    assert "170 earlier items not shown" in html
    earlier_href = f"/tasks/{issue.id}?shown=60#thread-items"
    earlier_fragment = f"/tasks/{issue.id}/items?shown=60"
    assert f'<a href="{earlier_href}"' in html and f'hx-get="{earlier_fragment}"' in html
    tag = re.search(r'/tasks/[^/]+/items\?v=([0-9a-f]+)"', html).group(1)  # the poller, default window

    # Without JavaScript the link is a page with 60.
    wider = client.get(f"/tasks/{issue.id}?shown=60").get_data(as_text=True)
    assert shown_numbers(wider) == list(range(140, 200))
    assert "140 earlier items not shown" in wider

    # With htmx the items alone, and the poller keeps the wider window.
    fragment = client.get(earlier_fragment, headers=HX).get_data(as_text=True)
    assert fragment.lstrip().startswith('<ol class="thread"') and "<html" not in fragment
    assert shown_numbers(fragment) == list(range(140, 200))
    assert f"/tasks/{issue.id}/items?v={tag}&amp;shown=60" in fragment
    assert client.get(f"/tasks/{issue.id}/items?v={tag}&shown=60", headers=HX).status_code == 204

    db.session.add(Comment(company_id=issue.company_id, issue_id=issue.id, body="Comment 200 x the newest"))
    db.session.commit()
    polled = client.get(f"/tasks/{issue.id}/items?v={tag}&shown=60", headers=HX).get_data(as_text=True)
    assert shown_numbers(polled) == list(range(141, 201))
    assert "141 earlier items not shown" in polled

    # All of it, and nonsense windows fall back to the default.
    everything = client.get(f"/tasks/{issue.id}/items?shown=300", headers=HX).get_data(as_text=True)
    assert shown_numbers(everything) == list(range(201)) and "Load earlier" not in everything
    for nonsense in ("abc", "-5", "0"):
        odd = client.get(f"/tasks/{issue.id}/items?shown={nonsense}", headers=HX)
        assert odd.status_code == 200
    assert shown_numbers(
        client.get(f"/tasks/{issue.id}/items?shown=abc", headers=HX).get_data(as_text=True)
    ) == list(range(171, 201))


def test_a_short_thread_has_no_load_earlier(client, db, board):  # noqa: F811
    sign_in(client, board["user"])
    issue = board["build"]
    long_comments(db, issue, count=30)
    html = client.get(f"/tasks/{issue.id}").get_data(as_text=True)
    assert shown_numbers(html) == list(range(30)) and "Load earlier" not in html
