"""Confirm what is destroyed; say what happened (issue 27 item 3), against a real loopback webhook receiver.

Deleting a webhook asks first and says how much history goes; "Send test event" delivers a signed `webhook.test` to
that endpoint alone; attempts read as sentences; disabling a connection is `connection.disabled`, not
`connection.disconnected`; a finished setup says it is connected; status labels do not contradict each other."""

from __future__ import annotations

import re
import socket
from html import unescape

import pytest
from sqlalchemy import select
from standardwebhooks.webhooks import Webhook

from app.extensions import db
from app.models import WebhookEndpoint
from app.services.notifications.webhooks import attempt_sentence, post
from app.services.secrets_box import encrypt
from app.workers import outbox
from tests.services.gateway.test_gateway import world  # noqa: F401  (the gateway's fixture: a run on a task)
from tests.services.notifications.test_webhooks import add_webhook, deliveries, receiver, secret_of  # noqa: F401


def _text(markup: str) -> str:
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", markup)).split())


def _form(world):  # noqa: F811
    return {"csrf_token": world.csrf}


def test_deleting_a_webhook_asks_first_and_says_what_goes(world, receiver):  # noqa: F811
    add_webhook(world.client, world.csrf, receiver.url)
    endpoint = db.session.scalars(select(WebhookEndpoint)).one()
    page = world.client.get("/settings/webhooks").get_data(as_text=True)
    # Delete is a link to a confirmation page, styled as danger; no one-click delete form is left on the list.
    assert re.search(rf'<a href="/settings/webhooks/{endpoint.id}/delete" class="action danger"', page)
    assert f'action="/settings/webhooks/{endpoint.id}/delete"' not in page

    assert world.client.post(f"/settings/webhooks/{endpoint.id}/test", data=_form(world)).status_code == 303
    assert outbox.sweep_pending() == {outbox.DELIVERED: 1}
    confirm_page = world.client.get(f"/settings/webhooks/{endpoint.id}/delete").get_data(as_text=True)
    assert f"<h1>Delete the webhook to <code>{receiver.url}</code>?</h1>" in confirm_page
    confirm = _text(confirm_page)
    assert (
        "Switchboard stops sending events to this URL at once. Its delivery history (1 delivery with their "
        "attempts) is deleted too. This cannot be undone; to pause it instead, disable it." in confirm
    )
    gone = world.client.post(f"/settings/webhooks/{endpoint.id}/delete", data=_form(world))
    assert gone.status_code == 303 and gone.headers["Location"].endswith("done=deleted")
    assert "The webhook is deleted, with its delivery history." in world.client.get(
        gone.headers["Location"]
    ).get_data(as_text=True)
    assert db.session.scalars(select(WebhookEndpoint)).all() == []


def test_send_test_event_reaches_only_that_receiver_signed(world, receiver):  # noqa: F811
    secret = secret_of(add_webhook(world.client, world.csrf, receiver.url, events=["connection.connected"]))
    endpoint = db.session.scalars(select(WebhookEndpoint)).one()
    sent = world.client.post(f"/settings/webhooks/{endpoint.id}/test", data=_form(world))
    assert sent.status_code == 303 and sent.headers["Location"].endswith(f"done=test#webhook-{endpoint.id}")
    assert [d.event for d in deliveries(db)] == ["webhook.test"]
    assert outbox.sweep_pending() == {outbox.DELIVERED: 1}
    [hook] = receiver.wait_for(1)
    body = Webhook(secret).verify(hook.body, hook.headers)
    assert body["type"] == "webhook.test"
    assert body["data"] == {
        "endpointId": str(endpoint.id),
        "sentByUserId": str(world.owner.id),
        "message": "A test event from Switchboard.",
    }
    page = _text(world.client.get(sent.headers["Location"]).get_data(as_text=True))
    assert "A test event is queued. Its attempt shows in the webhook’s deliveries in a few seconds." in page
    assert "Delivered (HTTP 200)." in page

    world.client.post(f"/settings/webhooks/{endpoint.id}/disable", data=_form(world))
    refused = world.client.post(f"/settings/webhooks/{endpoint.id}/test", data=_form(world))
    assert refused.status_code == 409
    assert "Enable the webhook to send it a test event." in refused.get_data(as_text=True)


def test_a_refused_connection_reads_as_a_sentence(app, db):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # closed again below: nothing listens there
    saved = app.config.get("OUTBOUND_ALLOWED_HOSTS")
    app.config["OUTBOUND_ALLOWED_HOSTS"] = ["127.0.0.1"]
    try:
        outcome = post(f"http://127.0.0.1:{port}/hook", encrypt("whsec_" + "A" * 32), "msg_1", {"type": "x"})
    finally:
        app.config["OUTBOUND_ALLOWED_HOSTS"] = saved
    assert outcome.ok is False and outcome.status_code is None
    assert outcome.error == "Could not connect: the receiver refused the connection."
    # Attempts stored before this wording read the same way.
    assert (
        attempt_sentence(None, "ConnectError: [Errno 111] Connection refused")
        == "Could not connect: the receiver refused the connection."
    )
    assert attempt_sentence(503, None) == "The receiver answered HTTP 503 (Service Unavailable)."
    assert attempt_sentence(None, "RemoteProtocolError: Server disconnected") == (
        "The connection to the receiver broke before it answered."
    )


@pytest.mark.parametrize("enabled_after", [False, True])
def test_disabling_is_not_disconnecting(make, world, receiver, enabled_after):  # noqa: F811
    add_webhook(
        world.client,
        world.csrf,
        receiver.url,
        events=["connection.disabled", "connection.enabled", "connection.disconnected"],
    )
    connection = make.connection(world.company, slug="honcho", grants=[("organization", None)])
    off = world.client.post(f"/apps/{connection.id}/disable", data={**_form(world), "back": "permissions"})
    assert off.status_code == 303
    if enabled_after:
        world.client.post(f"/apps/{connection.id}/enable", data={**_form(world), "back": "permissions"})
    expected = ["connection.disabled", "connection.enabled"] if enabled_after else ["connection.disabled"]
    assert [d.event for d in deliveries(db)] == expected


def test_setup_says_connected_and_labels_agree(make, world):  # noqa: F811
    connection = make.connection(world.company, slug="honcho", grants=[("organization", None)])
    page = _text(world.client.get(f"/apps/{connection.id}/permissions?done=connected").get_data(as_text=True))
    assert "Honcho is connected. The agents chosen below can use its tools now." in page
    assert "Active · Enabled · Healthy · Replace the key" in page
    assert not re.search(
        r">(Reconnect|Sign in again)<",
        world.client.get(f"/apps/{connection.id}/permissions").get_data(as_text=True),
    )
    quiet = _text(world.client.get(f"/apps/{connection.id}/permissions").get_data(as_text=True))
    assert "is connected." not in quiet

    connection.status, connection.enabled = "disconnected", True
    db.session.commit()
    page = _text(world.client.get(f"/apps/{connection.id}/permissions?done=connected").get_data(as_text=True))
    assert "is connected." not in page
    assert "Disconnected · Healthy · Reconnect" in page and "Enabled" not in page.split("Permissions")[0]
    listing = _text(world.client.get("/connections").get_data(as_text=True))
    assert re.search(r"Disconnected — Healthy", listing), listing
