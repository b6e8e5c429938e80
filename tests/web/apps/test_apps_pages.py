"""The Apps pages: catalog, shared setup flow (against the real honcho-like MCP peer), Connections, Reconnect,
Permissions with the Agent instructions editor, and the agent's read-only "From connections" section."""

from __future__ import annotations

import re

import pytest
from flask import render_template
from sqlalchemy import func, select

from app.catalog.loader import get_app, template_default
from app.models import ConnectionInstall, ConnectionTool, GrantSecret, ToolConnection, ToolPolicy
from app.services.connections.audience import Audience, set_audience
from app.services.connections.setup import start_connection
from app.web.apps.agent_section import agent_connection_instructions
from tests.conftest import sign_in
from tests.factories import Factory
from tests.peers.mcp_servers import HONCHO_KEY

HX = {"HX-Request": "true"}
WRONG_KEY = "wrong-key-that-must-never-show-789"
OFF_NOTICE = "Agents can still use this connection’s tools, but won’t receive these instructions."
SAVE_FAILED = "Couldn’t save instructions. Try again."


@pytest.fixture
def providers(app, honcho_server):
    saved = app.config.get("PROVIDER_SERVER_URLS")
    app.config["PROVIDER_SERVER_URLS"] = {"honcho": honcho_server.url}
    yield honcho_server
    app.config["PROVIDER_SERVER_URLS"] = saved


def template():
    return template_default(get_app("honcho"))


def honcho_connection(db, make, company, user, *, workspace="team-workspace", name=None, tools=()):
    """An active Honcho connection made with the services (no provider call), installed for all agents."""
    membership = make.membership(company, user)
    connection = start_connection(
        membership,
        get_app("honcho"),
        method_key=None,
        identity="user",
        name=name,
        method_config={"workspaceId": workspace or "placeholder"},
    )
    if not workspace:
        connection.config = {**connection.config, "methodConfig": {}}
    connection.status, connection.enabled, connection.health_status = "active", True, "healthy"
    set_audience(membership, connection, Audience(all_agents=True))
    for tool_name, is_write in tools:
        db.session.add(
            ConnectionTool(
                company_id=company.id,
                connection_id=connection.id,
                name=tool_name,
                description=f"Does {tool_name}",
                is_write=is_write,
                version_hash="x" * 64,
            )
        )
    db.session.commit()
    return connection


def post(client, token, url, data, htmx=True):
    headers = {"X-CSRFToken": token, **(HX if htmx else {})}
    return client.post(url, data=data, headers=headers)


def editor_data(action, *, enabled=True, text=None, tmpl=True, editing=""):
    t = template()
    data = {"action": action, "text": t["text"] if text is None else text, "editing": editing}
    if enabled:
        data["enabled"] = "y"
    if tmpl:
        data["template_id"], data["template_version"] = t["template"]["id"], str(t["template"]["version"])
    return data


def html(response) -> str:
    return response.get_data(as_text=True)


def without_noscript(text: str) -> str:
    """What a browser with JavaScript shows (the no-JS Save fallback lives in <noscript>)."""
    return re.sub(r"<noscript>.*?</noscript>", "", text, flags=re.S)


# --- catalog -------------------------------------------------------------------------------------------------


def test_catalog_lists_apps_and_search_filters_as_a_fragment(client, acme):
    _company, _owner, member, *_ = acme
    sign_in(client, member)
    page = client.get("/apps")
    assert page.status_code == 200
    body = html(page)
    assert "<html" in body and 'href="/apps/honcho/connect"' in body and "Notion" in body
    assert 'name="q"' in body and 'action="/apps"' in body and 'hx-get="/apps"' in body
    fragment = client.get("/apps?q=memory", headers={**HX, "HX-Target": "app-list"})
    text = html(fragment)
    assert fragment.status_code == 200 and "<html" not in text and 'id="app-list"' in text
    assert "Honcho" in text and "Mem0" in text and "Notion" not in text
    by_category = html(client.get("/apps?category=content"))
    assert "/apps/notion/connect" in by_category and "/apps/honcho/connect" not in by_category
    assert "No apps match" in html(client.get("/apps?q=zzzz-nothing"))


