"""Board JSON API for tool connections, against real MCP provider peers on loopback."""

import json
import socket

import pytest
from sqlalchemy import select

from app.catalog.loader import get_app, template_default
from app.models import ActivityLog, ConnectionInstall, GrantSecret, ToolConnection, ToolPolicy
from app.services.secrets_box import decrypt
from tests.conftest import sign_in
from tests.peers.mcp_servers import HONCHO_KEY, NOTES_KEY

CONFIGURE_FORBIDDEN = (
    "Only the connection creator or a connection manager can configure, reconnect, or delete this connection"
)


def api(client, token, method, url, body=None):
    return client.open(url, method=method, json=body, headers={"X-CSRFToken": token})


def connect_honcho(client, token, company, key=HONCHO_KEY, workspace="team-workspace", **extra):
    body = {
        "appSlug": "honcho",
        "identity": "organization",
        "credentials": {"authorization": key},
        "methodConfig": {"workspaceId": workspace} if workspace is not None else {},
        **extra,
    }
    return api(client, token, "POST", f"/api/companies/{company.id}/tools/apps/connect", body)


def test_connect_by_api_key_verifies_indexes_and_persists_the_template(
    client, db, acme, providers, honcho_server
):
    company, owner, *_ = acme
    token = sign_in(client, owner)
    response = connect_honcho(client, token, company)
    assert response.status_code == 201, response.json
    data = response.json
    assert data["status"] == "active" and data["enabled"] is True and data["healthStatus"] == "healthy"
    assert data["agentInstructions"] == template_default(get_app("honcho"))
    assert data["config"]["methodConfig"] == {"workspaceId": "team-workspace"}
    assert data["audience"] == {"allAgents": True, "agentIds": []}
    tools = {t["name"]: t for t in data["tools"]}
    assert {"search_memory", "save_memory", "list_workspaces"} <= set(tools)
    assert tools["search_memory"]["action"] == "allow" and tools["save_memory"]["action"] == "ask_first"
    assert any(r.auth == "ok" for r in honcho_server.requests)
    raw = response.get_data()
    assert HONCHO_KEY.encode() not in raw
    secret = db.session.scalar(select(GrantSecret))
    assert HONCHO_KEY not in secret.ciphertext and decrypt(secret.ciphertext) == HONCHO_KEY


def test_refused_key_keeps_the_draft_and_stores_nothing_usable(client, db, acme, providers):
    company, owner, *_ = acme
    token = sign_in(client, owner)
    response = connect_honcho(client, token, company, key="wrong-key-999")
    assert response.status_code == 422
    assert "rejected the credentials" in response.json["error"]
    assert b"wrong-key-999" not in response.get_data()
    connection = db.session.get(ToolConnection, __import__("uuid").UUID(response.json["connectionId"]))
    assert connection.status == "draft" and connection.enabled is False
    assert db.session.scalars(select(GrantSecret)).all() == []
    # Finishing the same draft with the right key activates that same connection.
    finish = api(
        client,
        token,
        "POST",
        f"/api/companies/{company.id}/tools/apps/{connection.id}/finish",
        {"credentials": {"authorization": HONCHO_KEY}},
    )
    assert finish.status_code == 200 and finish.json["id"] == str(connection.id)
    assert finish.json["status"] == "active"


def test_missing_required_workspace_conflicts_with_the_apps_method(client, acme, providers):
    # The body is one the document allows; the app's connection method asks for more: 409, the field named.
    company, owner, *_ = acme
    token = sign_in(client, owner)
    response = connect_honcho(client, token, company, workspace=None)
    assert response.status_code == 409
    assert response.json["error"] == "Validation error"
    assert ["methodConfig", "workspaceId"] in [d["loc"] for d in response.json["details"]]


def test_unknown_keys_and_bad_shapes_are_refused(client, acme, providers):
    company, owner, *_ = acme
    token = sign_in(client, owner)
    url = f"/api/companies/{company.id}/tools/apps/connect"
    assert api(client, token, "POST", url, {"appSlug": "honcho", "surprise": 1}).status_code == 400
    assert api(client, token, "POST", url, {"appSlug": "nope"}).status_code == 404
    bad = client.post(
        url, data="not json", headers={"X-CSRFToken": token, "Content-Type": "application/json"}
    )
    assert bad.status_code == 400 and bad.json["error"] == "Validation error"


