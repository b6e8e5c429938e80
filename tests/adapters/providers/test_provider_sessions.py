"""Pooled provider sessions (`session_pool`): one handshake for many calls, per credential, recovering once.

Counted, never timed: the peer records every HTTP request it sees (`RequestRecord`) and every tool call it ran.
"""

from __future__ import annotations

import threading

import pytest

from app.adapters.providers import mcp_client, session_pool
from app.adapters.providers.call_control import CallControl, ProviderCancelled
from app.adapters.providers.errors import ProviderAuthRejected
from tests.peers.mcp_servers import NOTES_KEY, start_frozen_server, start_notes_server

HEADERS = {"Authorization": f"Bearer {NOTES_KEY}"}


def _posts(server) -> list:
    return [request for request in server.requests if request.method == "POST"]


def _initializes(server) -> int:
    """Each session starts with initialize + initialized; everything else is a call (the peers answer nothing else)."""
    return (len(_posts(server)) - len(server.calls)) // 2


def _get_note(server, headers=HEADERS) -> dict:
    return mcp_client.call_tool(
        server.url, headers=headers, tool_name="get_note", arguments={"note_id": "n1"}
    )


def test_sequential_calls_share_one_session(notes_server):
    for _ in range(5):
        assert _get_note(notes_server)["isError"] is False
    assert len(notes_server.calls) == 5
    assert len(_posts(notes_server)) == 2 + 5  # initialize, initialized, then one POST per call
    assert _initializes(notes_server) == 1


def test_a_stateful_peer_sees_one_initialize_and_no_session_teardown(mcp_server_factory):
    server = mcp_server_factory(start_notes_server, stateless=False)
    for _ in range(4):
        _get_note(server)
    assert len(server.calls) == 4
    assert _initializes(server) == 1
    assert [r.method for r in server.requests].count("DELETE") == 0


def test_different_keys_never_share_a_session(mcp_server_factory):
    server = mcp_server_factory(start_notes_server, required_key=None)
    first, second = {"Authorization": "Bearer one-key-1111"}, {"Authorization": "Bearer two-key-2222"}
    _get_note(server, first)
    _get_note(server, second)
    _get_note(server, first)
    _get_note(server, second)
    assert _initializes(server) == 2
    assert mcp_client._on_loop(_count()) == 2


async def _count() -> int:
    return session_pool.pooled_count()


def test_a_rejected_key_is_not_pooled_and_a_good_key_still_works(notes_server):
    with pytest.raises(ProviderAuthRejected):
        _get_note(notes_server, {"Authorization": "Bearer wrong-key-0000"})
    assert mcp_client._on_loop(_count()) == 0
    _get_note(notes_server)
    assert notes_server.calls == [("get_note", {"note_id": "n1"})]


def test_a_restarted_stateful_peer_is_recovered_with_one_retry(mcp_server_factory):
    server = mcp_server_factory(start_notes_server, stateless=False)
    _get_note(server)
    _get_note(server)
    port = server.port
    server.stop()
    server.reset()
    server.start(port)  # same address, no memory of the session: the reused session id gets 404
    assert _get_note(server)["isError"] is False
    assert server.calls == [("get_note", {"note_id": "n1"})]  # ran once, on the fresh session
    assert _initializes(server) == 1
    _get_note(server)
    assert _initializes(server) == 1  # and that fresh session is the pooled one now


def test_a_restarted_stateless_peer_needs_no_new_session(notes_server):
    _get_note(notes_server)
    port = notes_server.port
    notes_server.stop()
    notes_server.reset()
    notes_server.start(port)
    _get_note(notes_server)
    assert notes_server.calls == [("get_note", {"note_id": "n1"})]


def test_an_outage_evicts_the_session(notes_server):
    _get_note(notes_server)
    notes_server.outage_status = 503
    try:
        with pytest.raises(mcp_client.ProviderUnavailable):
            _get_note(notes_server)
    finally:
        notes_server.outage_status = None
    notes_server.reset()
    _get_note(notes_server)
    assert _initializes(notes_server) == 1  # a fresh session after the outage


def test_a_tool_error_keeps_the_session(notes_server):
    _get_note(notes_server)
    mcp_client.call_tool(
        notes_server.url, headers=HEADERS, tool_name="get_note", arguments={"note_id": "missing"}
    )
    _get_note(notes_server)
    assert _initializes(notes_server) == 1


def test_cancellation_reaches_the_provider_and_the_session_stays(mcp_server_factory):
    server = mcp_server_factory(start_frozen_server)
    ping = dict(tool_name="ping", arguments={})
    mcp_client.call_tool(server.url, headers=HEADERS, **ping)
    control = CallControl()
    outcome: list[BaseException] = []

    def frozen_call():
        try:
            mcp_client.call_tool(
                server.url,
                headers=HEADERS,
                tool_name="wait_for_release",
                arguments={"label": "a"},
                control=control,
            )
        except BaseException as exc:  # noqa: BLE001
            outcome.append(exc)

    caller = threading.Thread(target=frozen_call)
    caller.start()
    _wait_until(lambda: len(server.calls) == 2)
    control.cancel()
    caller.join(10)
    assert not caller.is_alive()
    assert isinstance(outcome[0], ProviderCancelled)
    # The provider was told: notifications/cancelled is one more POST beyond the handshake and the two calls.
    _wait_until(lambda: len(_posts(server)) == 2 + 2 + 1)
    server.release.set()
    mcp_client.call_tool(server.url, headers=HEADERS, **ping)
    assert len(_posts(server)) == 2 + 2 + 1 + 1  # no new handshake: the session outlived the cancellation


def _wait_until(condition, patience: float = 10.0) -> None:
    import time

    deadline = time.monotonic() + patience
    while not condition():
        assert time.monotonic() < deadline, "gave up waiting"
        time.sleep(0.01)


def test_a_stopped_peer_is_reported_unreachable_then_recovered(notes_server):
    _get_note(notes_server)
    port = notes_server.port
    notes_server.stop()
    try:
        with pytest.raises(mcp_client.ProviderUnavailable, match="connection refused"):
            _get_note(notes_server)  # the reused session's transport died; the one retry could not connect
        assert mcp_client._on_loop(_count()) == 0
    finally:
        notes_server.reset()
        notes_server.start(port)
    _get_note(notes_server)
    assert notes_server.calls == [("get_note", {"note_id": "n1"})]
    assert _initializes(notes_server) == 1
