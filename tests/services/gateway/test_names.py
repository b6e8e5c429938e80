"""Visible tool names every model API accepts (`app.services.gateway.names`).

Anthropic's and OpenAI's APIs refuse a request whose tool names do not match `^[a-zA-Z0-9_-]{1,64}$`, and agent CLIs
put their own prefix before an MCP tool's name (`mcp__gateway__` for Claude Code and Codex, `mcp_gateway_` for Gemini
CLI, `gateway_` for OpenCode). So names are given within the calling agent's budget: per adapter type, else the
`GATEWAY_TOOL_NAME_BUDGET` setting. Checked here over every catalog app's tool names, the test peers' and
server-everything's (with each client's prefix), over long and odd custom names and deliberate collisions, and end
to end with the official MCP Python SDK client listing and calling a long-named tool of a real provider peer.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import random
import re
import uuid
from dataclasses import dataclass
from pathlib import Path

import pytest
from sqlalchemy import select

import app as app_package
from app.config import load_config
from app.models import ActivityLog, HeartbeatRun, ToolConnection
from app.models.agents import AdapterType
from app.services.gateway import listing as gateway_listing
from app.services.gateway import names
from app.services.gateway import tools as gateway_tools
from tests.peers.mcp_servers import NOTES_KEY
from tests.services.gateway import test_gateway
from tests.services.gateway.provider_tool_names import CATALOG_TOOLS, everything_tools, peer_tools

world = test_gateway.world
live_server = test_gateway.live_server

DEFINITIONS = Path(app_package.__file__).parent / "catalog" / "definitions"
ORG = [("organization", None)]
MODEL_NAME = re.compile(r"[a-zA-Z0-9_-]{1,64}")
# (adapter type, the prefix its client puts before a gateway tool's name, the longest name it passes on); None is
# every other caller, held to the setting and checked as Claude Code with the gateway registered as `gateway`.
CLIENTS = [(adapter, prefix, limit) for adapter, (prefix, limit) in names.CLIENT_PREFIXES.items()] + [
    (None, "mcp__gateway__", 64)
]


def hash8(text: str) -> str:
    return hashlib.sha256(text.encode()).hexdigest()[:8]


def sanitized(tool_name: str) -> str:
    return re.sub(r"[^a-zA-Z0-9_-]", "_", tool_name)


# --- the budgets ---------------------------------------------------------------------------------------------------


def test_each_adapter_types_budget_leaves_room_for_its_clients_prefix(app, db, monkeypatch):
    assert names.ADAPTER_BUDGETS == {"claude_code": 50, "codex": 50, "gemini": 51, "opencode": 56}
    assert names.DEFAULT_BUDGET == 50 and app.config["GATEWAY_TOOL_NAME_BUDGET"] == 50
    monkeypatch.setitem(app.config, "GATEWAY_TOOL_NAME_BUDGET", 30)
    for adapter in ("process", "http", "manual", None, "someday"):
        assert names.tool_name_budget(adapter) == 30  # everyone without a client of their own: the setting
    for adapter, budget in names.ADAPTER_BUDGETS.items():
        assert names.tool_name_budget(adapter) == budget  # the CLI's prefix decides, not the setting


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("12", "expected 24 to 128 characters, got 12"),
        ("129", "expected 24 to 128 characters, got 129"),
        ("fifty", "expected a whole number of characters, got 'fifty'"),
        ("4.5", "expected a whole number of characters, got '4.5'"),
    ],
)
def test_a_bad_budget_setting_stops_the_start_with_a_clear_error(monkeypatch, tmp_path, value, message):
    monkeypatch.setenv("SECRET_KEY", "x" * 32)
    monkeypatch.setenv("SWITCHBOARD_GATEWAY_TOOL_NAME_BUDGET", value)
    with pytest.raises(ValueError) as refused:
        load_config(str(tmp_path))
    assert str(refused.value) == f"SWITCHBOARD_GATEWAY_TOOL_NAME_BUDGET: {message}"


def test_the_budget_setting_is_read_from_the_environment(monkeypatch, tmp_path):
    monkeypatch.setenv("SECRET_KEY", "x" * 32)
    monkeypatch.setenv("SWITCHBOARD_GATEWAY_TOOL_NAME_BUDGET", " 40 ")
    assert load_config(str(tmp_path))["GATEWAY_TOOL_NAME_BUDGET"] == 40
    monkeypatch.setenv("SWITCHBOARD_GATEWAY_TOOL_NAME_BUDGET", "")
    assert load_config(str(tmp_path))["GATEWAY_TOOL_NAME_BUDGET"] == names.DEFAULT_BUDGET


# --- every catalog app's tools, through the listing and the tool map -------------------------------------------------


def catalog_apps() -> list[dict]:
    return sorted((json.loads(p.read_text()) for p in DEFINITIONS.glob("*.json")), key=lambda d: d["slug"])


@pytest.fixture
def catalog_world(db, make, world):
    """Every catalog app connected (GitHub twice, as `GitHub` and `github`: suffixed slugs), each with its provider's tool
    names, the peers' and server-everything's; its provider's first tool blocked."""
    common = peer_tools() + everything_tools()
    connections: list[tuple[ToolConnection, list[str]]] = []
    twin = [{**d, "name": d["name"].lower()} for d in catalog_apps() if d["slug"] == "github"]
    for definition in catalog_apps() + twin:
        own = CATALOG_TOOLS[definition["slug"]]
        tools: dict[str, str | None] = dict.fromkeys(own + common, "allow")
        tools[own[0]] = "block"
        connection = make.connection(
            world.company, slug=definition["slug"], name=definition["name"], grants=ORG, tools=tools
        )
        connections.append((connection, [t for t in tools if t != own[0]]))
    return connections