def chip_labels(body: str) -> list[str]:
    nav = body.split('aria-label="Categories"', 1)[1].split("</nav>", 1)[0]
    return [re.sub(r"\s+", " ", label).strip() for label in re.findall(r'class="chip"[^>]*>([^<]*)<', nav)]


def test_category_chips_read_as_words_and_a_search_hides_the_empty_ones(client, acme):
    _company, _owner, member, *_ = acme
    sign_in(client, member)
    labels = chip_labels(html(client.get("/apps")))
    assert "AI" in labels and "CRM" in labels and "Project management" in labels
    assert not {"Ai", "Crm"} & set(labels)
    # "memory" matches memory apps only: the chips left are the categories those apps are in, each with a count.
    searched = html(client.get("/apps?q=memory", headers={**HX, "HX-Target": "app-list"}))
    assert "Payments" not in chip_labels(searched) and "Memory" in chip_labels(searched)
    assert 'class="count">0<' not in searched
    # The chosen category stays, even when the search empties it, so it can be seen and left.
    chosen = html(client.get("/apps?q=memory&category=payments"))
    assert "Payments" in chip_labels(chosen) and "No apps match" in chosen


def test_category_labels_come_from_the_catalog():
    from app.catalog.categories import category_label

    assert [category_label(s) for s in ("ai", "crm", "project-management", "ai-agents", "developer")] == [
        "AI",
        "CRM",
        "Project management",
        "AI agents",
        "Developer",
    ]


# --- setup flow --------------------------------------------------------------------------------------------------


def test_connect_page_shows_identity_credentials_and_public_fields(client, acme):
    _company, owner, member, *_ = acme
    sign_in(client, member)
    body = html(client.get("/apps/honcho/connect"))
    assert re.search(
        r'<input type="password" id="setup-credentials-authorization" name="credentials-authorization"', body
    )
    assert 'maxlength="512"' in body and 'placeholder="Workspace ID"' in body and "Honcho workspace" in body
    assert re.search(r'value="organization"[^>]*disabled', body)
    assert "Only people who can manage connections can connect an app for the whole organization." in body
    assert "Just me" in body and "All agents" in body and "Builder" in body
    sign_in(client, owner)
    body = html(client.get("/apps/honcho/connect"))
    assert not re.search(r'value="organization"[^>]*disabled', body)


def test_oauth_methods_sign_in_through_the_provider_and_method_switch_is_a_fragment(
    app, client, db, acme, oauth_mcp, oidc, monkeypatch
):
    _company, owner, *_ = acme
    token = sign_in(client, owner)
    body = html(client.get("/apps/linear/connect?method_key=mcp-oauth"))
    assert re.search(r'<button type="submit"[^>]*>Sign in with Linear</button>', body)
    # The browser must navigate to the provider itself: a boosted (XHR) post would hit CORS on the 303.
    assert re.search(r'<form method="post" action="/apps/linear/connect"[^>]*hx-boost="false"', body)
    assert "credentials-authorization" not in body
    page = html(client.get("/apps/github/connect"))
    assert 'name="method_key" value="mcp-key"' in page and 'name="method_key" value="oauth"' in page
    fragment = client.get("/apps/github/connect?method_key=oauth", headers={**HX, "HX-Target": "setup-flow"})
    text = html(fragment)
    assert "<html" not in text and text.lstrip().startswith('<div id="setup-flow"')
    assert "Sign in with GitHub" in text and "credentials-authorization" not in text
    assert client.get("/apps/nope/connect").status_code == 404
    # Submitting an OAuth method saves the draft and its audience, then sends the person to the provider.
    monkeypatch.setitem(app.config, "PROVIDER_SERVER_URLS", {"linear": oauth_mcp.url})
    response = post(
        client,
        token,
        "/apps/linear/connect",
        {"method_key": "mcp-oauth", "identity": "organization", "audience": "all", "name": "Linear (team)"},
    )
    assert response.status_code == 303, response.get_data(as_text=True)[:500]
    location = response.headers["Location"]
    assert location.startswith(oidc.issuer) and "code_challenge_method=S256" in location
    assert "code_verifier" not in location
    draft = db.session.scalar(select(ToolConnection).where(ToolConnection.name == "Linear (team)"))
    assert draft.status == "draft" and draft.enabled is False


