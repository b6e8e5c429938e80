"""A listing rebuilt from the tools' stored entries is the listing `tool_definition` writes.

Each spliced entry is, byte for byte, `json.dumps(tool_definition(...))` of the values the tool was stored with. A
whole listing is compared with `json.dumps([tool.definition() for tool in tool_map(run).values()])` (the call path's
objects, each entry shaped by `tool_definition` from the row as read back: the full path): the same keys and values,
and the same text on SQLite. PostgreSQL's JSONB does not keep the order of object keys, so there the full path lists
a schema's keys in JSONB's order, where a stored entry keeps the provider's.
"""

from __future__ import annotations

import hashlib
import json
import re

import pytest
from sqlalchemy import select, update

from app.models import ConnectionTool, HeartbeatRun
from app.services.access.revision import current_revision
from app.services.connections import tool_index
from app.services.connections.audience import add_agent_install
from app.services.gateway import listing as gateway_listing
from app.services.gateway import tools as gateway_tools
from app.services.gateway.names import visible_name
from tests.conftest import count_statements
from tests.doors import rpc

SCHEMA = {"type": "object", "properties": {"query": {"type": "string"}}, "required": ["query"]}
WORKSPACE_SCHEMA = {
    "type": "object",
    "properties": {"workspace_id": {"type": "string"}, "content": {"type": "string"}},
    "required": ["workspace_id", "content"],
}
# name: (description, input schema, is_write, listing, policy action)
VARIED = {
    "plain_read": ("Reads things.", SCHEMA, False, None, "allow"),
    "plain_write": ("Writes things.", SCHEMA, True, None, None),  # no policy row: ask first
    "blocked": ("Never listed.", SCHEMA, False, None, "block"),
    "no_description": ("", {}, False, None, "allow"),
    "blank_description": ("   \n ", {"properties": {"a": {"type": "integer"}}}, True, None, "ask_first"),
    "titled": ("With a title.", SCHEMA, False, {"title": 'A "quoted" title'}, "allow"),
    "tricky_title": ("Title like a key.", SCHEMA, False, {"title": '"description": ""'}, "allow"),
    "output": (
        "Has an output schema.",
        SCHEMA,
        False,
        {"outputSchema": {"type": "object", "properties": {"n": {"type": "number"}}}},
        "allow",
    ),
    "annotated": (
        "Provider hints.",
        SCHEMA,
        True,
        {
            "annotations": {
                "readOnlyHint": True,
                "destructiveHint": False,
                "title": "Hinted",
                "unknownHint": 1,
            }
        },
        "allow",
    ),
    "meta": ("Carries _meta.", SCHEMA, False, {"_meta": {"vendor/x": {"deep": [1, "two", None]}}}, "allow"),
    "everything": (
        "All of it: titles, output, annotations and _meta.",
        SCHEMA,
        True,
        {
            "title": "Everything",
            "outputSchema": {"type": "object"},
            "annotations": {"openWorldHint": True},
            "_meta": {"k": "v"},
        },
        "ask_first",
    ),
    "unicode_ünï": (
        'Ünïcödé déscription with emoji 🚀, tabs\tand "quotes" \\ backslashes\u2028.',
        {"type": "object", "properties": {"café": {"type": "string", "description": "naïve ☕ 𝄞"}}},
        False,
        {"title": "Tïtle 🚀", "_meta": {"ключ": "значение"}},
        "allow",
    ),
}


def add_tools(db, connection, tools: dict) -> None:
    from app.models import ToolPolicy

    for name, (description, schema, is_write, listing, action) in tools.items():
        db.session.add(
            ConnectionTool(
                company_id=connection.company_id,
                connection_id=connection.id,
                name=name,
                description=description,
                input_schema=schema,
                is_write=is_write,
                listing=listing,
                version_hash="v1",
            )
        )
        if action is not None:
            db.session.add(
                ToolPolicy(
                    company_id=connection.company_id,
                    connection_id=connection.id,
                    tool_name=name,
                    action=action,
                )
            )
    db.session.commit()


def assert_same_listing(db, text: str, full: str) -> None:
    """The same keys and values; the same text where the database keeps key order (see the module docstring)."""
    assert json.loads(text) == json.loads(full)
    if db.engine.dialect.name == "sqlite":
        assert text == full


def full_path_listing(db, run_id) -> str:
    run = db.session.get(HeartbeatRun, run_id)
    return json.dumps([tool.definition() for tool in gateway_tools.tool_map(run).values()])


def rebuilt_listing(db, run_id) -> str:
    return gateway_listing.build_listing(db.session.get(HeartbeatRun, run_id))


