"""Gateway rate limits and the loop breaker (issue 28 item 3), against the real notes MCP peer on loopback.

Limits are set on the connection's Permissions page (the board form), counted in the database, and answered as
isError results with `retryAfterSeconds`; refusals are counted on the page.
"""

from __future__ import annotations

import re
import time

from sqlalchemy import update

from app.models import GatewayCallCounter
from app.services.gateway import limits
from tests.conftest import sign_in
from tests.doors import refusal_fields
from tests.peers.mcp_servers import HONCHO_KEY, NOTES_KEY
from tests.services.gateway import test_gateway
from tests.services.gateway.test_gateway import connect, patch, rpc

world = test_gateway.world


def set_limits(world, connection_id, *, htmx=False, client=None, csrf=None, **figures):
    """Post the Call limits form with these figures (`read_run_minute=3`, `loop_repeats=2`); the others empty."""
    form = {name: "" for name in limits.field_names()}
    form.update({name.replace("_", "-"): str(value) for name, value in figures.items()})
    headers = {"X-CSRFToken": csrf or world.csrf, **({"HX-Request": "true"} if htmx else {})}
    return (client or world.client).post(f"/apps/{connection_id}/limits", data=form, headers=headers)


def call(world, name="notes-1__get_note", token=None, **arguments):
    arguments = arguments or {"note_id": "n1"}
    response = rpc(world.client, token or world.token, "tools/call", {"name": name, "arguments": arguments})
    assert response.status_code == 200 and "result" in response.json, response.json
    return response.json["result"]


def notes(world):
    connection = connect(world, "github", NOTES_KEY, name="Notes 1")
    patch(world, connection["id"], {"toolPolicies": {"create_note": "allow"}})
    return connection


def call_control(server, tool):
    return len([c for c in server.calls if c[0] == tool])


def refusals_on_page(world, connection_id) -> str:
    page = world.client.get(f"/apps/{connection_id}/permissions").get_data(as_text=True)
    return re.search(r'id="call-limit-refusals" data-refused="(\d+)"', page).group(1)


def test_write_tools_have_lower_defaults_in_every_scope():
    defaults = limits.CallLimits.of(None)
    for scope in limits.SCOPES:
        for window in limits.WINDOWS:
            read, write = defaults.limit("read", scope, window), defaults.limit("write", scope, window)
            assert read is not None and write is not None and write < read, (scope, window)
    assert defaults.loop_repeats == 10 and defaults.loop_seconds == 60


def test_a_run_over_its_limit_is_refused_with_the_time_to_wait(app, db, make, world, notes_server):
    connection = notes(world)
    assert set_limits(world, connection["id"], read_run_minute=3).status_code == 303
    for _ in range(3):
        assert call(world)["isError"] is False
    refused = call(world)
    fields = refusal_fields(refused)
    wait = fields["retryAfterSeconds"]
    assert refused["isError"] is True and fields["reasonCode"] == "rate_limited" and 1 <= wait <= 60
    assert fields["message"] == (
        f"Notes 1 allows 3 calls per minute in one run. This call was not run; try again in {wait} seconds."
    )
    assert fields["limit"] == {"scope": "run", "window": "minute", "kind": "read", "calls": 3}
    # get_note declares an output schema: the refusal carries no structuredContent (`results.for_the_tool`).
    assert "structuredContent" not in refused
    assert call_control(notes_server, "get_note") == 3

    # A re-initialize is a new MCP session of the same run: the count is the run's, kept in the database.
    init = rpc(
        world.client,
        world.token,
        "initialize",
        {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "again", "version": "1"},
        },
    )
    assert init.status_code == 200 and "result" in init.json
    assert refusal_fields(call(world))["reasonCode"] == "rate_limited"
    assert call_control(notes_server, "get_note") == 3

    # Another run of the agent has a count of its own.
    _run, other_token = make.run(world.agent, world.issue)
    assert call(world, token=other_token)["isError"] is False
    assert refusals_on_page(world, connection["id"]) == "2"


