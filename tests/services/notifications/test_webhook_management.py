"""Managing a webhook from Settings -> Webhooks (issue 15's leftover, issue 16): edit its URL and events, disable and
enable it, rotate its signing secret (shown once). Each is a CSRF-checked form, recorded as activity, and allowed
only to connection managers of the same company. Deliveries go to a loopback receiver and are verified with the
`standardwebhooks` library, as in tests/test_webhooks.py."""

from __future__ import annotations

import pytest
from sqlalchemy import select
from standardwebhooks.webhooks import Webhook, WebhookVerificationError

from app.models import ActivityLog, WebhookEndpoint
from app.models.notifications import WEBHOOK_EVENTS
from app.services.secrets_box import decrypt
from app.workers import outbox
from tests.conftest import sign_in
from tests.peers.mcp_servers import HONCHO_KEY
from tests.peers.notification_peers import start_webhook_receiver
from tests.services.gateway.test_gateway import connect, world  # noqa: F401  (the gateway's fixture: a run on a task)
from tests.services.notifications.test_webhooks import add_webhook, deliveries, make_due, receiver, secret_of  # noqa: F401

CONNECTED = "connection.connected"


@pytest.fixture
def second_receiver(receiver):  # noqa: F811  (after `receiver`: loopback is allowed)
    peer = start_webhook_receiver()
    yield peer
    peer.stop()


def only_endpoint(db) -> WebhookEndpoint:
    db.session.expire_all()
    [endpoint] = db.session.scalars(select(WebhookEndpoint)).all()
    return endpoint


def activity(db, endpoint) -> list[tuple[str, dict]]:
    db.session.expire_all()
    rows = db.session.scalars(
        select(ActivityLog)
        .where(ActivityLog.entity_type == "webhook_endpoint", ActivityLog.entity_id == str(endpoint.id))
        .order_by(ActivityLog.created_at, ActivityLog.id)
    )
    return [(row.action, row.details) for row in rows]


def post(world, path, **data):  # noqa: F811
    return world.client.post(path, data={"csrf_token": world.csrf, **data})


def an_event(world, n: int) -> None:  # noqa: F811
    connect(world, "honcho", HONCHO_KEY, name=f"Honcho {n}")


def test_edit_changes_the_url_and_the_events(db, world, receiver, second_receiver):  # noqa: F811
    secret = secret_of(add_webhook(world.client, world.csrf, receiver.url))
    endpoint = only_endpoint(db)
    form = world.client.get(f"/settings/webhooks/{endpoint.id}/edit")
    assert form.status_code == 200
    html = form.get_data(as_text=True)
    assert f'value="{receiver.url}"' in html and secret not in html

    refused = post(
        world, f"/settings/webhooks/{endpoint.id}/edit", url="ftp://example.com/x", events=[CONNECTED]
    )
    assert refused.status_code == 422
    assert only_endpoint(db).url == receiver.url

    saved = post(
        world,
        f"/settings/webhooks/{endpoint.id}/edit",
        url=second_receiver.url,
        events=[CONNECTED, "connection.disconnected"],
    )
    assert saved.status_code == 303
    assert (
        world.client.get(saved.headers["Location"]).get_data(as_text=True).count("The webhook is saved.") == 1
    )
    endpoint = only_endpoint(db)
    assert (endpoint.url, endpoint.events) == (second_receiver.url, [CONNECTED, "connection.disconnected"])

    an_event(world, 1)  # connection.connected: still chosen
    assert outbox.sweep_pending() == {outbox.DELIVERED: 1}
    [hook] = second_receiver.wait_for(1)
    assert Webhook(secret).verify(hook.body, hook.headers)["type"] == CONNECTED  # the secret is unchanged
    assert receiver.requests == []
    assert [d.event for d in deliveries(db)] == [CONNECTED]
    host = "127.0.0.1"
    assert activity(db, endpoint) == [
        ("webhook.created", {"host": host, "events": list(WEBHOOK_EVENTS)}),
        (
            "webhook.updated",
            {"host": host, "fields": ["url", "events"], "events": [CONNECTED, "connection.disconnected"]},
        ),
    ]


def test_a_disabled_webhook_is_sent_nothing_until_enabled(db, world, receiver):  # noqa: F811
    secret = secret_of(add_webhook(world.client, world.csrf, receiver.url, [CONNECTED]))
    endpoint = only_endpoint(db)
    an_event(world, 1)  # queued before it is disabled

    disabled = post(world, f"/settings/webhooks/{endpoint.id}/disable")
    assert disabled.status_code == 303
    page = world.client.get(disabled.headers["Location"]).get_data(as_text=True)
    assert "The webhook is disabled. Nothing is sent to it until it is enabled again." in page
    assert ">Disabled<" in page and ">Enable<" in page
    assert only_endpoint(db).enabled is False
    an_event(world, 2)  # not queued at all
    assert outbox.sweep_pending() == {outbox.GAVE_UP: 1}  # the one queued before: never sent
    [queued] = deliveries(db)
    assert queued.last_error == "The webhook was removed or disabled" and queued.gave_up_at is not None
    assert receiver.requests == []

    enabled = post(world, f"/settings/webhooks/{endpoint.id}/enable")
    assert enabled.status_code == 303
    assert "The webhook is enabled again." in world.client.get(enabled.headers["Location"]).get_data(
        as_text=True
    )
    an_event(world, 3)
    assert outbox.sweep_pending() == {outbox.DELIVERED: 1}
    [hook] = receiver.wait_for(1)
    assert Webhook(secret).verify(hook.body, hook.headers)["data"]["connectionName"] == "Honcho 3"
    assert [action for action, _ in activity(db, endpoint)] == [
        "webhook.created",
        "webhook.disabled",
        "webhook.enabled",
    ]