@pytest.fixture
def world(make, db):
    """An agent reaching: a connection with varied tools (twice, one slug: suffixed), one that pins a
    workspace argument, and one installed through an access card's scope."""
    world = make.task_run()
    org = [("organization", None)]
    varied = make.connection(world.company, name="Vãried Tools", grants=org)
    add_tools(db, varied, VARIED)
    twin = make.connection(world.company, name="Vãried / Tools", grants=org)  # the same slug
    add_tools(db, twin, {k: VARIED[k] for k in ("plain_read", "titled")})
    honcho = make.connection(
        world.company,
        slug="honcho",
        name="Memory",
        grants=org,
        config={"connectionMethodKey": "mcp-api-key", "methodConfig": {"workspaceId": "team"}},
    )
    add_tools(
        db,
        honcho,
        {
            "save_memory": ("Save a memory.", WORKSPACE_SCHEMA, True, {"title": "Save"}, "allow"),
            "list_memories": ("List memories.", SCHEMA, False, None, "allow"),  # declares no workspace
        },
    )
    scoped = make.connection(world.company, name="Scoped", grants=org, installed=False)
    add_tools(db, scoped, {k: VARIED[k] for k in ("plain_read", "plain_write", "output", "meta")})
    add_agent_install(
        scoped, world.agent.id, None, tool_scope={"plain_read": "allow", "plain_write": "allow"}
    )
    db.session.commit()
    world.connections = {"varied": varied, "twin": twin, "honcho": honcho, "scoped": scoped}
    return world


@pytest.mark.parametrize("connection_name", ["Plain", 'Ünïcode "quoted" 🚀 \\ name'])
@pytest.mark.parametrize("action", ["allow", "ask_first"])
@pytest.mark.parametrize("tool_name", list(VARIED))
def test_a_spliced_entry_is_the_full_paths_text_byte_for_byte(tool_name, action, connection_name):
    description, schema, is_write, listing, _ = VARIED[tool_name]
    name = f"some-slug__{tool_name}"
    entries = gateway_listing._ConnectionEntries("some-slug", connection_name, {}, None)
    spliced = entries.spliced(
        tool_index.stored_entry(schema, is_write, listing), name, tool_name, description, action
    )
    full = gateway_listing.tool_definition(
        name, tool_name, description, schema, is_write, connection_name, action, {}, listing
    )
    assert spliced == json.dumps(full)
    assert (
        entries.spliced(
            tool_index.stored_entry(schema, is_write, listing), name, tool_name, description, action
        )
        == spliced
    )


@pytest.mark.parametrize(
    ("budget", "tool_name"),
    [
        (128, "x" * 117),
        (128, "x" * 118),
        (128, "ü_" * 70),
        (50, "x" * 39),
        (50, "x" * 40),
        (50, "files.read"),
        (50, "ü"),
        (50, "a/b c"),
    ],
)
def test_a_spliced_entry_of_a_shortened_visible_name_is_the_full_paths_text(budget, tool_name):
    """A visible name longer than the caller's budget, or with characters model APIs refuse, is changed
    (`visible_name`): the splice writes that name, not the slug and the tool's name."""
    description, schema, is_write, listing, _ = VARIED["plain_read"]
    name = visible_name("some-slug", tool_name, budget)
    kept = len(tool_name) <= budget - len("some-slug__") and re.fullmatch(r"[a-zA-Z0-9_-]+", tool_name)
    assert len(name) <= budget and (name == f"some-slug__{tool_name}") == bool(kept)
    entries = gateway_listing._ConnectionEntries("some-slug", "Plain", {}, None)
    spliced = entries.spliced(
        tool_index.stored_entry(schema, is_write, listing), name, tool_name, description, "allow"
    )
    full = gateway_listing.tool_definition(
        name, tool_name, description, schema, is_write, "Plain", "allow", {}, listing
    )
    assert spliced == json.dumps(full)


def test_rebuilt_listing_is_the_full_paths_listing(db, world):
    text = rebuilt_listing(db, world.run.id)
    assert_same_listing(db, text, full_path_listing(db, world.run.id))
    listing = json.loads(text)
    by_name = {entry["name"]: entry for entry in listing}
    # What the world holds is listed as the rule says (so the comparison above covers every case).
    assert len(by_name) == len(listing) == 11 + 2 + 2 + 2
    assert not any(name.endswith("__blocked") for name in by_name)
    save = by_name["memory__save_memory"]
    assert "workspace_id" not in save["inputSchema"]["properties"] and save["inputSchema"]["required"] == [
        "content"
    ]
    assert save["title"] == "Save" and save["annotations"] == {"readOnlyHint": False}
    scoped = {name.split("__", 1)[1]: entry for name, entry in by_name.items() if name.startswith("scoped__")}
    assert set(scoped) == {"plain_read", "plain_write"}
    assert scoped["plain_write"]["description"].endswith(
        "before it runs."
    )  # a write through a card asks first
    assert not scoped["plain_read"]["description"].endswith("before it runs.")
    # A name with characters model APIs refuse is listed sanitized, with a hash of the provider's name.
    sanitized = "__unicode__n_-" + hashlib.sha256("unicode_ünï".encode()).hexdigest()[:8]
    unicode = next(entry for name, entry in by_name.items() if name.endswith(sanitized))
    assert unicode["title"] == "Tïtle 🚀" and "🚀" in unicode["description"]
    assert unicode["inputSchema"]["properties"]["café"]["description"] == "naïve ☕ 𝄞"
    tricky = next(entry for name, entry in by_name.items() if name.endswith("__tricky_title"))
    assert tricky["title"] == '"description": ""' and tricky["description"].startswith("Title like a key.")
    annotated = next(entry for name, entry in by_name.items() if name.endswith("__annotated"))
    assert annotated["annotations"] == {"readOnlyHint": True, "destructiveHint": False, "title": "Hinted"}