def test_missing_workspace_is_an_inline_error_and_nothing_is_created(client, db, acme, providers):
    _company, _owner, member, *_ = acme
    token = sign_in(client, member)
    response = post(
        client,
        token,
        "/apps/honcho/connect",
        {
            "method_key": "mcp-api-key",
            "identity": "user",
            "credentials-authorization": HONCHO_KEY,
            "config-workspaceId": "  ",
            "audience": "all",
        },
        htmx=False,
    )
    assert response.status_code == 422
    body = html(response)
    assert re.search(r'id="setup-config-workspaceId-error" role="alert">Honcho workspace is required<', body)
    assert 'aria-invalid="true"' in body
    assert HONCHO_KEY.encode() not in response.get_data()
    assert db.session.scalar(select(func.count()).select_from(ToolConnection)) == 0
    assert providers.requests == []


def test_refused_key_keeps_the_draft_never_echoes_the_key_and_a_resubmit_finishes_it(
    client, db, acme, providers
):
    company, _owner, member, _viewer, agent = acme
    token = sign_in(client, member)
    form = {
        "method_key": "mcp-api-key",
        "identity": "user",
        "credentials-authorization": WRONG_KEY,
        "config-workspaceId": "team-workspace",
        "audience": "selected",
        "agent_ids": str(agent.id),
        "name": "Team memory",
    }
    refused = post(client, token, "/apps/honcho/connect", form, htmx=False)
    assert refused.status_code == 422
    raw = refused.get_data()
    assert WRONG_KEY.encode() not in raw
    body = html(refused)
    assert re.search(r'<div class="alert alert-danger" role="alert" id="setup-flow-refusal">', body)
    assert "Honcho refused the credentials." in body and "rejected the credentials" in body
    assert (
        "Your setup is kept: check the credentials and try again." in body
        and "draft" not in body.split('id="setup-flow-refusal"')[1].split("</div>")[0]
    )
    assert (
        'value="team-workspace"' in body and 'value="Team memory"' not in body
    )  # the kept draft names itself
    draft = db.session.scalars(select(ToolConnection)).one()
    assert draft.status == "draft" and draft.name == "Team memory"
    assert f'name="draft_id" value="{draft.id}"' in body
    assert db.session.scalar(select(func.count()).select_from(GrantSecret)) == 0

    finished = post(
        client,
        token,
        "/apps/honcho/connect",
        {**form, "credentials-authorization": HONCHO_KEY, "draft_id": str(draft.id)},
        htmx=False,
    )
    assert finished.status_code == 303
    assert finished.headers["Location"] == f"/apps/{draft.id}/permissions?done=connected"
    db.session.expire_all()
    connection = db.session.scalars(select(ToolConnection)).one()
    assert connection.id == draft.id and connection.status == "active"
    installs = db.session.scalars(select(ConnectionInstall)).all()
    assert [(i.target_type, i.target_id) for i in installs] == [("agent", agent.id)]
    assert connection.agent_instructions == template()
    assert connection.company_id == company.id


def test_after_a_refused_key_the_identity_and_method_can_be_changed_in_place(client, db, acme, providers):
    company, owner, *_ = acme
    token = sign_in(client, owner)
    form = {
        "method_key": "mcp-api-key",
        "identity": "user",
        "credentials-authorization": WRONG_KEY,
        "config-workspaceId": "team-workspace",
        "audience": "all",
    }
    refused = html(post(client, token, "/apps/honcho/connect", form, htmx=False))
    draft = db.session.scalars(select(ToolConnection)).one()
    # The kept setup still offers both identities, the one tried checked.
    assert 'id="setup-flow-kept"' in refused
    assert re.search(r'name="identity" value="user" checked', refused)
    assert re.search(r'name="identity" value="organization" ', refused)

    finished = post(
        client,
        token,
        "/apps/honcho/connect",
        {
            **form,
            "identity": "organization",
            "credentials-authorization": HONCHO_KEY,
            "draft_id": str(draft.id),
        },
        htmx=False,
    )
    assert finished.status_code == 303
    db.session.expire_all()
    connection = db.session.scalars(select(ToolConnection)).one()
    assert connection.id == draft.id and connection.status == "active"
    assert connection.config["identity"] == "organization"
    assert [g.kind for g in connection.grants] == ["organization"]