def test_reconnect_keeps_id_grants_instructions_and_policies(client, db, acme, providers):
    company, owner, *_ = acme
    token = sign_in(client, owner)
    created = connect_honcho(client, token, company).json
    connection_id = created["id"]
    custom = {"enabled": False, "text": "Only recall project decisions."}
    assert (
        api(
            client,
            token,
            "PATCH",
            f"/api/tool-connections/{connection_id}",
            {"agentInstructions": custom, "toolPolicies": {"search_memory": "block"}},
        ).status_code
        == 200
    )
    grant_ids_before = {
        g.id for g in db.session.get(ToolConnection, __import__("uuid").UUID(connection_id)).grants
    }
    # A refused rotation keeps the working key and the active connection.
    refused = api(
        client,
        token,
        "POST",
        f"/api/companies/{company.id}/tools/apps/{connection_id}/finish",
        {"credentials": {"authorization": "rotated-but-wrong"}},
    )
    assert refused.status_code == 422
    db.session.expire_all()
    assert decrypt(db.session.scalar(select(GrantSecret)).ciphertext) == HONCHO_KEY
    rotated = api(
        client,
        token,
        "POST",
        f"/api/companies/{company.id}/tools/apps/{connection_id}/finish",
        {"credentials": {"authorization": HONCHO_KEY}},
    )
    assert rotated.status_code == 200
    data = rotated.json
    assert data["id"] == connection_id and data["status"] == "active"
    assert data["agentInstructions"] == custom
    assert {t["name"]: t["action"] for t in data["tools"]}["search_memory"] == "block"
    db.session.expire_all()
    connection = db.session.get(ToolConnection, __import__("uuid").UUID(connection_id))
    assert {g.id for g in connection.grants} == grant_ids_before
    actions = [a.action for a in db.session.scalars(select(ActivityLog).order_by(ActivityLog.created_at))]
    assert "tool_connection.reconnected" in actions


def test_instruction_settings_rules_through_patch(client, db, acme, providers):
    company, owner, *_ = acme
    token = sign_in(client, owner)
    cid = connect_honcho(client, token, company).json["id"]
    url = f"/api/tool-connections/{cid}"
    default = template_default(get_app("honcho"))

    off = api(client, token, "PATCH", url, {"agentInstructions": {**default, "enabled": False}})
    assert (
        off.json["agentInstructions"]["text"] == default["text"]
        and off.json["agentInstructions"]["enabled"] is False
    )
    assert {t["name"] for t in off.json["tools"]} >= {"search_memory"}

    trimmed = api(
        client, token, "PATCH", url, {"agentInstructions": {"enabled": True, "text": "  Custom words  "}}
    )
    assert trimmed.json["agentInstructions"] == {"enabled": True, "text": "Custom words"}

    too_long = api(client, token, "PATCH", url, {"agentInstructions": {"enabled": True, "text": "x" * 2001}})
    assert too_long.status_code == 400 and too_long.json["error"] == "Validation error"
    blank = api(client, token, "PATCH", url, {"agentInstructions": {"enabled": True, "text": "   "}})
    assert blank.status_code == 400

    cleared = api(client, token, "PATCH", url, {"agentInstructions": None})
    assert cleared.status_code == 200 and cleared.json["agentInstructions"] is None
    db.session.expire_all()
    assert db.session.get(ToolConnection, __import__("uuid").UUID(cid)).agent_instructions is None

    empty = api(client, token, "PATCH", url, {})
    assert empty.status_code == 400
    assert empty.json == {"error": "At least one tool connection field is required"}


