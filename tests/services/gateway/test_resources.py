"""`resources/read` on the gateway: only links a tool handed this agent, only while the agent may use the connection.

The provider is the official reference server (`@modelcontextprotocol/server-everything`), whose
`get-resource-links` tool answers with `resource_link` blocks.
"""

from __future__ import annotations

import uuid

import pytest
from sqlalchemy import select

from app.models import ActivityLog, ConnectionGrant
from app.services.gateway import resource_uris
from app.services.gateway import resources as gateway_resources
from tests.doors import rpc
from tests.peers.everything import installed
from tests.services.gateway import test_gateway, test_server_everything
from tests.web.agents.test_gateway_protocol import modern_body, modern_headers, post

world = test_gateway.world
everything_url = test_server_everything.everything_url
everything = test_server_everything.everything

pytestmark = pytest.mark.skipif(not installed(), reason="server-everything peer not installed (make peers)")

TEXT_URI = "demo://resource/dynamic/text/2"


def links(world, count=2) -> list[str]:
    answer = rpc(
        world.client,
        world.token,
        "tools/call",
        {"name": "everything__get-resource-links", "arguments": {"count": count}},
    )
    assert answer.status_code == 200 and answer.json["result"]["isError"] is False
    return [b["uri"] for b in answer.json["result"]["content"] if b["type"] == "resource_link"]


def read(world, uri, id_=5):
    return rpc(world.client, world.token, "resources/read", {"uri": uri}, id_=id_)


def not_found(uri, id_=5, code=-32002) -> dict:
    return {
        "jsonrpc": "2.0",
        "id": id_,
        "error": {"code": code, "message": "Resource not found", "data": {"uri": uri}},
    }


def test_the_gateway_declares_resources_and_lists_none(db, world):
    init = rpc(world.client, world.token, "initialize", {"protocolVersion": "2025-11-25", "capabilities": {}})
    assert init.json["result"]["capabilities"] == {"tools": {"listChanged": False}, "resources": {}}
    assert rpc(world.client, world.token, "resources/list").json["result"] == {"resources": []}
    assert rpc(world.client, world.token, "resources/templates/list").json["result"] == {
        "resourceTemplates": []
    }


def test_a_link_reads_the_providers_resource(db, world, everything):
    uris = links(world)
    text_link = uris[1]  # the server alternates blob (odd ids) and text (even ids)
    assert resource_uris.parse(text_link).provider_uri == TEXT_URI
    answer = read(world, text_link)
    assert answer.status_code == 200
    (item,) = answer.json["result"]["contents"]
    assert item["uri"] == text_link and item["mimeType"] == "text/plain"
    assert item["text"].startswith("Resource 2: This is a plaintext resource created at ")
    db.session.expire_all()
    (row,) = db.session.scalars(
        select(ActivityLog).where(ActivityLog.action == gateway_resources.ACTIVITY_ACTION)
    ).all()
    assert row.details["outcome"] == "ok" and row.details["connectionId"] == everything["id"]
    assert TEXT_URI not in str(row.details) and "uri" not in row.details


def test_foreign_forged_and_other_agents_uris_are_not_found(app, db, world, make, everything):
    (link,) = links(world, count=1)
    ref = resource_uris.parse(link)
    forged = link.replace("%2F1", "%2F7")  # another resource at the provider, under the same tag
    assert resource_uris.parse(forged).provider_uri == "demo://resource/dynamic/blob/7"
    other_agent = make.agent(world.company, "Other")
    with app.app_context():
        theirs = resource_uris.namespaced(
            world.company.id, other_agent.id, ref.connection_id, ref.provider_uri
        )
    for uri in (
        ref.provider_uri,
        "file:///etc/passwd",
        "switchboard://connection/not-a-uuid/x/y",
        forged,
        theirs,
    ):
        answer = read(world, uri)
        assert (answer.status_code, answer.json) == (200, not_found(uri)), uri
    invalid = rpc(world.client, world.token, "resources/read", {"uri": 7})
    assert invalid.json["error"] == {"code": -32602, "message": "Invalid params: uri must be a string"}


def test_a_link_is_not_found_once_the_agent_may_not_use_the_connection(db, world, everything):
    (link,) = links(world, count=1)
    assert read(world, link).json["result"]["contents"]
    grant = db.session.scalars(
        select(ConnectionGrant).where(ConnectionGrant.connection_id == uuid.UUID(everything["id"]))
    ).one()
    grant.status = "revoked"
    db.session.commit()
    assert read(world, link).json == not_found(link)


def test_the_providers_own_refusal_passes_through(app, db, world, everything):
    (link,) = links(world, count=1)
    ref = resource_uris.parse(link)
    with app.app_context():
        unknown = resource_uris.namespaced(
            world.company.id, world.agent.id, ref.connection_id, "demo://resource/dynamic/text/0"
        )
    answer = read(world, unknown)
    assert answer.status_code == 200
    # The reference server throws for an id it does not serve, which its SDK answers as an internal error.
    assert answer.json["error"] == {
        "code": -32603,
        "message": "Unknown resource: demo://resource/dynamic/text/0",
        "data": {"uri": unknown},
    }


def test_modern_reads_use_that_revisions_codes_and_caching(db, world, everything):
    (link,) = links(world, count=1)
    body = modern_body("resources/read", {"uri": link}, id_=9)
    answer = post(world.client, world.token, body, modern_headers(world.token, "resources/read", link))
    result = answer.json["result"]
    assert (result["resultType"], result["ttlMs"], result["cacheScope"]) == ("complete", 0, "private")
    assert result["contents"][0]["uri"] == link
    missing = "file:///nowhere"
    body = modern_body("resources/read", {"uri": missing}, id_=9)
    refused = post(world.client, world.token, body, modern_headers(world.token, "resources/read", missing))
    assert (refused.status_code, refused.json) == (200, not_found(missing, id_=9, code=-32602))