def test_switching_the_method_of_a_kept_setup_keeps_that_setup(client, db, acme):
    company, owner, *_ = acme
    sign_in(client, owner)
    draft = start_connection(
        Factory(db).membership(company, owner), get_app("linear"), method_key="mcp-key", identity="user"
    )
    db.session.commit()
    switched = html(
        client.get(
            f"/apps/linear/connect?method_key=mcp-oauth&draft_id={draft.id}",
            headers={**HX, "HX-Target": "setup-flow"},
        )
    )
    assert "<html" not in switched
    assert f'name="draft_id" value="{draft.id}"' in switched
    assert re.search(r'name="method_key" value="mcp-oauth" checked', switched)
    # The method radios carry the kept setup along when they switch again.
    assert 'hx-include="#setup-flow [name=draft_id]"' in switched


def test_a_draft_of_another_company_is_not_touched(client, db, acme, make, providers):
    _company, _owner, member, *_ = acme
    other = make.company("Other")
    other_owner = make.member(other, "owner")
    foreign = start_connection(
        make.membership(other, other_owner),
        get_app("honcho"),
        method_key=None,
        identity="user",
        method_config={"workspaceId": "theirs"},
    )
    db.session.commit()
    token = sign_in(client, member)
    response = post(
        client,
        token,
        "/apps/honcho/connect",
        {
            "identity": "user",
            "credentials-authorization": HONCHO_KEY,
            "config-workspaceId": "mine",
            "audience": "all",
            "draft_id": str(foreign.id),
        },
        htmx=False,
    )
    assert response.status_code == 303
    db.session.expire_all()
    assert db.session.get(ToolConnection, foreign.id).status == "draft"
    mine = db.session.scalar(select(ToolConnection).where(ToolConnection.id != foreign.id))
    assert mine.status == "active" and mine.method_config == {"workspaceId": "mine"}


def test_connect_with_the_right_key_lists_tools_and_secrets_never_render(client, db, acme, providers):
    _company, _owner, member, *_ = acme
    token = sign_in(client, member)
    response = post(
        client,
        token,
        "/apps/honcho/connect",
        {
            "method_key": "mcp-api-key",
            "identity": "user",
            "credentials-authorization": HONCHO_KEY,
            "config-workspaceId": "team-workspace",
            "audience": "all",
        },
        htmx=False,
    )
    assert response.status_code == 303
    connection = db.session.scalars(select(ToolConnection)).one()
    assert response.headers["Location"] == f"/apps/{connection.id}/permissions?done=connected"
    page = client.get(response.headers["Location"])
    body = html(page)
    for tool in ("search_memory", "save_memory", "list_workspaces"):
        assert f"<code>{tool}</code>" in body
    assert "Write" in body and "Read" in body
    ciphertext = db.session.scalars(select(GrantSecret)).one().ciphertext
    for url in (
        "/apps",
        "/connections",
        f"/apps/{connection.id}/permissions",
        f"/apps/{connection.id}/reconnect",
        "/apps/honcho/connect",
    ):
        raw = client.get(url).get_data()
        assert HONCHO_KEY.encode() not in raw and ciphertext.encode() not in raw, url
    listing = html(client.get("/connections"))
    assert "Honcho" in listing and f"/apps/{connection.id}/permissions" in listing and "Healthy" in listing


