"""The agent's Runtime tab: choosing Claude Code, Codex or Gemini CLI and their settings, the secrets only the agent's
runs get (write-only, encrypted), who may change them, and the run page that shows what a CLI did."""

from __future__ import annotations

from html import unescape

import pytest
from sqlalchemy import select

from app.models import ActivityLog, Agent, AgentSecret
from app.models.run_logs import RunLog
from app.services import secrets_box
from app.services.agent_runtime import agent_secret_env
from tests.conftest import sign_in

SECRET = "sk-ant-secret-value-0123456789"


@pytest.fixture
def world(make):
    company = make.company("Acme")
    owner = make.member(company, "owner")
    member = make.member(company, "member")
    agent = make.agent(company, "Builder")
    return {"company": company, "owner": owner, "member": member, "agent": agent}


def post(client, token, url, data):
    return client.post(url, data=data, headers={"X-CSRFToken": token})


def test_the_runtime_tab_explains_each_adapter(client, world):
    sign_in(client, world["owner"])
    html = unescape(client.get(f"/agents/{world['agent'].id}/runtime").get_data(as_text=True))
    assert "How Builder runs" in html
    assert "Runs Anthropic's Claude Code CLI (claude -p)" in html
    assert "Runs OpenAI's Codex CLI (codex exec)" in html
    assert (
        "Runs Google's Gemini CLI (gemini, headless) on the worker with Switchboard's runtime tools and gateway as "
        "its MCP servers and the connection instructions appended to its system prompt. Its model key is the secret "
        "<code>GEMINI_API_KEY</code>."
    ) in html
    assert "Its model key is the secret <code>ANTHROPIC_API_KEY</code>." in html
    assert 'value="manual" checked' in html
    assert "No secrets yet." in html
    # The agents list says what each adapter is and links to the tab.
    listing = client.get("/agents").get_data(as_text=True)
    assert f'href="/agents/{world["agent"].id}/runtime">Manual</a>' in listing
    assert (
        "<strong>Claude Code</strong>, <strong>Codex</strong> and <strong>Gemini CLI</strong> run those CLIs"
        in listing
    )


def test_an_owner_makes_the_agent_a_claude_code_agent(client, db, world):
    token = sign_in(client, world["owner"])
    agent = world["agent"]
    response = post(
        client,
        token,
        f"/agents/{agent.id}/runtime",
        {
            "adapter_type": "claude_code",
            "binary": "/opt/claude/bin/claude",
            "model": "claude-sonnet-4-5",
            "base_url": "http://127.0.0.1:8080",
            "cwd": "/srv/work",
            "extra_args": "--permission-mode acceptEdits --add-dir '/srv/with space'",
            "timeout_seconds": "300",
            "env": "LOG_LEVEL=debug\n# a comment\n\nREGION=eu",
        },
    )
    assert response.status_code == 303
    assert response.headers["Location"] == f"/agents/{agent.id}/runtime"
    db.session.expire_all()
    stored = db.session.get(Agent, agent.id)
    assert stored.adapter_type == "claude_code"
    assert stored.adapter_config == {
        "binary": "/opt/claude/bin/claude",
        "model": "claude-sonnet-4-5",
        "baseUrl": "http://127.0.0.1:8080",
        "cwd": "/srv/work",
        "extraArgs": ["--permission-mode", "acceptEdits", "--add-dir", "/srv/with space"],
        "timeoutSeconds": 300,
        "env": {"LOG_LEVEL": "debug", "REGION": "eu"},
    }
    entry = db.session.scalar(select(ActivityLog).where(ActivityLog.action == "agent.updated"))
    assert entry.details == {
        "fields": ["adapter"],
        "adapterType": "claude_code",
        "settings": ["baseUrl", "binary", "cwd", "env", "extraArgs", "model", "timeoutSeconds"],
    }
    html = client.get(f"/agents/{agent.id}/runtime").get_data(as_text=True)
    assert "Builder now runs with Claude Code." in html
    assert "--add-dir &#39;/srv/with space&#39;" in html  # the saved arguments read back as typed
    assert 'value="claude_code" checked' in html


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("env", "LOG_LEVEL debug", "Environment line 1 must read NAME=value."),
        (
            "env",
            "PAPERCLIP_RUNTIME_TOOLS_TOKEN=x",
            "PAPERCLIP_RUNTIME_TOOLS_TOKEN is set by Switchboard for every run",
        ),
        ("base_url", "ftp://models", "The model API base URL must start with http:// or https://."),
        ("cwd", "relative/dir", "The working directory must be an absolute path."),
        ("extra_args", "--x 'unclosed", "Extra arguments: No closing quotation."),
    ],
)
def test_a_bad_setting_keeps_the_draft_and_says_why(client, db, world, field, value, message):
    token = sign_in(client, world["owner"])
    data = {"adapter_type": "codex", "model": "gpt-5-codex-draft", field: value}
    response = post(client, token, f"/agents/{world['agent'].id}/runtime", data)
    assert response.status_code == 422
    html = response.get_data(as_text=True)
    assert message in html
    assert 'value="gpt-5-codex-draft"' in html and 'value="codex" checked' in html
    db.session.expire_all()
    assert db.session.get(Agent, world["agent"].id).adapter_type == "manual"