def test_the_fixture_names_tools_for_every_catalog_app():
    assert set(CATALOG_TOOLS) == {d["slug"] for d in catalog_apps()}
    assert len(peer_tools()) >= 10  # read from tests/peers/*.py


@pytest.mark.parametrize(("adapter", "prefix", "limit"), CLIENTS, ids=[c[0] or "setting" for c in CLIENTS])
def test_every_catalog_apps_tools_are_named_for_every_client(
    db, world, catalog_world, adapter, prefix, limit
):
    run = db.session.get(HeartbeatRun, world.run.id)
    budget = names.tool_name_budget(adapter)
    listing = json.loads(gateway_listing.build_listing(run, budget))
    listed = [entry["name"] for entry in listing]
    expected = {(connection.id, tool) for connection, tools in catalog_world for tool in tools}
    assert len(listed) == len(set(listed)) == len(expected)
    for name in listed:
        assert MODEL_NAME.fullmatch(prefix + name) and len(prefix + name) <= limit, name
        assert len(name) <= budget
    # Calls resolve names through the tool map (`find_tool` reads the same rule for one connection).
    tool_map = gateway_tools.tool_map(run, budget)
    assert list(tool_map) == listed
    assert {(t.connection.id, t.tool_access.tool.name) for t in tool_map.values()} == expected
    slugs = {t.connection.id: names.slug_of_name(name) for name, t in tool_map.items()}
    assert len(set(slugs.values())) == len(catalog_world)  # GitHub's two connections included
    for entry in listing:
        tool = tool_map[entry["name"]]
        raw, slug = tool.tool_access.tool.name, slugs[tool.connection.id]
        # The listing describes the tool the name resolves to.
        assert entry["description"].endswith(f"Tool {raw} of the connection {tool.connection.name}.")
        room = budget - len(slug) - 2
        if len(raw) <= room and re.fullmatch(r"[a-zA-Z0-9_-]+", raw):
            assert entry["name"] == f"{slug}__{raw}"
        else:
            assert entry["name"] == f"{slug}__{sanitized(raw)[: room - 9]}-{hash8(raw)}"
    for name in listed[::7]:
        found = gateway_tools.find_tool(run, name, budget)
        assert found is not None and (found.connection.id, found.tool_access.tool.name) == (
            tool_map[name].connection.id,
            tool_map[name].tool_access.tool.name,
        )
    blocked = {(c.id, CATALOG_TOOLS[c.app_slug][0]) for c, _ in catalog_world}
    for connection_id, raw in list(blocked)[
        :3
    ]:  # blocked: not listed, yet a call by its name is still refused
        slug = next(s for cid, s in slugs.items() if cid == connection_id)
        found = gateway_tools.find_tool(run, names.visible_name(slug, raw, budget), budget)
        assert found is not None and found.action == "block" and found.tool_access.tool.name == raw