def test_every_row_written_through_the_orm_has_a_stored_entry_and_only_pinned_tools_take_the_full_path(
    db, world
):
    ids = [c.id for c in world.connections.values()]
    stored = db.session.scalars(
        select(ConnectionTool.listed_entry).where(ConnectionTool.connection_id.in_(ids))
    )
    assert all(entry.startswith(tool_index.ENTRY_FORMAT) for entry in stored)
    rows = gateway_listing._tool_rows(ids, [world.connections["honcho"].id])
    full = {row.name for row in rows if row.full_path}
    assert full == {"save_memory", "list_memories"}
    assert all(row.input_schema is None and row.listing is None for row in rows if not row.full_path)


def test_rows_without_a_current_stored_entry_are_listed_the_full_way(db, world):
    """Rows written without the ORM (no entry) or by code with another `ENTRY_FORMAT` list the same text."""
    varied, twin = world.connections["varied"], world.connections["twin"]
    before = rebuilt_listing(db, world.run.id)
    db.session.execute(
        update(ConnectionTool).where(ConnectionTool.connection_id == varied.id).values(listed_entry=None)
    )
    db.session.execute(
        update(ConnectionTool)
        .where(ConnectionTool.connection_id == twin.id)
        .values(listed_entry='0:{"name": "", "description": ""}')
    )
    db.session.commit()
    after = rebuilt_listing(db, world.run.id)
    assert_same_listing(db, after, before)
    rows = gateway_listing._tool_rows([varied.id, twin.id], [])
    assert rows and all(row.full_path for row in rows)


def test_indexing_a_tool_again_rewrites_its_entry_and_the_next_listing_shows_it(db, world, client):
    """A new schema or title written through the ORM reaches the stored entry, and the next `tools/list`."""
    varied = world.connections["varied"]

    def listed(name: str) -> dict:
        """The tool of `varied` (its twin has a tool of the same name, and which comes first depends on ids)."""
        answer = rpc(client, world.token, "tools/list")
        note = f"Tool {name} of the connection {varied.name}."
        (tool,) = [
            t
            for t in answer.json["result"]["tools"]
            if t["name"].endswith(f"__{name}") and note in t["description"]
        ]
        return tool

    assert listed("titled")["title"] == 'A "quoted" title'
    row = db.session.scalars(
        select(ConnectionTool).where(
            ConnectionTool.connection_id == varied.id, ConnectionTool.name == "titled"
        )
    ).one()
    row.listing = {"title": "Renamed"}
    row.input_schema = {"type": "object", "properties": {"other": {"type": "boolean"}}}
    row.is_write = True
    db.session.commit()
    entry = listed("titled")
    assert entry["title"] == "Renamed" and list(entry["inputSchema"]["properties"]) == ["other"]
    assert entry["annotations"] == {"readOnlyHint": False}
    assert_same_listing(db, rebuilt_listing(db, world.run.id), full_path_listing(db, world.run.id))


def test_an_update_of_other_columns_fills_a_missing_entry(db, world):
    varied = world.connections["varied"]
    db.session.execute(
        update(ConnectionTool).where(ConnectionTool.connection_id == varied.id).values(listed_entry=None)
    )
    db.session.commit()
    row = db.session.scalars(
        select(ConnectionTool).where(ConnectionTool.connection_id == varied.id, ConnectionTool.name == "meta")
    ).one()
    row.version_hash = "v2"  # what indexing the tools again does to an unchanged tool (it sets every column)
    db.session.commit()
    assert row.listed_entry == tool_index.stored_entry(row.input_schema, row.is_write, row.listing)
    assert_same_listing(db, rebuilt_listing(db, world.run.id), full_path_listing(db, world.run.id))


def test_listing_statements_do_not_grow_with_tools(db, make, world):
    from app.extensions import db as _db

    def statements() -> int:
        gateway_tools.clear_listings()
        run = db.session.get(HeartbeatRun, world.run.id)
        revision = current_revision(run.company_id)
        with count_statements(_db.engine) as seen:
            gateway_tools.list_tool_definitions(run, revision)
        return len(seen)

    one = statements()
    for n in range(10):
        more = make.connection(world.company, name=f"More {n}", grants=[("organization", None)])
        add_tools(db, more, {f"{name}_{n}": spec for name, spec in VARIED.items()})
    db.session.execute(  # some rows without a stored entry, too
        update(ConnectionTool).where(ConnectionTool.name.like("plain_%")).values(listed_entry=None)
    )
    db.session.commit()
    assert statements() == one
    assert_same_listing(db, rebuilt_listing(db, world.run.id), full_path_listing(db, world.run.id))


def test_an_invalid_provider_field_stores_no_entry(db):
    assert tool_index.stored_entry(SCHEMA, False, {"annotations": {"readOnlyHint": "maybe"}}) is None
    assert tool_index.stored_entry(SCHEMA, False, {"title": "ok"}).startswith(tool_index.ENTRY_FORMAT)
