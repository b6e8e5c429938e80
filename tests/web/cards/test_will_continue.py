""" "Will continue" is kept (issue 26 item 11): an answered card on a task that is not In progress says the agent
continues once the task is In progress and offers that move; making it wakes the agent at once, as promised."""

from __future__ import annotations

import re

import pytest
from sqlalchemy import select

from app.models import HeartbeatRun, Issue, WakeupRequest
from app.services.intents import resolution
from app.workers.continuations import RETRY, WOKEN, deliver, sweep_pending
from tests.factories import Factory
from tests.web.cards.test_intent_cards import Htmx, assert_fragment

RESOLUTION = re.compile(r'<p class="muted connection-card-resolution">(.*?)</p>', re.S)


@pytest.fixture
def todo_card(db, make):
    """A Notion card that Builder's run opened on a task, which someone then moved back to Todo."""
    company, owner, agent, issue = make.team(adapter_type="manual")
    interaction = Factory(db).card(issue, agent, owner, "notion", run_finished=True)
    issue.status = "todo"
    db.session.commit()
    return owner, agent, issue, interaction


def _resolution(html: str) -> str:
    text = RESOLUTION.search(html).group(1)
    return " ".join(re.sub(r"<[^>]+>", "", text).split())


def test_a_declined_card_on_a_todo_task_says_when_the_agent_continues_and_offers_the_move(app, db, todo_card):
    owner, agent, issue, interaction = todo_card
    resolution.decline_intent(interaction.id, owner.id, "Not now")
    db.session.commit()
    assert deliver(interaction.id) == RETRY  # not woken while the task is in Todo (reference.md 9, step 7)

    me = Htmx(app, owner)
    html = assert_fragment(me.get(f"/intents/{interaction.id}/card"))
    assert _resolution(html).endswith("Builder will continue without it once the task is In progress.")
    assert f'action="/tasks/{issue.id}/status"' in html and 'name="status" value="in_progress"' in html
    assert '<button type="submit" class="secondary">Move the task to In progress</button>' in html

    moved = me.client.post(
        f"/tasks/{issue.id}/status",
        data={"status": "in_progress", "csrf_token": me.csrf},
        follow_redirects=False,
    )
    assert moved.status_code == 303
    # The move makes the continuation due at once: the next sweep wakes Builder (no minute-long lease to wait out).
    assert sweep_pending() == {WOKEN: 1}
    db.session.expire_all()
    [wake] = db.session.scalars(select(WakeupRequest).where(WakeupRequest.agent_id == agent.id)).all()
    assert wake.idempotency_key == f"connection-intent:{interaction.id}:declined"
    assert db.session.get(HeartbeatRun, wake.run_id).status == "queued"
    html = assert_fragment(me.get(f"/intents/{interaction.id}/card"))
    assert _resolution(html).endswith("Builder will continue without it.")
    assert "/status" not in html


def test_a_card_whose_continuation_was_delivered_keeps_saying_it_continues(app, db, todo_card):
    owner, _agent, issue, interaction = todo_card
    db.session.get(Issue, issue.id).status = "in_progress"
    db.session.commit()
    resolution.decline_intent(interaction.id, owner.id, "Not now")
    db.session.commit()
    assert deliver(interaction.id) == WOKEN
    db.session.get(Issue, issue.id).status = "todo"  # moved back after the agent was woken
    db.session.commit()
    html = assert_fragment(Htmx(app, owner).get(f"/intents/{interaction.id}/card"))
    assert _resolution(html).endswith("Builder will continue without it.")