def test_a_refused_call_uses_no_quota(app, db, world, notes_server):
    connection = notes(world)
    set_limits(world, connection["id"], read_run_minute=2, read_run_day=3)
    assert [call(world)["isError"] for _ in range(2)] == [False, False]
    assert refusal_fields(call(world))["limit"]["window"] == "minute"
    assert refusal_fields(call(world))["limit"]["window"] == "minute"
    # The minute's window ends (what the clock does after 60 seconds): the day has counted 2 calls, not 4.
    minute_key = limits._key("run", connection["id"], world.run.id, "read", "minute")
    db.session.execute(
        update(GatewayCallCounter)
        .where(GatewayCallCounter.key == minute_key)
        .values(expires_at=int(time.time()) - 1)
    )
    db.session.commit()
    assert call(world)["isError"] is False
    day = refusal_fields(call(world))
    assert day["reasonCode"] == "rate_limited" and day["limit"]["window"] == "day"
    assert day["message"].startswith("Notes 1 allows 3 calls per day in one run.")
    assert day["retryAfterSeconds"] > 60
    assert call_control(notes_server, "get_note") == 3


def test_write_calls_are_counted_apart_from_reads(app, db, world, notes_server):
    connection = notes(world)
    set_limits(world, connection["id"], write_run_minute=1, read_run_minute=100)
    assert call(world, "notes-1__create_note", title="a", body="b")["isError"] is False
    refused = refusal_fields(call(world, "notes-1__create_note", title="c", body="d"))
    assert refused["reasonCode"] == "rate_limited"
    assert refused["message"].startswith("Notes 1 allows 1 write call per minute in one run.")
    assert call(world)["isError"] is False  # reads are not held back by the write limit
    assert call_control(notes_server, "create_note") == 1


def test_the_loop_breaker_refuses_the_same_call_repeated(app, db, world, notes_server):
    connection = notes(world)
    set_limits(world, connection["id"], loop_repeats=2, loop_seconds=120)
    assert [call(world)["isError"] for _ in range(2)] == [False, False]
    looped = refusal_fields(call(world))
    wait = looped["retryAfterSeconds"]
    assert looped["reasonCode"] == "loop_detected" and 1 <= wait <= 120
    assert looped["message"] == (
        "notes-1__get_note was called with the same arguments 2 times within 120 seconds, so Switchboard "
        "stopped it as a likely loop. This call was not run; change the arguments or the approach, or try again "
        f"in {wait} seconds."
    )
    assert call(world, note_id="n2")["isError"] is False  # other arguments are another call
    assert call_control(notes_server, "get_note") == 3
    assert refusals_on_page(world, connection["id"]) == "1"


