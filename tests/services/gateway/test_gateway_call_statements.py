"""What one gateway `tools/call` costs the database: statements and commits, warm and right after an access change.

A repeated call reads the address's shared count of failed authentications and the run context, then the connection
with its identity and the identity's credentials (as plain values, compared with what the kept provider target was
built from), counts the call against the connection's rate limits in one upsert of its counters (issue 28 item 3),
reads the provider's shared breaker (one primary-key read, issue 31), and writes one activity row (its entry in the
run's decision timeline): the tool itself is resolved from plain values kept under the company's access revision.
The transaction ends (one commit) before the provider is called; the activity row is written after it in one
autocommitted statement. A refused call commits once, at the end. Counts do not grow with the agent's connections
and tools.
"""

from __future__ import annotations

import re
from contextlib import contextmanager

from sqlalchemy import event

from tests.conftest import count_statements
from tests.doors import refusal_fields
from tests.peers.mcp_servers import HONCHO_KEY, NOTES_KEY
from tests.services.gateway import test_gateway
from tests.services.gateway.test_gateway import connect, patch, rpc


def call(world, name="notes-1__get_note"):
    response = rpc(world.client, world.token, "tools/call", {"name": name, "arguments": {"note_id": "n1"}})
    assert response.status_code == 200 and "result" in response.json, response.json
    return response.json["result"]


# The gateway tests' fixture: Acme with a live run on a task (`world`).
world = test_gateway.world

INSERT_TABLE = r"INSERT INTO (\S+)"
FIRST_TABLE = r" FROM (\S+)"


def shape(statement: str) -> str:
    """`SELECT <first table>` or `INSERT <table>`: what a statement reads or writes, without its columns."""
    text = " ".join(statement.split())
    verb = text.split(" ", 1)[0].upper()
    pattern = {"INSERT": INSERT_TABLE, "UPDATE": r"UPDATE (\S+)"}.get(verb, FIRST_TABLE)
    table = re.search(pattern, text)
    return f"{verb} {table.group(1) if table else '?'}"


@contextmanager
def counting(engine):
    commits: list[int] = []
    record = lambda conn: commits.append(1)  # noqa: E731
    event.listen(engine, "commit", record)
    try:
        with count_statements(engine) as statements:
            yield statements, commits
    finally:
        event.remove(engine, "commit", record)


def measured(world, name="notes-1__get_note"):
    from app.extensions import db as _db

    with counting(_db.engine) as (statements, commits):
        result = call(world, name)
    return result, [shape(s) for s in statements], len(commits), statements


WARM = [
    "SELECT throttle_hits",  # the address's failed authentications, counted for every process (issue 31)
    "SELECT heartbeat_runs",  # run, task, agent, responsible person's membership and the access revision
    "SELECT tool_connections",  # the connection with the selected identity and its credentials
    "INSERT gateway_call_counters",  # the call counted against its rate limits and loop breaker (one upsert)
    "SELECT provider_breakers",  # the provider's breaker, shared by every process (issue 31), autocommitted
    "INSERT activity_log",  # the call's activity row, autocommitted
]


def test_a_repeated_call_reads_two_statements_counts_once_and_writes_one_row(app, db, world, notes_server):
    connect(world, "github", NOTES_KEY, name="Notes 1")
    first = measured(world)[0]
    assert first["isError"] is False, first
    result, statements, commits, _raw = measured(world)
    assert result["isError"] is False, result
    assert statements == WARM
    assert commits == 1  # before the provider is called (the activity row after it is autocommitted)


def test_call_costs_stay_constant_as_the_agents_connections_grow(app, db, world, notes_server):
    connect(world, "github", NOTES_KEY, name="Notes 1")
    # The first call also builds the provider target (the connection and its credentials read as ORM objects),
    # kept while what it was built from is unchanged (`gateway.targets`): later calls read them in one statement.
    first = measured(world)[1]
    assert first.count("SELECT tool_connections") == 2
    connect(world, "honcho", HONCHO_KEY)
    cold_one = measured(world)[1]  # the first call after an access change: the tool resolved afresh
    warm_one = measured(world)[1]
    for n in range(2, 6):
        connect(world, "github", NOTES_KEY, name=f"Notes {n}")
    cold_many = measured(world)[1]
    warm_many = measured(world)[1]
    assert len(cold_many) == len(cold_one) and len(cold_one) > len(warm_one)
    assert warm_many == warm_one == WARM


def test_an_access_change_is_seen_by_the_next_call(app, db, world, notes_server):
    notes = connect(world, "github", NOTES_KEY, name="Notes 1")
    assert call(world)["isError"] is False
    patch(world, notes["id"], {"toolPolicies": {"get_note": "block"}})
    blocked, statements, commits, raw = measured(world)
    assert blocked["isError"] is True and refusal_fields(blocked)["reasonCode"] == "tool_blocked"
    assert statements[-1] == "INSERT activity_log"
    assert not any("grant_secrets" in statement for statement in raw)  # the credentials are never read
    assert commits == 1  # a refusal never reaches the provider: the request's own commit only
    assert len([c for c in notes_server.calls if c[0] == "get_note"]) == 1


def test_a_call_refused_by_a_limit_costs_two_more_statements(app, db, world, notes_server):
    from tests.services.gateway.test_call_limits import set_limits

    notes = connect(world, "github", NOTES_KEY, name="Notes 1")
    set_limits(world, notes["id"], read_run_minute=1)
    first, statements, _commits, _raw = measured(world)
    assert first["isError"] is False
    # The run's first call on the connection also deletes the connection's expired counters.
    assert "DELETE gateway_call_counters" in statements
    refused, statements, commits, _raw = measured(world)
    assert refusal_fields(refused)["reasonCode"] == "rate_limited"
    assert statements == [
        "SELECT throttle_hits",  # the address's failed authentications, counted for every process (issue 31)
        "SELECT heartbeat_runs",
        "SELECT tool_connections",
        "INSERT gateway_call_counters",  # counted: over the limit
        "UPDATE gateway_call_counters",  # taken off again: a refused call uses no quota
        "INSERT gateway_call_counters",  # the refusal counted for the connection's page
        "INSERT activity_log",  # its entry in the run's timeline
    ]
    assert commits == 1
    assert len([c for c in notes_server.calls if c[0] == "get_note"]) == 1