def test_a_timeout_out_of_range_is_refused_inline(client, world):
    token = sign_in(client, world["owner"])
    response = post(
        client,
        token,
        f"/agents/{world['agent'].id}/runtime",
        {"adapter_type": "codex", "timeout_seconds": "0"},
    )
    assert response.status_code == 422
    assert "Number must be between 1 and 86400." in response.get_data(as_text=True)


def test_members_cannot_change_how_an_agent_runs(client, db, world):
    token = sign_in(client, world["member"])
    agent = world["agent"]
    html = client.get(f"/agents/{agent.id}/runtime").get_data(as_text=True)
    assert "Only owners and admins can change how an agent runs." in unescape(html)
    assert 'name="adapter_type"' not in html and "Save secret" not in html
    assert post(client, token, f"/agents/{agent.id}/runtime", {"adapter_type": "codex"}).status_code == 403
    response = post(client, token, f"/agents/{agent.id}/secrets", {"name": "OPENAI_API_KEY", "value": SECRET})
    assert response.status_code == 403
    db.session.expire_all()
    assert db.session.get(Agent, agent.id).adapter_type == "manual"
    assert db.session.scalar(select(AgentSecret)) is None


def test_another_companys_agent_is_not_found(client, make, world):
    other = make.company("Other")
    outsider = make.member(other, "owner")
    token = sign_in(client, outsider)
    agent = world["agent"]
    assert client.get(f"/agents/{agent.id}/runtime").status_code == 404
    assert post(client, token, f"/agents/{agent.id}/runtime", {"adapter_type": "codex"}).status_code == 404
    assert (
        post(client, token, f"/agents/{agent.id}/secrets", {"name": "K", "value": SECRET}).status_code == 404
    )


def test_a_secret_is_encrypted_write_only_and_removable(client, db, world):
    token = sign_in(client, world["owner"])
    agent = world["agent"]
    response = post(
        client, token, f"/agents/{agent.id}/secrets", {"name": "ANTHROPIC_API_KEY", "value": SECRET}
    )
    assert response.status_code == 303
    html = client.get(f"/agents/{agent.id}/runtime").get_data(as_text=True)
    assert "Secret ANTHROPIC_API_KEY saved. It is not shown again." in html
    assert "<code>ANTHROPIC_API_KEY</code>" in html
    assert SECRET not in html
    row = db.session.scalar(select(AgentSecret))
    assert row.ciphertext != SECRET and SECRET not in row.ciphertext
    assert secrets_box.decrypt(row.ciphertext) == SECRET
    assert agent_secret_env(db.session.get(Agent, agent.id)) == {"ANTHROPIC_API_KEY": SECRET}
    entries = list(db.session.scalars(select(ActivityLog).where(ActivityLog.action.like("agent.secret%"))))
    assert [(e.action, e.details) for e in entries] == [("agent.secret_set", {"name": "ANTHROPIC_API_KEY"})]

    # Replacing keeps one row; a refused name never echoes the value back.
    post(client, token, f"/agents/{agent.id}/secrets", {"name": "ANTHROPIC_API_KEY", "value": SECRET + "2"})
    assert len(list(db.session.scalars(select(AgentSecret)))) == 1
    refused = post(client, token, f"/agents/{agent.id}/secrets", {"name": "PAPERCLIP_X", "value": SECRET})
    assert refused.status_code == 422
    refused_html = refused.get_data(as_text=True)
    assert "PAPERCLIP_X is set by Switchboard for every run; choose another name." in refused_html
    assert SECRET not in refused_html

    removed = post(client, token, f"/agents/{agent.id}/secrets/ANTHROPIC_API_KEY/remove", {})
    assert removed.status_code == 303
    db.session.expire_all()
    assert db.session.scalar(select(AgentSecret)) is None
    assert "Secret ANTHROPIC_API_KEY removed." in client.get(f"/agents/{agent.id}/runtime").get_data(
        as_text=True
    )


def test_the_run_page_shows_what_the_cli_did(client, db, make, world):
    sign_in(client, world["owner"])
    issue = make.issue(world["company"], status="in_progress", assignee=world["agent"])
    run, _token = make.run(world["agent"], issue)
    db.session.add(
        RunLog(
            run_id=run.id,
            company_id=run.company_id,
            adapter_type="claude_code",
            exit_code=0,
            stdout="",
            stderr="",
            session_id="sess-1",
            events=[
                {"type": "session", "sessionId": "sess-1"},
                {"type": "tool_call", "server": "gateway", "tool": "honcho__list_workspaces", "status": "ok"},
                {"type": "message", "text": "<b>Done</b>"},
            ],
            summary={
                "sessionId": "sess-1",
                "finalMessage": "<b>Done</b>",
                "toolCalls": [{"server": "gateway", "tool": "honcho__list_workspaces", "status": "ok"}],
                "usage": {"inputTokens": 1200, "outputTokens": 80},
                "costUsd": 0.0123,
                "eventsDropped": 0,
            },
        )
    )
    db.session.commit()
    html = client.get(f"/runs/{run.id}").get_data(as_text=True)
    assert "What the agent did" in html
    assert "&lt;b&gt;Done&lt;/b&gt;" in html and "<b>Done</b>" not in html
    assert "through the gateway: <code>honcho__list_workspaces</code>" in html
    assert "<strong>Tokens:</strong> 1200 in, 80 out; cost $0.0123" in html
    assert "Events (3)" in html