def test_reconnect_keeps_the_connection_and_refusal_is_inline(client, db, acme, providers):
    _company, _owner, member, *_ = acme
    token = sign_in(client, member)
    post(
        client,
        token,
        "/apps/honcho/connect",
        {
            "identity": "user",
            "credentials-authorization": HONCHO_KEY,
            "config-workspaceId": "ws",
            "audience": "all",
        },
        htmx=False,
    )
    connection = db.session.scalars(select(ToolConnection)).one()
    page = html(client.get(f"/apps/{connection.id}/reconnect"))
    assert (
        "credentials-authorization" in page
        and "config-workspaceId" not in page
        and 'name="identity"' not in page
    )
    refused = post(
        client, token, f"/apps/{connection.id}/reconnect", {"credentials-authorization": WRONG_KEY}
    )
    assert refused.status_code == 422 and WRONG_KEY.encode() not in refused.get_data()
    assert 'role="alert"' in html(refused)
    ok = post(
        client,
        token,
        f"/apps/{connection.id}/reconnect",
        {"credentials-authorization": HONCHO_KEY},
        htmx=False,
    )
    assert (
        ok.status_code == 303
        and ok.headers["Location"] == f"/apps/{connection.id}/permissions?done=connected"
    )
    assert db.session.scalar(select(func.count()).select_from(ToolConnection)) == 1


# --- permissions ---------------------------------------------------------------------------------------------------


def test_permissions_sections_are_in_order(client, db, make, acme):
    company, owner, *_ = acme
    connection = honcho_connection(db, make, company, owner, tools=[("search_memory", False)])
    sign_in(client, owner)
    body = html(client.get(f"/apps/{connection.id}/permissions"))
    headings = [
        'id="agent-access-heading"',
        'id="configuration-heading"',
        'id="agent-instructions-heading"',
        'id="actions-heading"',
    ]
    positions = [body.index(h) for h in headings]
    assert positions == sorted(positions)
    assert 'id="agent-instructions-editor"' in body and "Tell agents to use Honcho" in body
    assert 'maxlength="512"' in body and 'placeholder="Workspace ID"' in body
    assert "Enter a workspace" not in body


def test_editor_is_absent_without_a_template(client, db, make, acme):
    company, owner, *_ = acme
    membership = make.membership(company, owner)
    connection = start_connection(membership, get_app("github"), method_key="mcp-key", identity="user")
    db.session.commit()
    sign_in(client, owner)
    body = html(client.get(f"/apps/{connection.id}/permissions"))
    assert "Agent instructions" not in body and "agent-instructions-editor" not in body and "Actions" in body


def test_missing_workspace_shows_the_amber_note_and_saving_it_validates_inline(client, db, make, acme):
    company, owner, *_ = acme
    connection = honcho_connection(db, make, company, owner, workspace=None)
    token = sign_in(client, owner)
    note = "Enter a workspace to include Honcho instructions. Existing tools remain available."
    assert note in html(client.get(f"/apps/{connection.id}/permissions"))
    url = f"/apps/{connection.id}/configuration"
    bad = post(client, token, url, {"config-workspaceId": ""})
    assert bad.status_code == 422 and "<html" not in html(bad)
    assert re.search(r'id="config-workspaceId-error" role="alert">Honcho workspace is required<', html(bad))
    good = post(client, token, url, {"config-workspaceId": "team-workspace"})
    assert good.status_code == 200 and note not in html(good) and 'value="team-workspace"' in html(good)
    db.session.expire_all()
    assert db.session.get(ToolConnection, connection.id).method_config == {"workspaceId": "team-workspace"}


def test_narrowing_agent_access_removes_installs(client, db, make, acme):
    company, owner, *_rest, agent = acme
    other_agent = make.agent(company, "Reviewer")
    connection = honcho_connection(db, make, company, owner)
    token = sign_in(client, owner)
    response = post(
        client, token, f"/apps/{connection.id}/audience", {"audience": "selected", "agent_ids": str(agent.id)}
    )
    assert (
        response.status_code == 200
        and "<html" not in html(response)
        and "Agent access saved." in html(response)
    )
    installs = db.session.scalars(select(ConnectionInstall)).all()
    assert [(i.target_type, i.target_id) for i in installs] == [("agent", agent.id)]
    assert other_agent.id not in {i.target_id for i in installs}