def test_a_rotated_secret_is_shown_once_and_signs_every_later_attempt(db, world, receiver):  # noqa: F811
    old = secret_of(add_webhook(world.client, world.csrf, receiver.url, [CONNECTED]))
    endpoint = only_endpoint(db)
    receiver.statuses[:] = [500]
    an_event(world, 1)
    assert outbox.sweep_pending() == {outbox.FAILED: 1}  # a retry is due later, signed then

    rotated = post(world, f"/settings/webhooks/{endpoint.id}/rotate")
    assert rotated.status_code == 200
    new = secret_of(rotated)
    assert new != old and new.startswith("whsec_")
    assert "The signing secret of" in rotated.get_data(as_text=True)
    assert decrypt(only_endpoint(db).secret_ciphertext) == new
    assert new not in world.client.get("/settings/webhooks").get_data(as_text=True)  # shown once

    [retry] = deliveries(db)
    make_due(db, retry.id)
    an_event(world, 2)
    assert outbox.sweep_pending() == {outbox.DELIVERED: 2}
    hooks = receiver.wait_for(3)
    for hook in hooks[1:]:
        assert Webhook(new).verify(hook.body, hook.headers)["type"] == CONNECTED
        with pytest.raises(WebhookVerificationError):
            Webhook(old).verify(hook.body, hook.headers)
    assert Webhook(old).verify(hooks[0].body, hooks[0].headers)  # the attempt before the rotation
    assert activity(db, endpoint)[-1] == ("webhook.secret_rotated", {"host": "127.0.0.1"})


def test_every_change_needs_the_form_token(db, world, receiver):  # noqa: F811
    secret = secret_of(add_webhook(world.client, world.csrf, receiver.url, [CONNECTED]))
    endpoint = only_endpoint(db)
    for path, data in (
        ("edit", {"url": "https://example.com/x", "events": [CONNECTED]}),
        ("disable", {}),
        ("rotate", {}),
    ):
        answer = world.client.post(f"/settings/webhooks/{endpoint.id}/{path}", data=data)
        assert answer.status_code in (400, 422), (path, answer.status_code)
    endpoint = only_endpoint(db)
    assert (endpoint.url, endpoint.enabled, decrypt(endpoint.secret_ciphertext)) == (
        receiver.url,
        True,
        secret,
    )
    assert [action for action, _ in activity(db, endpoint)] == ["webhook.created"]


def test_only_managers_of_the_same_company_change_a_webhook(app, db, world, make, receiver):  # noqa: F811
    secret_of(add_webhook(world.client, world.csrf, receiver.url, [CONNECTED]))
    endpoint = only_endpoint(db)
    routes = [
        ("get", "edit", {}),
        ("post", "edit", {"url": "https://example.com/x", "events": [CONNECTED]}),
        ("post", "disable", {}),
        ("post", "enable", {}),
        ("post", "rotate", {}),
    ]
    member = app.test_client()
    member_csrf = sign_in(member, make.member(world.company, "member"))
    outsider = app.test_client()
    other_company = make.company("Elsewhere")
    outsider_csrf = sign_in(outsider, make.member(other_company, "owner"))
    for client, csrf, status in ((member, member_csrf, 403), (outsider, outsider_csrf, 404)):
        for method, path, data in routes:
            url = f"/settings/webhooks/{endpoint.id}/{path}"
            answer = (
                client.get(url) if method == "get" else client.post(url, data={"csrf_token": csrf, **data})
            )
            assert answer.status_code == status, (method, path, answer.status_code)
    endpoint = only_endpoint(db)
    assert (endpoint.url, endpoint.enabled) == (receiver.url, True)
    assert [action for action, _ in activity(db, endpoint)] == ["webhook.created"]


def test_webhook_changes_read_as_sentences_on_the_activity_page(db, world, receiver):  # noqa: F811
    secret_of(add_webhook(world.client, world.csrf, receiver.url, [CONNECTED]))
    endpoint = only_endpoint(db)
    post(
        world,
        f"/settings/webhooks/{endpoint.id}/edit",
        url=receiver.url,
        events=[CONNECTED, "connection.disconnected"],
    )
    post(world, f"/settings/webhooks/{endpoint.id}/disable")
    post(world, f"/settings/webhooks/{endpoint.id}/enable")
    post(world, f"/settings/webhooks/{endpoint.id}/rotate")
    post(world, f"/settings/webhooks/{endpoint.id}/delete")
    page = world.client.get("/activity").get_data(as_text=True)
    who = world.owner.name
    for sentence in (
        f"{who} added a webhook",
        f"{who} changed a webhook",
        f"{who} disabled a webhook",
        f"{who} enabled a webhook again",
        f"{who} rotated a webhook&#39;s signing secret",
        f"{who} deleted a webhook",
    ):
        assert sentence in page, sentence
