"""The provider target a gateway call keeps (`app/services/gateway/targets.py`) carries the OAuth access token: a
refresh, and a token coming due while nothing stored has changed, are seen by the next call."""

from __future__ import annotations

import requests

from app.services.connections.endpoint import OAUTH_ACCESS_TOKEN_KEY, stored_secrets
from app.services.oauth import tokens as oauth_tokens
from tests.conftest import count_statements
from tests.services.oauth import test_oauth
from tests.services.oauth.test_oauth import _digest, _expire_access_token, _grant, connected_search_docs

live = test_oauth.live
owner = test_oauth.owner


def test_gateway_calls_send_the_token_stored_now(app, live, owner, make, db, oidc, oauth_mcp, monkeypatch):
    connection_id, gateway_url, headers, name = connected_search_docs(live, owner, make)

    def call(query: str) -> str:
        """Call search_docs; the digest of the token the provider accepted for it."""
        body = {
            "jsonrpc": "2.0",
            "id": 2,
            "method": "tools/call",
            "params": {"name": name, "arguments": {"query": query}},
        }
        answer = requests.post(gateway_url, json=body, headers=headers, timeout=30).json()
        assert answer["result"].get("isError", False) is False, answer
        return oauth_mcp.accepted_token_digests[-1]

    def access_token() -> str:
        return stored_secrets(_grant(db, connection_id))[OAUTH_ACCESS_TOKEN_KEY]

    first = access_token()
    assert call("q1") == call("q2") == _digest(first)

    _expire_access_token(db, connection_id)
    assert call("q3") == _digest(refreshed := access_token()) and refreshed != first
    assert call("q4") == _digest(refreshed)
    with count_statements(db.engine) as statements:
        assert call("q5") == _digest(refreshed)
    # The kept target: the credentials are read once, as ciphertexts with the connection (a build reads them three
    # times: with the connection, for the token's check, and again after a possible refresh).
    assert len([s for s in statements if "grant_secrets" in s]) == 1
    assert oidc.token_requests("refresh_token") == 1

    # Nothing stored changes while the token comes due: the kept target is not used, the token is refreshed.
    monkeypatch.setattr(oauth_tokens, "REFRESH_SKEW_SECONDS", 10**9)
    assert call("q6") == _digest(again := access_token()) and again != refreshed
    assert oidc.token_requests("refresh_token") == 2
    served = [args["query"] for tool, args in oauth_mcp.calls if tool == "search_docs"]
    assert served == ["q1", "q2", "q3", "q4", "q5", "q6"]