def test_tool_policy_is_saved_from_the_row(client, db, make, acme):
    company, owner, *_ = acme
    connection = honcho_connection(db, make, company, owner, tools=[("save_memory", True)])
    token = sign_in(client, owner)
    response = post(
        client, token, f"/apps/{connection.id}/tools/policy", {"tool": "save_memory", "action": "block"}
    )
    assert response.status_code == 200 and html(response).lstrip().startswith("<tr")
    assert (
        db.session.scalar(select(ToolPolicy.action).where(ToolPolicy.tool_name == "save_memory")) == "block"
    )
    assert (
        post(
            client, token, f"/apps/{connection.id}/tools/policy", {"tool": "nope", "action": "block"}
        ).status_code
        == 404
    )


# --- the Agent instructions editor ----------------------------------------------------------------------------


def saved_setting(db, connection):
    db.session.expire_all()
    return db.session.get(ToolConnection, connection.id).agent_instructions


def test_toggle_off_shows_the_amber_notice_and_keeps_the_text(client, db, make, acme):
    company, owner, *_ = acme
    connection = honcho_connection(db, make, company, owner)
    token = sign_in(client, owner)
    response = post(
        client, token, f"/apps/{connection.id}/instructions", editor_data("toggle", enabled=False)
    )
    assert response.status_code == 200
    body = html(response)
    assert "<html" not in body and body.lstrip().startswith('<div id="agent-instructions-editor"')
    assert OFF_NOTICE in body
    assert saved_setting(db, connection) == {**template(), "enabled": False}
    page = html(client.get(f"/apps/{connection.id}/permissions"))
    assert OFF_NOTICE in page and 'id="agent-instructions-enabled"' in page


def test_edit_and_save_custom_text_drops_the_template_and_escapes_it(client, db, make, acme):
    company, owner, *_ = acme
    connection = honcho_connection(db, make, company, owner)
    token = sign_in(client, owner)
    url = f"/apps/{connection.id}/instructions"
    editing = without_noscript(html(post(client, token, url, editor_data("edit"))))
    # The editor never cuts a paste (no maxlength): the live count says where the limit is (issue 16).
    assert re.search(r'<textarea id="agent-instructions-text" name="text" rows="8"\s', editing)
    assert "maxlength" not in editing and " / 2,000 characters</small>" in editing
    assert "Save instructions" not in editing and "Reset to default" not in editing  # nothing changed yet
    custom = "Use <b>memory</b> & cite sources."
    typing = html(post(client, token, url, editor_data("edit", text=custom, editing="1")))
    assert "Save instructions" in typing and "Cancel" in typing and "Reset to default" in typing
    saved = post(client, token, url, editor_data("save", text=custom, editing="1"))
    assert saved.status_code == 200
    body = html(saved)
    assert (
        "Instructions saved." in body
        and "&lt;b&gt;memory&lt;/b&gt; &amp; cite" in body
        and "<b>memory" not in body
    )
    assert saved_setting(db, connection) == {"enabled": True, "text": custom}
    empty = html(post(client, token, url, editor_data("edit", text="   ", tmpl=False, editing="1")))
    assert "Enter instructions." in empty and re.search(r'value="save" disabled', empty)
    cancelled = html(post(client, token, url, editor_data("cancel", text="draft", tmpl=False, editing="1")))
    assert (
        "<textarea" not in cancelled and "cite sources" in cancelled and "Save instructions" not in cancelled
    )


def test_reset_brings_back_the_template_and_keeps_the_toggle_off(client, db, make, acme):
    company, owner, *_ = acme
    connection = honcho_connection(db, make, company, owner)
    connection.agent_instructions = {"enabled": False, "text": "Custom words."}
    db.session.commit()
    token = sign_in(client, owner)
    url = f"/apps/{connection.id}/instructions"
    reset = html(
        post(client, token, url, editor_data("reset", enabled=False, text="Custom words.", tmpl=False))
    )
    assert "Honcho is your long-term memory" in reset and "Save instructions" in reset and OFF_NOTICE in reset
    assert "Reset to default" not in reset
    assert f'name="template_id" value="{template()["template"]["id"]}"' in reset
    assert saved_setting(db, connection) == {
        "enabled": False,
        "text": "Custom words.",
    }  # the user still saves
    saved = post(client, token, url, editor_data("save", enabled=False))
    assert saved.status_code == 200
    assert saved_setting(db, connection) == {**template(), "enabled": False}


