"""`connection_request` for a catalog service reads only what its answer needs: the agent's eligible connections
when one is ready; else the app, its connections and the run's pending card in one statement, and the task lock
only when a card may have to be created."""

from __future__ import annotations

import uuid

from sqlalchemy import select

from app.models import ThreadInteraction
from tests.conftest import count_statements
from tests.doors import request_service
from tests.services.runtime import test_runtime_rest
from tests.services.runtime.test_runtime_rest import connect, honcho_body

providers = test_runtime_rest.providers  # the shared fixture


def _locks(statements: list[str]) -> list[str]:
    """The task lock's statements (`FOR UPDATE` on PostgreSQL; SQLite, which serializes writers, drops it)."""
    return [s for s in statements if " ".join(s.split()).startswith("SELECT issues.id FROM issues WHERE")]


def test_a_repeat_request_answers_from_its_pending_card_without_the_task_lock(make, client, db, world):
    with count_statements(db.engine) as first_statements:
        first = request_service(client, world.token, "github")
    assert first.status_code == 200 and first.json["state"] == "needs_user_action"
    assert _locks(first_statements) != []  # creating the card locks the task

    with count_statements(db.engine) as repeat:
        again = request_service(client, world.token, "github")
    assert again.status_code == 200 and again.json == first.json
    # The address's shared count of failed authentications (issue 31), the run and its task, the agent's eligible
    # connections of the app, then the app, its connections and the card pending under the run's key together.
    assert len(repeat) == 4 and "throttle_hits" in repeat[0], repeat
    assert _locks(repeat) == []

    # Another run of the agent finds no card under its own key: the lock, the decline check, and the card
    # pending for the agent, addressed to the same person, is reused.
    _run2, token2 = make.run(world.agent, world.issue)
    with count_statements(db.engine) as other_run:
        reused = request_service(client, token2, "github")
    assert reused.json["interactionId"] == first.json["interactionId"]
    assert _locks(other_run) != []
    cards = db.session.scalars(select(ThreadInteraction).where(ThreadInteraction.issue_id == world.issue.id))
    assert [c.status for c in cards] == ["pending"]


def test_a_ready_catalog_service_is_answered_from_the_eligible_connections(app, client, db, world, providers):
    created = connect(app, world.owner, world.company, honcho_body())
    assert request_service(client, world.token, "honcho").json["state"] == "ready"
    with count_statements(db.engine) as statements:
        ready = request_service(client, world.token, "honcho")
    assert ready.json["state"] == "ready" and ready.json["connectionId"] == created["id"]
    # The address's shared count of failed authentications (issue 31), the run, then the eligible connections with
    # their grants and the responsible person's membership.
    assert len(statements) == 3 and "throttle_hits" in statements[0], statements
    assert not any("UNION" in s.upper() for s in statements)


def test_someone_elses_connection_of_the_service_still_leads_to_a_card(
    app, client, db, make, world, providers
):
    other = make.member(world.company, "member")
    connect(app, other, world.company, honcho_body("user"))
    answer = request_service(client, world.token, "honcho")
    assert answer.status_code == 200
    assert answer.json["state"] == "needs_user_action" and answer.json["connectionId"] is None
    card = db.session.get(ThreadInteraction, uuid.UUID(answer.json["interactionId"]))
    assert card.status == "pending" and card.payload["serviceSlug"] == "honcho"