def test_listings_are_kept_per_budget(db, world, catalog_world, app, monkeypatch):
    """The same audience listed for two budgets gets two listings, each named for its budget; calls resolve per
    budget too."""
    from app.services.access.revision import current_revision

    run = db.session.get(HeartbeatRun, world.run.id)
    revision = current_revision(run.company_id)
    gateway_tools.clear_listings()
    wide = gateway_tools.list_tool_definitions(run, revision, 128).value()
    narrow = gateway_tools.list_tool_definitions(run, revision, 24).value()
    assert max(len(e["name"]) for e in wide) > 24 >= max(len(e["name"]) for e in narrow)
    assert gateway_tools.list_tool_definitions(run, revision, 128).value() == wide
    long_wide = next(e["name"] for e in wide if len(e["name"]) > 24)
    assert gateway_tools.call_target(run, long_wide, revision, 128) is not None
    assert gateway_tools.call_target(run, long_wide, revision, 24) is None
    monkeypatch.setitem(app.config, "GATEWAY_TOOL_NAME_BUDGET", 24)
    assert gateway_tools.list_tool_definitions(run, revision).value() == narrow


# --- long and odd names, collisions ------------------------------------------------------------------------------


@dataclass
class Named:
    id: uuid.UUID
    name: str


BUDGETS = sorted({*names.ADAPTER_BUDGETS.values(), names.NAME_MIN_LENGTH, names.DEFAULT_BUDGET, 64, 128})
LONG_TOOLS = [
    "t" * 200,
    "reports.quarterly/" + "revenue_by_region_" * 11,
    "files.read",
    "files read",
    "files/read",
    "files_read",
    "ünïcödé",
    "検索",
    "🚀 launch",
    "namespace:tool.v2",
    "-",
    "_",
    "x" * 64,
]
LONG_CONNECTIONS = [
    "Quarterly Reports & Exports — EMEA Region Finance Team Workspace " * 3,
    "Ünïcödé Ñame ☕",
    "a.b.c",
    "",
    "   ",
    "🚀",
    "x" * 200,
    "x" * 200 + "y",  # the same slug as the previous once capped
]


@pytest.mark.parametrize("budget", BUDGETS)
def test_long_and_odd_names_fit_the_budget_and_stay_distinct(budget):
    connections = [
        Named(uuid.UUID(int=random.Random(n).getrandbits(128)), name)
        for n, name in enumerate(LONG_CONNECTIONS)
    ]
    slugs = names.connection_slugs(connections, budget)
    assert len(set(slugs.values())) == len(connections)
    listed: list[str] = []
    for connection in connections:
        assert len(slugs[connection.id]) <= names.slug_max_length(budget)
        visible = names.visible_names(slugs[connection.id], LONG_TOOLS, budget)
        assert list(visible) == LONG_TOOLS
        listed += visible.values()
        for tool, name in visible.items():
            assert names.slug_of_name(name) == slugs[connection.id]
            assert name == names.visible_name(
                slugs[connection.id], tool, budget
            )  # no collision to resolve here
    assert len(listed) == len(set(listed))
    for name in listed:
        assert len(name) <= budget and re.fullmatch(r"[a-zA-Z0-9_-]+", name), name
        if budget <= 50:
            assert MODEL_NAME.fullmatch("mcp__gateway__" + name)
    # Connections without a usable name: `connection`, then suffixed with their ids (within the slug's cap).
    unnamed = connections[3]
    assert slugs[unnamed.id] == names._suffixed_slug("connection", unnamed.id, budget, 8)
    assert slugs[unnamed.id].startswith("connection"[: names.slug_max_length(budget) - 9])


def test_a_changed_name_keeps_the_tools_name_as_far_as_it_fits_and_ends_in_its_hash():
    assert names.visible_name("files", "files.read", 50) == f"files__files_read-{hash8('files.read')}"
    long_tool = "reports.quarterly/" + "revenue_by_region_" * 11
    assert (
        names.visible_name("finance", long_tool, 50)
        == f"finance__{sanitized(long_tool)[:32]}-{hash8(long_tool)}"
    )
    assert names.visible_name("finance", "a" * 41, 50) == "finance__" + "a" * 41  # exactly 50: kept
    assert names.visible_name("finance", "a" * 42, 50) == f"finance__{'a' * 32}-{hash8('a' * 42)}"
    # The old 128 rule is this rule at a budget of 128, for names of plain characters.
    assert names.visible_name("s", "t" * 300, 128) == f"s__{'t' * 116}-{hash8('t' * 300)}"