def test_failed_save_keeps_the_draft_with_an_inline_error(client, db, make, acme):
    company, owner, *_ = acme
    connection = honcho_connection(db, make, company, owner)
    token = sign_in(client, owner)
    url = f"/apps/{connection.id}/instructions"
    too_long = "  " + "y" * 2001 + "  "
    response = post(client, token, url, editor_data("save", text=too_long, tmpl=False, editing="1"))
    assert response.status_code == 422
    body = html(response)
    assert "<html" not in body and SAVE_FAILED in body and "limited to 2,000 characters" in body
    assert re.search(r'<div class="alert alert-danger" role="alert" id="agent-instructions-error">', body)
    assert "y" * 2001 in body and "<textarea" in body
    assert saved_setting(db, connection) == template()
    fits = "  " + "z" * 2000 + "  "
    assert (
        post(client, token, url, editor_data("save", text=fits, tmpl=False, editing="1")).status_code == 200
    )
    assert saved_setting(db, connection) == {"enabled": True, "text": "z" * 2000}
    page = post(client, token, url, editor_data("save", text=too_long, tmpl=False, editing="1"), htmx=False)
    assert page.status_code == 422 and "<html" in html(page) and "y" * 2001 in html(page)


@pytest.mark.parametrize("role", ["viewer", "member"])
def test_people_who_cannot_configure_see_no_forms_and_get_403(client, db, make, acme, role):
    company, owner, member, viewer, agent = acme
    connection = honcho_connection(db, make, company, owner, tools=[("save_memory", True)])
    person = {"viewer": viewer, "member": member}[role]
    token = sign_in(client, person)
    page = html(client.get(f"/apps/{connection.id}/permissions"))
    main = page[page.index("<main") :]
    assert "<form" not in main and "<textarea" not in main and "hx-post" not in main
    assert "Honcho is your long-term memory" in main and "team-workspace" in main and "Ask first" in main
    before = saved_setting(db, connection)
    for url, data in [
        (
            f"/apps/{connection.id}/instructions",
            editor_data("save", text="Mine now", tmpl=False, editing="1"),
        ),
        (f"/apps/{connection.id}/instructions", editor_data("toggle", enabled=False)),
        (f"/apps/{connection.id}/audience", {"audience": "selected", "agent_ids": str(agent.id)}),
        (f"/apps/{connection.id}/configuration", {"config-workspaceId": "hijack"}),
        (f"/apps/{connection.id}/tools/policy", {"tool": "save_memory", "action": "allow"}),
    ]:
        assert post(client, token, url, data).status_code == 403, url
    denied = html(
        post(client, token, f"/apps/{connection.id}/instructions", editor_data("save", text="Mine now"))
    )
    assert "Mine now" in denied and SAVE_FAILED in denied
    assert client.get(f"/apps/{connection.id}/reconnect").status_code == 403
    assert saved_setting(db, connection) == before
    db.session.expire_all()
    assert db.session.get(ToolConnection, connection.id).method_config == {"workspaceId": "team-workspace"}


def test_another_companys_connection_is_not_found(client, db, make, acme):
    _company, _owner, member, *_ = acme
    other = make.company("Other")
    other_owner = make.member(other, "owner")
    connection = honcho_connection(db, make, other, other_owner)
    token = sign_in(client, member)
    for url in (
        f"/apps/{connection.id}/permissions",
        f"/apps/{connection.id}/reconnect",
        "/apps/not-a-uuid/permissions",
    ):
        assert client.get(url).status_code == 404
    assert (
        post(client, token, f"/apps/{connection.id}/instructions", editor_data("toggle")).status_code == 404
    )
    assert post(client, token, f"/apps/{connection.id}/audience", {"audience": "all"}).status_code == 404
    assert connection.name not in html(client.get("/connections"))


# --- From connections -------------------------------------------------------------------------------------------


