"""A run's gateway decision timeline (issue 28 item 5): the run page and `GET /api/runs/<id>/decisions` list every
gateway decision in order (listed, allowed, blocked, asked, answered by whom, used an approval, refused by a limit)
with the provider's result status, latency and digests, never arguments or results. Real notes and Honcho MCP peers
on loopback.
"""

from __future__ import annotations

import re

from app.services.gateway.arguments import canonical_digest
from tests.conftest import sign_in
from tests.doors import refusal_fields, rpc
from tests.peers.mcp_servers import HONCHO_KEY, NOTES_KEY
from tests.services.gateway import test_gateway
from tests.services.gateway.test_call_limits import set_limits
from tests.services.gateway.test_gateway import approve, connect, patch

world = test_gateway.world

SECRET_ARG = "remember-the-password-is-swordfish"
NOTE_BODY = "Goals for Q3."  # what the provider answers for note n1

EXPECTED = [
    ("listed", "listed", "Listed its tools"),
    ("called", "allowed", "Allowed by policy"),
    ("called", "tool_blocked", "Refused: blocked by policy"),
    ("called", "approval_required", "Asked for approval"),
    ("approval", "approved", None),  # "Approved by <the owner>"
    ("called", "approved", "Allowed by an approval"),
    ("called", "loop_detected", "Refused by the loop breaker"),
]


def call(world, name, **arguments):
    response = rpc(world.client, world.token, "tools/call", {"name": name, "arguments": arguments})
    assert response.status_code == 200, response.json
    return response.json["result"]


def a_run_with_every_kind_of_decision(world):
    notes = connect(world, "github", NOTES_KEY, name="Notes 1")
    patch(world, notes["id"], {"toolPolicies": {"search_notes": "block"}})
    connect(world, "honcho", HONCHO_KEY)
    assert set_limits(world, notes["id"], loop_repeats=1, loop_seconds=60).status_code == 303
    assert "result" in rpc(world.client, world.token, "tools/list").json
    assert call(world, "notes-1__get_note", note_id="n1")["isError"] is False
    assert refusal_fields(call(world, "notes-1__search_notes", query="x"))["reasonCode"] == "tool_blocked"
    asked = refusal_fields(call(world, "honcho__save_memory", content=SECRET_ARG))
    assert asked["reasonCode"] == "approval_required"
    assert approve(world, asked["approvalId"]).status_code == 200
    assert call(world, "honcho__save_memory", content=SECRET_ARG)["isError"] is False
    assert refusal_fields(call(world, "notes-1__get_note", note_id="n1"))["reasonCode"] == "loop_detected"
    return notes, asked["approvalId"]


def test_the_run_page_and_json_list_every_decision_in_order(app, db, world, providers):
    notes, approval_id = a_run_with_every_kind_of_decision(world)

    page = world.client.get(f"/runs/{world.run.id}")
    html = page.get_data(as_text=True)
    assert page.status_code == 200
    rows = re.findall(r'<tr data-kind="([a-z_]+)" data-decision="([a-z_]+)">', html)
    assert rows == [(kind, decision) for kind, decision, _summary in EXPECTED]
    assert f"Approved by {world.owner.name}" in html
    assert "Refused by the loop breaker (retry in " in html
    # Only digests: never an argument or a result.
    assert SECRET_ARG not in html and NOTE_BODY not in html and "swordfish" not in html

    answer = world.client.get(f"/api/runs/{world.run.id}/decisions")
    assert answer.status_code == 200
    body = answer.json
    assert SECRET_ARG not in answer.get_data(as_text=True) and NOTE_BODY not in answer.get_data(as_text=True)
    assert body["runId"] == str(world.run.id) and body["truncated"] is False
    decisions = body["decisions"]
    assert [(d["kind"], d["decision"]) for d in decisions] == [(k, d) for k, d, _s in EXPECTED]
    assert [d["sequence"] for d in decisions] == list(range(1, len(EXPECTED) + 1))
    assert [d["at"] for d in decisions] == sorted(d["at"] for d in decisions)
    for decision, (_kind, _decision, summary) in zip(decisions, EXPECTED, strict=True):
        assert summary is None or decision["summary"] == summary

    listed, allowed, blocked, asked, answered, used, looped = decisions
    assert re.fullmatch(r"[0-9a-f]{64}", listed["listingDigest"])
    assert allowed["tool"] == "notes-1__get_note" and allowed["connectionId"] == notes["id"]
    assert allowed["connectionName"] == "Notes 1" and allowed["outcome"] == "ok"
    assert allowed["argumentsDigest"] == canonical_digest({"note_id": "n1"})
    assert re.fullmatch(r"[0-9a-f]{64}", allowed["resultDigest"])
    assert isinstance(allowed["latencyMs"], int) and allowed["latencyMs"] >= 0
    assert blocked["outcome"] == "refused" and blocked["resultDigest"] is None
    projected = {"content": SECRET_ARG, "workspace_id": "team-workspace"}
    assert asked["argumentsDigest"] == used["argumentsDigest"] == canonical_digest(projected)
    assert asked["approvalId"] == used["approvalId"] == answered["approvalId"] == approval_id
    assert answered["by"] == world.owner.name and answered["byUserId"] == str(world.owner.id)
    assert answered["summary"] == f"Approved by {world.owner.name}"
    assert used["outcome"] == "ok" and used["trustRuleId"] is None
    assert looped["outcome"] == "refused" and 1 <= looped["retryAfterSeconds"] <= 60
    assert looped["argumentsDigest"] == allowed["argumentsDigest"]


def test_the_timeline_is_only_for_the_runs_company(app, db, make, world, providers):
    a_run_with_every_kind_of_decision(world)
    stranger = app.test_client()
    sign_in(stranger, make.member(make.company("Elsewhere"), "owner"))
    assert stranger.get(f"/api/runs/{world.run.id}/decisions").status_code == 404
    assert stranger.get(f"/runs/{world.run.id}").status_code == 404
    assert app.test_client().get(f"/api/runs/{world.run.id}/decisions").status_code == 401
    assert world.client.get("/api/runs/not-a-uuid/decisions").status_code == 404


def test_a_run_without_gateway_calls_says_so(app, db, world, client):
    assert "The run made no gateway calls." in world.client.get(f"/runs/{world.run.id}").get_data(
        as_text=True
    )
    assert world.client.get(f"/api/runs/{world.run.id}/decisions").json["decisions"] == []


def test_the_endpoint_is_in_the_openapi_document(app, client):
    document = client.get("/api/openapi.json").json
    operation = document["paths"]["/api/runs/{run_id}/decisions"]["get"]
    assert operation["summary"] == "A run's gateway decision timeline"
    schema = operation["responses"]["200"]["content"]["application/json"]["schema"]
    assert schema["$ref"].endswith("/RunDecisionsResponse")
