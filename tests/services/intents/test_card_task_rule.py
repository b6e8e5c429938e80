"""One owner for "the card's task is still active for it" and for what a card is now.

The continuation worker's retire check used to restate the card-task rule; it now asks `card_task_is_active`. Over a
grid of tasks (open or closed, assigned to the requesting agent, another agent or nobody) and resolved cards, the
worker's check gives the answer its former expression gave, and the card's state service says the same about the
continuation that the worker will do.
"""

from __future__ import annotations

import itertools

import pytest

from app.models import ConnectionIntentDelivery, ThreadInteraction
from app.services.intents.card import WAKE_STATUSES
from app.services.intents.card_state import Continuation, card_state
from app.workers.continuations import KIND, OUTCOMES, _still_wanted

STATUSES = ("todo", "in_progress", "in_review", "done", "cancelled")
ASSIGNEES = ("requester", "other", None)


def _former_retire(delivery, interaction, issue) -> bool:
    """The worker's retire condition as it stood before (without the addressee's write access, checked apart)."""
    requesting = (interaction.payload or {}).get("requestingAgentId") if interaction is not None else None
    return (
        interaction is None
        or interaction.company_id != delivery.company_id
        or interaction.kind != KIND
        or interaction.status not in OUTCOMES
        or issue is None
        or issue.company_id != delivery.company_id
        or issue.is_closed
        or issue.assignee_agent_id is None
        or str(issue.assignee_agent_id) != requesting
    )


@pytest.mark.parametrize(("status", "assignee"), list(itertools.product(STATUSES, ASSIGNEES)))
@pytest.mark.parametrize("resolution", ["accepted", "rejected", "expired"])
def test_the_worker_retires_what_it_used_to(db, make, status, assignee, resolution):
    company = make.company()
    person = make.member(company, "owner")
    requester = make.agent(company, "Builder")
    other = make.agent(company, "Other")
    chosen = {"requester": requester, "other": other, None: None}[assignee]
    issue = make.issue(company, status=status, assignee=chosen, responsible=person)
    interaction = ThreadInteraction(
        company_id=company.id,
        issue_id=issue.id,
        kind=KIND,
        status=resolution,
        title="Connect Honcho",
        payload={"version": 1, "serviceSlug": "honcho", "requestingAgentId": str(requester.id)},
        addressee_user_id=person.id,
        requesting_agent_id=requester.id,
    )
    db.session.add(interaction)
    db.session.flush()
    delivery = ConnectionIntentDelivery(interaction_id=interaction.id, company_id=company.id)
    assert _still_wanted(delivery, interaction, issue) == (not _former_retire(delivery, interaction, issue))
    assert _still_wanted(delivery, None, issue) is False
    assert _still_wanted(delivery, interaction, None) is False

    current = card_state(interaction)
    if resolution == "expired":
        assert current.continuation is None
    elif issue.is_closed:
        assert current.continuation == Continuation.TASK_CLOSED
    elif _still_wanted(delivery, interaction, issue):
        # Wanted and not delivered yet: it wakes the agent now, or once the task is taken up (issue 26 item 11).
        waits = issue.status not in WAKE_STATUSES
        assert current.continuation == (Continuation.WHEN_IN_PROGRESS if waits else Continuation.WAKES)
    else:
        assert current.continuation == Continuation.REASSIGNED