def test_custom_connection_saves_instructions_without_a_template(
    client, db, acme, providers, notes_server, monkeypatch
):
    company, owner, *_ = acme
    token = sign_in(client, owner)
    app_config = client.application.config
    # A loopback server URL typed by a member is refused unless the operator allow-lists the host.
    refused = api(
        client,
        token,
        "POST",
        f"/api/companies/{company.id}/tools/apps/connect",
        {
            "appSlug": "custom",
            "methodKey": "custom-api-key",
            "identity": "organization",
            "credentials": {"authorization": NOTES_KEY},
            "methodConfig": {"serverUrl": notes_server.url},
        },
    )
    assert refused.status_code == 422 and "private or local address" in refused.json["error"]
    assert notes_server.requests == []
    monkeypatch.setitem(app_config, "OUTBOUND_ALLOWED_HOSTS", ["127.0.0.1"])
    body = {
        "appSlug": "custom",
        "methodKey": "custom-api-key",
        "identity": "organization",
        "name": "Release handbook",
        "credentials": {"authorization": NOTES_KEY},
        "methodConfig": {"serverUrl": notes_server.url},
        "agentInstructions": {
            "enabled": True,
            "text": "Use the release handbook before changing a deployment.",
        },
    }
    response = api(client, token, "POST", f"/api/companies/{company.id}/tools/apps/connect", body)
    assert response.status_code == 201, response.json
    assert response.json["agentInstructions"] == {
        "enabled": True,
        "text": "Use the release handbook before changing a deployment.",
    }


def test_a_custom_server_name_that_rebinds_to_loopback_never_reaches_it(
    client, db, acme, providers, notes_server, monkeypatch
):
    """DNS rebinding against the setup flow: the name answers a public address to the URL check, then loopback.
    The MCP client connects only to addresses checked at connect time, so the loopback server sees nothing."""
    company, owner, *_ = acme
    token = sign_in(client, owner)
    port = int(notes_server.url.split(":")[2].split("/")[0])
    real_getaddrinfo = socket.getaddrinfo
    answers = iter(["93.184.216.34"])

    def rebinding(host, *args, **kwargs):
        name = host.decode() if isinstance(host, bytes) else host  # anyio asks with IDNA-encoded bytes
        if name != "rebind.example":
            return real_getaddrinfo(host, *args, **kwargs)
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (next(answers, "127.0.0.1"), port))]

    monkeypatch.setattr(socket, "getaddrinfo", rebinding)  # the resolver, not our code
    body = {
        "appSlug": "custom",
        "methodKey": "custom-api-key",
        "identity": "organization",
        "credentials": {"authorization": NOTES_KEY},
        "methodConfig": {"serverUrl": f"http://rebind.example:{port}/mcp"},
    }
    refused = api(client, token, "POST", f"/api/companies/{company.id}/tools/apps/connect", body)
    assert refused.status_code == 422, refused.json
    assert notes_server.requests == []


def test_mutations_need_configure_permission_and_the_same_company(client, db, make, acme, providers):
    company, owner, member, viewer, _agent = acme
    owner_token = sign_in(client, owner)
    cid = connect_honcho(client, owner_token, company).json["id"]
    patch = {"enabled": False}

    member_client = client.application.test_client()
    member_token = sign_in(member_client, member)
    denied = api(member_client, member_token, "PATCH", f"/api/tool-connections/{cid}", patch)
    assert denied.status_code == 403 and denied.json == {"error": CONFIGURE_FORBIDDEN}, denied.get_data()
    finish_denied = api(
        member_client, member_token, "POST", f"/api/companies/{company.id}/tools/apps/{cid}/finish", {}
    )
    assert finish_denied.status_code == 403
    org_denied = connect_honcho(member_client, member_token, company)
    assert org_denied.status_code == 403

    viewer_client = client.application.test_client()
    viewer_token = sign_in(viewer_client, viewer)
    assert api(viewer_client, viewer_token, "PATCH", f"/api/tool-connections/{cid}", patch).status_code == 403
    assert connect_honcho(viewer_client, viewer_token, company, identity="user").status_code == 403

    other = make.company("Other")
    outsider = make.member(other, "owner")
    outsider_client = client.application.test_client()
    outsider_token = sign_in(outsider_client, outsider)
    assert (
        api(outsider_client, outsider_token, "PATCH", f"/api/tool-connections/{cid}", patch).status_code
        == 404
    )
    assert api(outsider_client, outsider_token, "GET", f"/api/tool-connections/{cid}").status_code == 404
    assert (
        api(
            outsider_client,
            outsider_token,
            "POST",
            f"/api/companies/{company.id}/tools/apps/{cid}/finish",
            {},
        ).status_code
        == 404
    )
    assert (
        api(
            outsider_client, outsider_token, "POST", f"/api/companies/{other.id}/tools/apps/{cid}/finish", {}
        ).status_code
        == 404
    )
    assert connect_honcho(outsider_client, outsider_token, company).status_code == 404
    db.session.expire_all()
    assert db.session.get(ToolConnection, __import__("uuid").UUID(cid)).enabled is True