def test_tools_that_come_out_the_same_get_distinct_names_decided_by_their_names():
    budget, slug = 50, "notes"
    room = budget - len(slug) - 2
    # A provider tool literally named as another one's changed name: the unchanged name keeps it.
    squatter = f"files_read-{hash8('files.read')}"
    tools = ["files.read", squatter, "files read", "files/read", "files_read"]
    got = names.visible_names(slug, tools, budget)
    assert got == {
        "files.read": f"notes__files_read-{hash8('1:files.read')}",  # the next salt
        squatter: f"notes__{squatter}",
        "files read": f"notes__files_read-{hash8('files read')}",
        "files/read": f"notes__files_read-{hash8('files/read')}",
        "files_read": "notes__files_read",
    }
    for seed in range(5):  # the same whatever order the rows come in
        shuffled = tools[:]
        random.Random(seed).shuffle(shuffled)
        assert names.visible_names(slug, shuffled, budget) == got
    assert names.tool_part("files.read", room, 1) == got["files.read"].removeprefix("notes__")


def test_a_hash_collision_of_two_shortened_names_is_resolved_by_name_order():
    budget, slug = 50, "notes"
    room = budget - len(slug) - 2
    seen: dict[str, str] = {}
    for n in itertools.count():  # two long names whose shortened forms (8 hex of a hash) are the same
        tool = f"{'p' * 60}{n}"
        part = names.tool_part(tool, room)
        if part in seen:
            first, second = sorted((seen[part], tool))
            break
        seen[part] = tool
    got = names.visible_names(slug, [second, first, "other"], budget)
    assert got[first] == f"{slug}__{part}"
    assert got[second] == f"{slug}__{'p' * (room - 9)}-{hash8('1:' + second)}"
    assert len(set(got.values())) == 3


def test_names_stay_the_same_while_the_connections_name_is_unchanged():
    budget = 50
    notes = Named(uuid.UUID(int=1), "Team Notes")
    before = names.visible_names(names.connection_slugs([notes], budget)[notes.id], LONG_TOOLS, budget)
    # Other connections and other tools appear: the names stay.
    others = [Named(uuid.UUID(int=n), f"Other {n}") for n in range(2, 6)]
    slug = names.connection_slugs([notes, *others], budget)[notes.id]
    after = names.visible_names(slug, [*LONG_TOOLS, "new_tool", "newer.tool"], budget)
    assert {tool: after[tool] for tool in LONG_TOOLS} == before
    # Only a connection with the same slug changes it (both get the id's first 8 hex).
    twin = Named(uuid.UUID(int=2**127), "team-notes")
    slugs = names.connection_slugs([notes, twin], budget)
    assert slugs == {notes.id: f"team-notes-{notes.id.hex[:8]}", twin.id: f"team-notes-{twin.id.hex[:8]}"}


def test_a_suffixed_slug_that_meets_another_connections_slug_takes_a_longer_suffix():
    budget = 50
    first = Named(uuid.UUID("11111111-aaaa-4aaa-8aaa-aaaaaaaaaaaa"), "Notes")
    second = Named(uuid.UUID("22222222-bbbb-4bbb-8bbb-bbbbbbbbbbbb"), "Notes")
    squatter = Named(uuid.UUID("33333333-cccc-4ccc-8ccc-cccccccccccc"), "notes-11111111")  # looks suffixed
    slugs = names.connection_slugs([first, second, squatter], budget)
    assert slugs == {
        first.id: "notes-11111111aaaa4aaa",  # clashed twice: 16 hex
        second.id: "notes-22222222",
        squatter.id: "notes-1-33333333cccc4ccc",  # its own slug cut to fit 16 hex in 24 characters
    }
    for connection in (first, second, squatter):
        assert slugs[connection.id] in names.possible_slugs(connection, budget)


# --- end to end: the official MCP Python SDK client lists and calls a long-named tool --------------------------------

LONG_TOOL = "exports.v2/" + "generate_quarterly_revenue_report_by_region_" * 4 + "ü"
LONG_CONNECTION = "Quarterly Reports & Exports — EMEA Region Finance Team"


@pytest.fixture
def long_tool_provider(notes_server):
    """The notes peer (GitHub's provider in tests) with one more tool, named `LONG_TOOL` (removed after the test by
    the peers' reset)."""

    def long_named(region: str) -> str:
        notes_server.record_call(LONG_TOOL, {"region": region})
        return f"report for {region}"

    notes_server.add_tool(long_named, name=LONG_TOOL, description="A long-named report.", read_only=True)
    return notes_server


