"""Notifications (issue 15) through the real OAuth refresh: a refresh the authorization server rejects mails the
connection's owner (the connection needs reauthorization)."""

from __future__ import annotations

import pytest

from app.services.connections.endpoint import OAUTH_REFRESH_TOKEN_KEY
from app.services.connections.setup import _store_secret
from app.services.oauth.errors import ReauthorizationRequired
from app.services.oauth.tokens import get_valid_access_token
from app.workers import outbox
from tests.services.notifications.test_notifications import deliveries, smtp  # noqa: F401  (the loopback SMTP peer)
from tests.services.oauth.test_oauth import Browser, _connection, _expire_access_token, _grant, live, owner  # noqa: F401


def test_a_rejected_refresh_mails_the_connection_owner(app, db, smtp, live, owner):  # noqa: F811
    company, user = owner
    connection_id = Browser(live, user).connect(company)
    connected_mail = deliveries(db)
    assert connected_mail == []  # connecting mails nobody
    grant = _expire_access_token(db, connection_id)
    _store_secret(grant, OAUTH_REFRESH_TOKEN_KEY, "revoked-or-unknown-refresh-token")
    db.session.commit()
    with pytest.raises(ReauthorizationRequired):
        get_valid_access_token(_connection(db, connection_id), _grant(db, connection_id))
    [mail] = deliveries(db)
    assert (mail.event, mail.recipient_user_id) == ("connection.needs_reauthorization", user.id)
    assert outbox.sweep_pending() == {outbox.DELIVERED: 1}
    [(envelope, message)] = smtp.wait_for(1)
    assert envelope.rcpt_tos == [user.email]
    name = _connection(db, connection_id).name
    assert message["Subject"] == f"{name} needs you to sign in again"
    assert f"/apps/{connection_id}/permissions" in message.get_content()
