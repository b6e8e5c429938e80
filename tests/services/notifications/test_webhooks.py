"""Signed outbound webhooks (issue 15): Settings -> Webhooks, Standard Webhooks signatures checked by a loopback
receiver with the same library, ids/names/states only, retries with attempts listed, Send again, the SSRF guard."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from sqlalchemy import select, update
from standardwebhooks.webhooks import Webhook

from app.models import NotificationDelivery, WebhookAttempt, WebhookEndpoint
from app.models.base import utcnow
from app.models.notifications import WEBHOOK_EVENTS
from app.services.intents import creation as intents_creation
from app.services.intents import resolution as intents_resolution
from app.services.intents import service as intents_service
from app.services.secrets_box import decrypt
from app.workers import outbox
from tests.conftest import sign_in
from tests.doors import approval_card
from tests.peers.mcp_servers import HONCHO_KEY
from tests.peers.notification_peers import start_webhook_receiver
from tests.services.gateway.test_gateway import connect, world  # noqa: F401  (the gateway's fixture: a run on a task)

SECRET_RE = re.compile(r'id="new-webhook-secret"[^>]*value="(whsec_[^"]+)"|value="(whsec_[^"]+)"')


@pytest.fixture
def receiver(app):
    peer = start_webhook_receiver()
    saved = app.config.get("OUTBOUND_ALLOWED_HOSTS")
    app.config["OUTBOUND_ALLOWED_HOSTS"] = ["127.0.0.1"]
    yield peer
    app.config["OUTBOUND_ALLOWED_HOSTS"] = saved
    peer.stop()


def add_webhook(client, csrf, url, events=WEBHOOK_EVENTS):
    return client.post("/settings/webhooks", data={"csrf_token": csrf, "url": url, "events": list(events)})


def secret_of(response) -> str:
    match = SECRET_RE.search(response.get_data(as_text=True))
    assert match, "the new secret is not on the page"
    return match.group(1) or match.group(2)


def deliveries(db, event=None) -> list[NotificationDelivery]:
    db.session.expire_all()
    query = select(NotificationDelivery).order_by(NotificationDelivery.created_at)
    if event:
        query = query.where(NotificationDelivery.event == event)
    return list(db.session.scalars(query))


def make_due(db, delivery_id):
    db.session.execute(
        update(NotificationDelivery)
        .where(NotificationDelivery.id == delivery_id)
        .values(next_attempt_at=utcnow() - timedelta(seconds=1))
    )
    db.session.commit()


def walk_keys(value):
    if isinstance(value, dict):
        for key, inner in value.items():
            yield key
            yield from walk_keys(inner)
    elif isinstance(value, list):
        for inner in value:
            yield from walk_keys(inner)


def test_the_secret_is_shown_once_and_stored_encrypted(db, world, receiver):  # noqa: F811
    created = add_webhook(world.client, world.csrf, receiver.url)
    assert created.status_code == 201
    secret = secret_of(created)
    [endpoint] = db.session.scalars(select(WebhookEndpoint)).all()
    assert endpoint.secret_ciphertext != secret and secret not in endpoint.secret_ciphertext
    assert decrypt(endpoint.secret_ciphertext) == secret
    page = world.client.get("/settings/webhooks").get_data(as_text=True)
    assert receiver.url in page and secret not in page


def test_every_card_event_arrives_signed_with_ids_names_and_states_only(db, world, receiver):  # noqa: F811
    secret = secret_of(add_webhook(world.client, world.csrf, receiver.url))
    connect(world, "honcho", HONCHO_KEY)
    approval_id = approval_card(world, content="my secret diary")
    answered = world.client.post(
        f"/approvals/{approval_id}/deny", headers={"X-CSRFToken": world.csrf, "HX-Request": "true"}
    )
    assert answered.status_code == 200
    service = intents_service.resolve_service(world.company.id, "notion", world.owner.id, world.agent.id)
    card, _ = intents_creation.create_connection_intent(
        world.issue, world.agent, service, addressee_user_id=world.owner.id, run_id=world.run.id
    )
    db.session.commit()
    intents_resolution.decline_intent(card.id, world.owner.id, "Not now")
    db.session.commit()

    assert outbox.sweep_pending() == {outbox.DELIVERED: 5}
    hooks = receiver.wait_for(5)
    verifier = Webhook(secret)
    bodies = [verifier.verify(hook.body, hook.headers) for hook in hooks]  # raises on a bad signature
    by_type = {body["type"]: body for body in bodies}
    assert sorted(by_type) == [
        "connection.connected",
        "connection_intent.created",
        "connection_intent.resolved",
        "tool_approval.requested",
        "tool_approval.resolved",
    ]
    for hook in hooks:
        assert {"webhook-id", "webhook-timestamp", "webhook-signature"} <= {k.lower() for k in hook.headers}
    ids = {hook.headers["Webhook-Id"] for hook in hooks}
    assert ids == {str(d.id) for d in deliveries(db)}
    requested = by_type["tool_approval.requested"]["data"]
    assert requested["interactionId"] == approval_id and requested["tool"] == "save_memory"
    assert requested["issueIdentifier"] == world.issue.identifier and requested["agentName"] == "Builder"
    assert by_type["tool_approval.resolved"]["data"]["outcome"] == "denied"
    resolved = by_type["connection_intent.resolved"]["data"]
    assert resolved["outcome"] == "declined" and resolved["resolvedByUserId"] == str(world.owner.id)
    assert by_type["connection_intent.created"]["data"]["service"] == "notion"
    everything = json.dumps(bodies)
    assert HONCHO_KEY not in everything and "my secret diary" not in everything
    assert "http://" not in everything and "https://" not in everything
    assert not {
        k for k in walk_keys(bodies) if "url" in k.lower() or "secret" in k.lower() or k == "arguments"
    }
    attempts = db.session.scalars(select(WebhookAttempt)).all()
    assert len(attempts) == 5 and {a.status_code for a in attempts} == {200}
    assert outbox.sweep_pending() == {}


def test_a_failing_receiver_is_retried_attempts_are_listed_and_send_again_redelivers(
    db,
    world,  # noqa: F811
    receiver,
):
    receiver.statuses[:] = [500]
    secret = secret_of(add_webhook(world.client, world.csrf, receiver.url, ["connection.connected"]))
    connect(world, "honcho", HONCHO_KEY)
    assert outbox.sweep_pending() == {outbox.FAILED: 1}
    [delivery] = deliveries(db)
    assert (
        delivery.attempts == 1
        and delivery.last_error == "The receiver answered HTTP 500 (Internal Server Error)."
        and delivery.delivered_at is None
    )
    page = world.client.get("/settings/webhooks").get_data(as_text=True)
    assert "HTTP 500" in page and "Failing" in page and f"/deliveries/{delivery.id}/send-again" in page
    make_due(db, delivery.id)
    assert outbox.sweep_pending() == {outbox.DELIVERED: 1}
    page = world.client.get("/settings/webhooks").get_data(as_text=True)
    assert "HTTP 200" in page and "Delivered" in page
    again = world.client.post(
        f"/settings/webhooks/deliveries/{delivery.id}/send-again", data={"csrf_token": world.csrf}
    )
    assert again.status_code == 303
    assert outbox.sweep_pending() == {outbox.DELIVERED: 1}
    hooks = receiver.wait_for(3)
    assert len({hook.headers["Webhook-Id"] for hook in hooks}) == 1  # one message, sent again on request
    assert Webhook(secret).verify(hooks[-1].body, hooks[-1].headers)["type"] == "connection.connected"
    assert len(db.session.scalars(select(WebhookAttempt)).all()) == 3


def test_urls_that_reach_the_servers_network_are_refused(app, db, world):  # noqa: F811
    refused = add_webhook(world.client, world.csrf, "http://127.0.0.1:9/hooks")
    assert refused.status_code == 422 and "private or local address" in refused.get_data(as_text=True)
    assert db.session.scalars(select(WebhookEndpoint)).all() == []


def test_a_url_refused_at_send_time_is_recorded_and_not_called(app, db, world, receiver):  # noqa: F811
    add_webhook(world.client, world.csrf, receiver.url, ["connection.connected"])
    connect(world, "honcho", HONCHO_KEY)
    app.config["OUTBOUND_ALLOWED_HOSTS"] = []  # the operator withdrew the loopback allowance
    assert outbox.sweep_pending() == {outbox.FAILED: 1}
    [attempt] = db.session.scalars(select(WebhookAttempt)).all()
    assert attempt.status_code is None and "private or local address" in attempt.error
    assert receiver.requests == []


def test_only_connection_managers_see_webhooks(app, db, world, make):  # noqa: F811
    member = make.member(world.company, "member")
    other = app.test_client()
    csrf = sign_in(other, member)
    assert other.get("/settings/webhooks").status_code == 403
    assert add_webhook(other, csrf, "https://example.com/hooks").status_code == 403
    assert "/settings/webhooks" not in other.get("/inbox").get_data(as_text=True)
    assert "/settings/webhooks" in world.client.get("/inbox").get_data(as_text=True)