def test_the_limits_form_saves_validates_and_is_only_for_those_who_configure(app, db, make, world, providers):
    connection = notes(world)
    saved = set_limits(
        world, connection["id"], htmx=True, read_agent_minute=7, loop_repeats=4, loop_seconds=30
    )
    body = saved.get_data(as_text=True)
    assert saved.status_code == 200 and "<html" not in body and "Call limits saved." in body
    assert 'name="read-agent-minute" id="limit-read-agent-minute" value="7"' in body
    assert 'name="write-run-day" id="limit-write-run-day" value=""' in body
    page = world.client.get(f"/apps/{connection['id']}/permissions").get_data(as_text=True)
    assert 'id="limit-loop-repeats" value="4"' in page and 'id="limit-loop-seconds" value="30"' in page

    for odd in ("²", "1" * 5000, "-3", "1.5"):
        assert set_limits(world, connection["id"], htmx=True, read_run_minute=odd).status_code == 422, odd
    bad = set_limits(world, connection["id"], htmx=True, read_run_minute="many", loop_seconds=5)
    body = bad.get_data(as_text=True)
    assert bad.status_code == 422 and "<html" not in body
    assert 'value="many"' in body  # the draft is kept
    assert "Enter a whole number from 1 to 1,000,000, or leave it empty." in body
    assert "Enter a whole number from 10 to 86,400, or leave it empty." in body
    page = world.client.get(f"/apps/{connection['id']}/permissions").get_data(as_text=True)
    assert 'id="limit-loop-repeats" value="4"' in page  # a failed save changes nothing

    # Without JavaScript: 303 back to the page on success, the whole page with the errors (422) on a failure.
    plain = set_limits(world, connection["id"], read_run_minute=0)
    assert plain.status_code == 422 and "<html" in plain.get_data(as_text=True)
    assert set_limits(world, connection["id"]).status_code == 303

    # A member who did not create the connection and cannot manage connections: read-only figures, 403 on a post.
    member_client = app.test_client()
    member_csrf = sign_in(member_client, make.member(world.company, "member"))
    page = member_client.get(f"/apps/{connection['id']}/permissions").get_data(as_text=True)
    assert "Call limits" in page and 'name="read-run-minute"' not in page
    assert "<td>No limit</td>" in page and "<td>7</td>" not in page
    assert set_limits(world, connection["id"], read_agent_minute=7).status_code == 303
    page = member_client.get(f"/apps/{connection['id']}/permissions").get_data(as_text=True)
    assert "<td>7</td>" in page and "<td>No limit</td>" in page
    forbidden = set_limits(world, connection["id"], client=member_client, csrf=member_csrf, read_run_minute=1)
    assert forbidden.status_code == 403
    # Another company's connection is as good as missing.
    stranger_client = app.test_client()
    other = make.company("Other")
    stranger_csrf = sign_in(stranger_client, make.member(other, "owner"))
    missing = set_limits(
        world, connection["id"], client=stranger_client, csrf=stranger_csrf, read_run_minute=1
    )
    assert missing.status_code == 404


def test_an_ask_first_call_over_a_limit_keeps_its_approval(app, db, world, providers, honcho_server):
    from tests.services.gateway.test_gateway import approve, cards

    honcho = connect(world, "honcho", HONCHO_KEY)
    set_limits(world, honcho["id"], write_run_minute=1)
    asked = refusal_fields(call(world, "honcho__save_memory", content="likes tea"))
    assert asked["reasonCode"] == "approval_required"  # only asking: no quota used
    assert (
        refusal_fields(call(world, "honcho__save_memory", content="likes tea"))["approvalId"]
        == asked["approvalId"]
    )
    assert approve(world, asked["approvalId"]).status_code == 200
    # Another write call, allowed for a moment, uses the run's one write call of the minute.
    patch(world, honcho["id"], {"toolPolicies": {"save_memory": "allow"}})
    assert call(world, "honcho__save_memory", content="likes coffee")["isError"] is False
    patch(world, honcho["id"], {"toolPolicies": {"save_memory": "ask_first"}})
    refused = refusal_fields(call(world, "honcho__save_memory", content="likes tea"))
    assert refused["reasonCode"] == "rate_limited"
    assert [(str(c.id), c.status) for c in cards(db)] == [(asked["approvalId"], "approved")]  # not used up
    minute_key = limits._key("run", honcho["id"], world.run.id, "write", "minute")
    db.session.execute(
        update(GatewayCallCounter)
        .where(GatewayCallCounter.key == minute_key)
        .values(expires_at=int(time.time()) - 1)
    )
    db.session.commit()
    assert call(world, "honcho__save_memory", content="likes tea")["isError"] is False
    assert [(str(c.id), c.status) for c in cards(db)] == [(asked["approvalId"], "consumed")]
    assert honcho_server.calls == [
        ("save_memory", {"workspace_id": "team-workspace", "content": "likes coffee"}),
        ("save_memory", {"workspace_id": "team-workspace", "content": "likes tea"}),
    ]