def list_and_call(live_server, token, arguments):
    async def scenario(session):
        first = (await session.list_tools()).tools
        second = (await session.list_tools()).tools
        name = next(t.name for t in first if f"Tool {LONG_TOOL} of the connection" in (t.description or ""))
        result = await session.call_tool(name, arguments)
        return [t.name for t in first], [t.name for t in second], name, result

    return test_gateway.run_agent(live_server, token, scenario)


def assert_called(db, provider, world, name, result, connection_id):
    assert result.is_error is False, result
    assert test_gateway.text_of(result) == "report for emea"
    assert provider.calls[-1] == (LONG_TOOL, {"region": "emea"})  # the provider's own name reached it
    db.session.expire_all()
    activity = db.session.scalars(
        select(ActivityLog).where(ActivityLog.action == "tool_gateway.call").order_by(ActivityLog.created_at)
    ).all()[-1]
    assert activity.details["connectionId"] == connection_id and activity.details["tool"] == name


def test_a_process_agent_lists_and_calls_a_long_named_tool_within_the_setting(
    app, db, world, live_server, long_tool_provider, monkeypatch
):
    monkeypatch.setitem(app.config, "GATEWAY_TOOL_NAME_BUDGET", 36)
    world.agent.adapter_type = "process"
    db.session.commit()
    connection = test_gateway.connect(world, "github", NOTES_KEY, name=LONG_CONNECTION)
    first, second, name, result = list_and_call(live_server, world.token, {"region": "emea"})
    assert first == second and len(first) == len(set(first))  # stable from one listing to the next
    assert all(len(n) <= 36 and MODEL_NAME.fullmatch(n) for n in first)
    slug = "quarterly-reports"  # capped at half the budget after the separator: 17 characters
    assert name == f"{slug}__{sanitized(LONG_TOOL)[: 36 - len(slug) - 2 - 9]}-{hash8(LONG_TOOL)}"
    assert f"{slug}__search_notes" in first
    assert_called(db, long_tool_provider, world, name, result, connection["id"])


@pytest.mark.skipif(
    "claude_code" not in AdapterType.values(),
    reason="adapter type 'claude_code' not in AdapterType yet (the lead's migration adds it)",
)
def test_a_claude_code_agent_lists_and_calls_a_long_named_tool_within_its_prefix(
    app, db, world, live_server, long_tool_provider, monkeypatch
):
    monkeypatch.setitem(app.config, "GATEWAY_TOOL_NAME_BUDGET", 24)  # not what a claude_code agent is held to
    world.agent.adapter_type = "claude_code"
    db.session.commit()
    connection = test_gateway.connect(world, "github", NOTES_KEY, name=LONG_CONNECTION)
    first, second, name, result = list_and_call(live_server, world.token, {"region": "emea"})
    assert first == second and len(first) == len(set(first))
    for listed in first:
        assert MODEL_NAME.fullmatch("mcp__gateway__" + listed), listed
    assert max(len(n) for n in first) > 24  # the adapter's 50, not the setting
    slug = "quarterly-reports-export"  # 24 characters
    assert name == f"{slug}__{sanitized(LONG_TOOL)[: 50 - len(slug) - 2 - 9]}-{hash8(LONG_TOOL)}"
    assert_called(db, long_tool_provider, world, name, result, connection["id"])


def test_a_same_named_connection_without_tools_does_not_rename_the_listed_ones(db, make, world):
    """Slugs are told apart among the connections that have tools (the ones the listing shows), on the call path
    too: a listed name resolves while a same-named connection has no tools yet (indexing pending or failed)."""
    with_tools = make.connection(world.company, name="Notes", grants=ORG, tools={"search.notes": "allow"})
    make.connection(world.company, name="notes", grants=ORG)  # no tools
    run = db.session.get(HeartbeatRun, world.run.id)
    budget = names.DEFAULT_BUDGET
    listed = [entry["name"] for entry in json.loads(gateway_listing.build_listing(run, budget))]
    name = f"notes__search_notes-{hash8('search.notes')}"
    assert name in listed and list(gateway_tools.tool_map(run, budget)) == listed
    found = gateway_tools.find_tool(run, name, budget)
    assert found is not None and found.connection.id == with_tools.id