def test_member_manages_their_personal_connection(client, db, acme, providers):
    company, _owner, member, *_ = acme
    token = sign_in(client, member)
    created = connect_honcho(client, token, company, identity="user")
    assert created.status_code == 201 and created.json["identity"] == "user"
    patched = api(client, token, "PATCH", f"/api/tool-connections/{created.json['id']}", {"enabled": False})
    assert patched.status_code == 200 and patched.json["enabled"] is False


def test_narrowing_the_audience_removes_installs(client, db, make, acme, providers):
    company, owner, _member, _viewer, builder = acme
    researcher = make.agent(company, "Researcher")
    token = sign_in(client, owner)
    cid = connect_honcho(client, token, company).json["id"]
    url = f"/api/tool-connections/{cid}"
    narrowed = api(
        client, token, "PATCH", url, {"audience": {"allAgents": False, "agentIds": [str(builder.id)]}}
    )
    assert narrowed.json["audience"] == {"allAgents": False, "agentIds": [str(builder.id)]}
    installs = db.session.scalars(select(ConnectionInstall)).all()
    assert [(i.target_type, i.target_id) for i in installs] == [("agent", builder.id)]
    other_company_agent = make.agent(make.company("Elsewhere"), "Spy")
    refused = api(
        client,
        token,
        "PATCH",
        url,
        {"audience": {"allAgents": False, "agentIds": [str(other_company_agent.id)]}},
    )
    assert refused.status_code == 409  # an agent the company does not have: a conflict with its state
    assert refused.json["details"] == [
        {"loc": ["audience", "agentIds"], "msg": "Choose agents of this company", "type": "value_error"}
    ]
    cleared = api(client, token, "PATCH", url, {"audience": {"allAgents": False, "agentIds": []}})
    assert cleared.json["audience"] == {"allAgents": False, "agentIds": []}
    assert db.session.scalars(select(ConnectionInstall)).all() == []
    assert researcher.id != builder.id


def test_activity_records_digests_and_never_secrets(client, db, acme, providers):
    company, owner, *_ = acme
    token = sign_in(client, owner)
    cid = connect_honcho(client, token, company).json["id"]
    api(
        client,
        token,
        "PATCH",
        f"/api/tool-connections/{cid}",
        {"agentInstructions": {"enabled": True, "text": "New"}},
    )
    rows = db.session.scalars(select(ActivityLog).order_by(ActivityLog.created_at)).all()
    actions = [r.action for r in rows]
    assert actions[:3] == ["tool_app.connected", "tool_app.finished", "tool_connection.updated"]
    updated = rows[2].details
    assert updated["fields"] == ["agentInstructions"]
    assert updated["instructionsDigestBefore"] != updated["instructionsDigestAfter"]
    dump = json.dumps([r.details for r in rows])
    assert HONCHO_KEY not in dump
    listing = client.get(f"/api/companies/{company.id}/tool-connections")
    assert listing.status_code == 200 and HONCHO_KEY.encode() not in listing.get_data()
    assert len(listing.json["connections"]) == 1


