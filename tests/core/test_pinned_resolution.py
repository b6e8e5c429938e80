"""DNS rebinding: every outbound client connects to the address the guard just checked, never to a second answer.

The resolver is the operating system's `socket.getaddrinfo`, replaced inside each test only (not our code): for the
name `rebind.test` it answers a public address first and the loopback address afterwards, as a hostile DNS server
with a zero TTL would. The internal listener is a real server on loopback that records what reaches it; with the
resolution pinned, nothing does. A control shows the same listener is reached when the operator allow-lists the name.
"""

from __future__ import annotations

import socket
from contextlib import contextmanager

import pytest

from app.adapters.providers import mcp_client
from app.core.errors import ProviderRefused
from app.core.net_guard import check_outbound_url
from app.services.notifications import webhooks
from app.services.oauth import discovery
from app.services.oauth.callback import _account_label
from app.services.oauth.clients import ClientConfig, _oauth_session, register_client
from app.services.secrets_box import encrypt
from tests.conftest import serving

NAME = "rebind.test"
PUBLIC = "93.184.215.14"


@contextmanager
def internal_listener():
    """The internal service a rebinding attacker wants to reach: records every request."""
    seen: list[str] = []

    def wsgi(environ, start_response):
        seen.append(f"{environ['REQUEST_METHOD']} {environ['PATH_INFO']}")
        start_response("200 OK", [("Content-Type", "application/json")])
        return [
            b'{"authorization_servers": ["http://127.0.0.1/"], "access_token": "x", "token_type": "bearer"}'
        ]

    with serving(wsgi) as base_url:
        yield int(base_url.rsplit(":", 1)[1]), seen


@pytest.fixture
def rebinding(monkeypatch):
    """The OS resolver for `rebind.test`: public on the first question, 127.0.0.1 on every later one."""
    real = socket.getaddrinfo
    asked: list[str] = []

    def getaddrinfo(host, port, *args, **kwargs):
        if host != NAME:
            return real(host, port, *args, **kwargs)
        address = PUBLIC if not asked else "127.0.0.1"
        asked.append(address)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (address, int(port or 80)))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return asked


def _client(port: int, allowed: frozenset[str]) -> ClientConfig:
    server = discovery.AuthServer(
        issuer=f"http://{NAME}:{port}",
        authorization_endpoint=f"http://{NAME}:{port}/auth",
        token_endpoint=f"http://{NAME}:{port}/token",
        registration_endpoint=f"http://{NAME}:{port}/reg",
    )
    return ClientConfig("c", "s", "client_secret_post", server, "registration", allowed_hosts=allowed)


def _discovery(port, allowed):
    discovery.discover_authorization_server(f"http://{NAME}:{port}/mcp", "mcp_remote", allowed)


def _metadata(port, allowed):
    discovery.fetch_server_metadata(f"http://{NAME}:{port}", allowed)


def _registration(port, allowed, app):
    from app.catalog.loader import get_app

    register_client(_client(port, allowed).server, get_app("github"))


def _token(port, allowed):
    _oauth_session(_client(port, allowed)).fetch_token(
        f"http://{NAME}:{port}/token", grant_type="client_credentials", timeout=5
    )


def _userinfo(port, allowed):
    _account_label(f"http://{NAME}:{port}/userinfo", "token", allowed)


def _webhook(port, allowed):
    outcome = webhooks.post(f"http://{NAME}:{port}/hook", encrypt(webhooks.new_secret()), "msg_1", {"a": 1})
    if not outcome.ok:
        raise ProviderRefused(outcome.error or "failed")


def _mcp(port, allowed):
    mcp_client.list_tools(f"http://{NAME}:{port}/mcp", headers={}, timeout=5, guard=allowed)


CLIENTS = {
    "oauth discovery": _discovery,
    "oauth metadata": _metadata,
    "oauth registration": _registration,
    "oauth token (Authlib)": _token,
    "oauth userinfo": _userinfo,
    "webhook": _webhook,
    "mcp": _mcp,
}


def _run(name, port, allowed, app):
    """The flow's earlier check of the URL (discovery checks every endpoint the metadata names; a webhook or MCP URL
    is checked when saved), then the client's own connection."""
    call = CLIENTS[name]
    assert check_outbound_url(f"http://{NAME}:{port}/")  # the check sees the public answer
    try:
        if name == "oauth registration":
            call(port, allowed, app)
        else:
            call(port, allowed)
    except (TypeError, AttributeError, NameError, KeyError):
        raise  # a mistake in the test, not a refusal
    except Exception:  # noqa: BLE001, S110 (each client words its refusal its own way; what reached the peer counts)
        pass


@pytest.mark.parametrize("name", list(CLIENTS))
def test_a_name_that_rebinds_after_the_check_reaches_nothing(app, db, rebinding, name):
    with app.app_context(), internal_listener() as (port, seen):
        _run(name, port, frozenset(), app)
        assert rebinding[0] == PUBLIC, name
        # The connection asked the resolver itself, got the internal answer and refused it.
        assert "127.0.0.1" in rebinding[1:], name
        assert seen == [], name


@pytest.mark.parametrize("name", ["oauth discovery", "oauth token (Authlib)", "webhook"])
def test_the_control_an_allow_listed_name_reaches_the_listener(app, db, rebinding, monkeypatch, name):
    monkeypatch.setitem(app.config, "OUTBOUND_ALLOWED_HOSTS", [NAME])
    rebinding.append(PUBLIC)  # every answer is the internal one from here
    with app.app_context(), internal_listener() as (port, seen):
        _run(name, port, frozenset({NAME}), app)
        assert seen, name