def test_from_connections_lists_disabled_and_incomplete_instructions(app, db, make, acme):
    company, owner, *_rest, agent = acme
    membership = make.membership(company, owner)
    off = honcho_connection(db, make, company, owner, name="Memory off")
    off.agent_instructions = {**template(), "enabled": False}
    incomplete = honcho_connection(db, make, company, owner, workspace=None, name="Memory incomplete")
    plain = honcho_connection(db, make, company, owner, name="No instructions")
    plain.agent_instructions = None
    other_agent = make.agent(company, "Elsewhere")
    only_other = honcho_connection(db, make, company, owner, name="Other agent only")
    set_audience(membership, only_other, Audience(False, (other_agent.id,)))
    start_connection(
        membership,
        get_app("honcho"),
        method_key=None,
        identity="user",
        name="Still a draft",
        method_config={"workspaceId": "w"},
    )
    db.session.commit()
    with app.test_request_context():
        items = agent_connection_instructions(agent)
        assert [i.name for i in items] == ["Memory incomplete", "Memory off"]
        by_name = {i.name: i for i in items}
        assert by_name["Memory off"].disabled and not by_name["Memory off"].incomplete
        assert by_name["Memory incomplete"].incomplete and not by_name["Memory incomplete"].disabled
        assert by_name["Memory off"].url == f"/apps/{off.id}/permissions"
        rendered = render_template("apps/_agent_connection_instructions.html", connection_instructions=items)
    assert "These instructions are turned off for this connection." in rendered
    assert "Complete this connection’s configuration before agents receive its instructions." in rendered
    assert "Enabled instructions are included when the connection is available for the task." in rendered
    assert f'href="/apps/{incomplete.id}/permissions"' in rendered and "<html" not in rendered


def test_a_connection_that_needs_reauthorization_offers_reconnect(client, db, acme):
    company, owner, *_ = acme
    connection = ToolConnection(
        company_id=company.id,
        app_slug="linear",
        name="Linear",
        status="active",
        enabled=True,
        health_status="needs_reauthorization",
        auth_kind="oauth",
        created_by_user_id=owner.id,
        config={"connectionMethodKey": "mcp-oauth", "methodConfig": {}, "identity": "organization"},
    )
    db.session.add(connection)
    db.session.commit()
    sign_in(client, owner)
    page = html(client.get(f"/apps/{connection.id}/permissions"))
    assert "no longer accepts this connection’s sign-in" in page
    assert f'href="/apps/{connection.id}/reconnect"' in page
    reconnect = html(client.get(f"/apps/{connection.id}/reconnect"))
    assert re.search(r'<button type="submit"[^>]*>Reconnect with Linear</button>', reconnect)


def test_an_unreachable_provider_is_named_as_such_not_as_refused_credentials(app, db, make, monkeypatch):
    """Issue 16: a connection failure says Switchboard could not reach the provider (and where), not that the
    provider refused the credentials."""
    import socket

    with socket.socket() as probe:  # a loopback port nothing listens on
        probe.bind(("127.0.0.1", 0))
        closed = probe.getsockname()[1]
    monkeypatch.setitem(app.config, "PROVIDER_SERVER_URLS", {"honcho": f"http://127.0.0.1:{closed}/mcp"})
    monkeypatch.setitem(app.config, "OUTBOUND_ALLOWED_HOSTS", ["127.0.0.1"])
    company = make.company("Acme")
    owner = make.member(company, "owner")
    client = app.test_client()
    token = sign_in(client, owner)
    form = {
        "method_key": "mcp-api-key",
        "identity": "user",
        "credentials-authorization": "any-key",
        "config-workspaceId": "team-workspace",
        "audience": "all",
    }
    refused = post(client, token, "/apps/honcho/connect", form, htmx=False)
    assert refused.status_code == 422
    body = html(refused)
    assert "Switchboard could not reach Honcho (127.0.0.1)." in body
    assert "connection refused" in body and "refused the credentials" not in body
    assert "Your setup is kept: try again in a moment, or check the server address." in body


def test_the_setup_form_shows_it_is_busy_and_cannot_be_sent_twice(app, db, make):
    company = make.company("Acme")
    owner = make.member(company, "owner")
    client = app.test_client()
    sign_in(client, owner)
    page = client.get("/apps/honcho/connect").get_data(as_text=True)
    assert 'hx-disabled-elt="find button[type=submit]" hx-indicator="this"' in page
    assert '<small class="busy-note muted" role="status">Checking with Honcho…</small>' in page
    assert 'rel="icon"' in page