def test_catalog_refresh_keeps_saved_settings_and_template_bumps_do_not_replace_custom_text(
    client, db, acme, providers, tmp_path
):
    import shutil

    from app.catalog.loader import DEFINITIONS_DIR, ingest_definitions

    company, owner, *_ = acme
    token = sign_in(client, owner)
    cid = connect_honcho(client, token, company).json["id"]
    custom = {"enabled": True, "text": "Our custom guidance."}
    api(client, token, "PATCH", f"/api/tool-connections/{cid}", {"agentInstructions": custom})
    bumped = tmp_path / "defs"
    shutil.copytree(DEFINITIONS_DIR, bumped)
    data = json.loads((bumped / "honcho.json").read_text())
    data["agentInstructions"]["version"] += 1
    data["agentInstructions"]["text"] += " Version two."
    (bumped / "honcho.json").write_text(json.dumps(data))
    try:
        ingest_definitions(bumped)
        db.session.commit()
        assert (
            template_default(get_app("honcho"))["template"]["version"] == data["agentInstructions"]["version"]
        )
        again = api(
            client,
            token,
            "POST",
            f"/api/companies/{company.id}/tools/apps/{cid}/finish",
            {"credentials": {"authorization": HONCHO_KEY}},
        )
        assert again.json["agentInstructions"] == custom
    finally:
        ingest_definitions(DEFINITIONS_DIR)
        db.session.commit()
    policies = db.session.scalars(select(ToolPolicy)).all()
    assert policies


@pytest.mark.parametrize(
    "body",
    [
        {"toolPolicies": None},
        {"enabled": None},
        {"name": None},
        {"methodConfig": None},
        {"audience": None},
        {"enabled": "yes"},
        {"enabled": "false"},
        {"enabled": 1},
        {"enabled": 0},
        {"audience": {"allAgents": "true"}},
        {"agentInstructions": {"enabled": "on", "text": "Use it"}},
        {"agentInstructions": {"enabled": True, "text": "x", "template": {"id": "t", "version": "1"}}},
        {"methodConfig": {"workspaceId": 1}},
    ],
    ids=repr,
)
def test_patch_refuses_null_where_the_schema_does_not_allow_it_and_booleans_are_strict(
    client, db, acme, providers, body
):
    company, owner, *_ = acme
    token = sign_in(client, owner)
    created = connect_honcho(client, token, company)
    assert created.status_code == 201, created.json
    url = f"/api/tool-connections/{created.json['id']}"
    response = api(client, token, "PATCH", url, body)
    assert response.status_code == 400, response.json
    assert response.json["error"] == "Validation error"
    assert response.json["details"] and all(
        {"loc", "msg", "type"} <= set(d) for d in response.json["details"]
    )
    after = api(client, token, "GET", url).json
    assert after["enabled"] is True
    assert after["config"] == created.json["config"] and after["tools"] == created.json["tools"]


def test_patch_null_instructions_clears_them_and_the_document_says_which_fields_are_nullable(
    client, db, acme, providers
):
    company, owner, *_ = acme
    token = sign_in(client, owner)
    created = connect_honcho(client, token, company)
    assert created.json["agentInstructions"] is not None  # honcho's template is enabled by default
    url = f"/api/tool-connections/{created.json['id']}"
    cleared = api(client, token, "PATCH", url, {"agentInstructions": None})
    assert cleared.status_code == 200 and cleared.json["agentInstructions"] is None
    assert api(client, token, "PATCH", url, {"enabled": False}).json["enabled"] is False

    schemas = client.get("/api/openapi.json").json["components"]["schemas"]

    def nullable(prop: dict) -> bool:
        return prop.get("type") == "null" or any(
            branch.get("type") == "null" for branch in prop.get("anyOf", [])
        )

    patch = schemas["PatchBody"]["properties"]
    assert nullable(patch["agentInstructions"])
    for name in ("name", "enabled", "methodConfig", "audience", "toolPolicies"):
        assert not nullable(patch[name]) and "default" not in patch[name], name
    assert patch["enabled"] == {"title": "Enabled", "type": "boolean"}
    finish = schemas["FinishBody"]["properties"]
    assert nullable(finish["agentInstructions"])
    assert not nullable(finish["methodConfig"]) and not nullable(finish["audience"])
