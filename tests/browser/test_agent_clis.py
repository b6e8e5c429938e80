"""Real agent CLIs run on Switchboard, end to end (issue 25): Claude Code 2.1.332, Codex 0.171.0 and Gemini CLI 0.61.0,
the npm packages installed by `make peers`, each driven by the scripted model server on loopback
(tests/peers/model_server.py).

The scene, for each CLI:
1. Builder (adapter `claude_code`, `codex` or `gemini`, its model key an encrypted agent secret) wakes on its task.
   The model calls `connections_search` and then `connection_request` for Honcho, which is not connected: a card
   appears.
2. The responsible person connects Honcho by API key in the card's dialog, in Chromium.
3. The continuation (exactly one wake) runs in a fresh session: the model calls Honcho's `list_workspaces` through the
   tool gateway, and the provider's answer reaches the model.
4. The model server saw Honcho's connection-instruction text in the system prompt (Codex: developer instructions;
   Gemini CLI: `systemInstruction`) of the continuation and not of the first run; the run logs hold the CLI's
   session, tool calls and final message.

Assertions read persisted state and what crossed the wire, not the CLI's words. The CLIs run with telemetry, update
checks and non-essential traffic off (tests/peers/AGENT_CLIS.md: strace shows loopback only).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from playwright.sync_api import expect
from sqlalchemy import func, select

from app.models import ActivityLog, HeartbeatRun, Membership, ThreadInteraction, WakeupRequest
from app.models.run_logs import RunLog
from app.services.agent_runtime import set_agent_secret
from app.services.runs.wake_context import TURN_KEY
from app.services.runs.wakeups import request_wakeup
from app.workers.continuations import sweep_pending
from app.workers.run_executor import execute_next_run
from tests.browser.conftest import sign_in_through_the_form
from tests.factories import DEFAULT_PASSWORD
from tests.peers.agent_clis import INSTALL_HINT, claude_binary, codex_binary, gemini_binary
from tests.peers.mcp_servers import HONCHO_KEY
from tests.peers.model_server import (
    Rule,
    ScriptedModelServer,
    Text,
    ToolCall,
    all_of,
    last_tool_result_from,
    no_tool_result_yet,
    user_text_contains,
)
from tests.services.runtime.test_runtime_rest import connect, honcho_body

MODEL_KEY = "sk-scripted-model-key-0123456789"
FINAL_FIRST = "I asked for Honcho; I will continue once it is connected."
FINAL_SECOND = "Honcho is connected and its workspaces are listed."

CLIS = {
    "claude_code": {
        "binary": claude_binary,
        "key": "ANTHROPIC_API_KEY",
        "model": "claude-sonnet-4-5",
        "path": "",
    },
    "codex": {"binary": codex_binary, "key": "OPENAI_API_KEY", "model": "gpt-5-codex", "path": "/v1"},
    "gemini": {"binary": gemini_binary, "key": "GEMINI_API_KEY", "model": "gemini-2.5-flash", "path": ""},
}


def scene() -> list[Rule]:
    continuation = user_text_contains("connected Honcho")
    return [
        Rule(all_of(continuation, no_tool_result_yet), ToolCall("list_workspaces", {})),
        Rule(last_tool_result_from("list_workspaces"), Text(FINAL_SECOND)),
        Rule(no_tool_result_yet, ToolCall("connections_search", {"query": "honcho"})),
        Rule(
            last_tool_result_from("connections_search"), ToolCall("connection_request", {"service": "honcho"})
        ),
        Rule(last_tool_result_from("connection_request"), Text(FINAL_FIRST)),
    ]


@pytest.fixture
def agent_cli_world(app, db, make, providers, live_server, monkeypatch, tmp_path, request):
    adapter_type = request.param
    spec = CLIS[adapter_type]
    binary = spec["binary"]()
    if binary is None:
        pytest.skip(INSTALL_HINT)
    monkeypatch.setitem(app.config, "PUBLIC_BASE_URL", live_server)
    monkeypatch.setitem(app.config, "AGENT_HOME_ROOT", str(tmp_path / "agent-homes"))
    # The person's own home: the CLIs must never write their config there.
    home = tmp_path / "person-home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    with ScriptedModelServer(scene()) as model:
        company, owner, agent, issue = make.team(
            adapter_type=adapter_type,
            adapter_config={
                "binary": binary,
                "model": spec["model"],
                "baseUrl": model.url + spec["path"],
                "timeoutSeconds": 180,
            },
        )
        owner_membership = db.session.scalar(select(Membership).where(Membership.user_id == owner.id))
        set_agent_secret(owner_membership, agent, spec["key"], MODEL_KEY)
        db.session.commit()
        yield {
            "adapter_type": adapter_type,
            "model": model,
            "company": company,
            "owner": owner,
            "agent": agent,
            "issue": issue,
            "home": home,
        }


def _run_log(db, run: HeartbeatRun) -> RunLog:
    db.session.expire_all()
    log = db.session.get(RunLog, run.id)
    run = db.session.get(HeartbeatRun, run.id)
    assert log is not None
    assert run.status == "succeeded", (run.error, log.stdout[-3000:], log.stderr[-3000:])
    return log


def _tool_calls(log: RunLog) -> list[tuple[str | None, str, str]]:
    """The calls of Switchboard's tools (the CLI's own, such as Claude Code's ToolSearch, are left out)."""
    return [
        (c["server"], c["tool"], c["status"]) for c in (log.summary or {}).get("toolCalls", []) if c["server"]
    ]


@pytest.mark.browser
@pytest.mark.parametrize("agent_cli_world", list(CLIS), indirect=True)
def test_a_real_cli_asks_for_a_connection_and_uses_it_after_the_card(
    app, db, agent_cli_world, live_server, browser, artifacts
):
    world = agent_cli_world
    model: ScriptedModelServer = world["model"]
    agent, issue, owner = world["agent"], world["issue"], world["owner"]

    # 1. The first turn: search, request, a card.
    request_wakeup(agent, issue=issue, source="assignment")
    db.session.commit()
    assert execute_next_run()
    first = db.session.scalar(select(HeartbeatRun).where(HeartbeatRun.agent_id == agent.id))
    log = _run_log(db, first)
    assert _tool_calls(log) == [
        ("switchboard", "connections_search", "ok"),
        ("switchboard", "connection_request", "ok"),
    ]
    assert log.summary["finalMessage"] == FINAL_FIRST
    assert log.session_id and log.summary["sessionId"] == log.session_id
    assert log.resumed_session_id is None
    card = db.session.scalar(
        select(ThreadInteraction).where(
            ThreadInteraction.issue_id == issue.id, ThreadInteraction.kind == "connection_intent"
        )
    )
    assert card is not None and card.status == "pending" and card.source_run_id == first.id
    first_requests = model.main_requests()
    assert first_requests, "the CLI never reached the model server"
    # The runtime tools' answers reached the model.
    assert '"needs_user_action"' in model.tool_results("connection_request")[0].text
    assert first.context_snapshot[TURN_KEY]["connectionInstructions"] is None

    # 2. The responsible person connects Honcho in the card's dialog.
    context = browser.new_context(viewport={"width": 1200, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(15_000)
    sign_in_through_the_form(page, live_server, owner.email, DEFAULT_PASSWORD)
    page.goto(f"{live_server}/tasks/{issue.id}")
    card_view = page.locator(f"#intent-card-{card.id}")
    expect(card_view.get_by_role("heading", name="Builder needs Honcho")).to_be_visible()
    card_view.get_by_role("button", name="Connect", exact=True).click()
    dialog = page.locator(f"#intent-dialog-{card.id}")
    dialog.get_by_label("API key").fill(HONCHO_KEY)
    dialog.get_by_label("Honcho workspace").fill("team")
    dialog.get_by_role("button", name="Connect", exact=True).click()
    expect(page.locator(f"#intent-card-{card.id}").get_by_text("Honcho connected")).to_be_visible()
    page.screenshot(path=str(artifacts / f"agent-cli-{world['adapter_type']}-connected.png"))

    # 3. The continuation: delivered once, run in a fresh session, Honcho called through the gateway.
    # The answer's request delivers the continuation when it commits; the sweep delivers anything it left.
    db.session.expire_all()
    sweep_pending()
    db.session.commit()
    assert execute_next_run()
    db.session.expire_all()
    runs = list(
        db.session.scalars(
            select(HeartbeatRun).where(HeartbeatRun.agent_id == agent.id).order_by(HeartbeatRun.created_at)
        )
    )
    assert len(runs) == 2
    second = runs[1]
    log2 = _run_log(db, second)
    assert log2.resumed_session_id is None  # a continuation never resumes
    assert log2.session_id and log2.session_id != log.session_id
    assert ("gateway", "honcho__list_workspaces", "ok") in _tool_calls(log2)
    assert log2.summary["finalMessage"] == FINAL_SECOND
    wakes = db.session.scalar(
        select(func.count())
        .select_from(WakeupRequest)
        .where(WakeupRequest.idempotency_key == f"connection-intent:{card.id}:connected")
    )
    assert wakes == 1
    assert sweep_pending() == {}  # nothing left to deliver: exactly one wake

    # 4. What the model saw: the provider's answer, and the instructions only in the continuation's system prompt.
    snapshot = second.context_snapshot[TURN_KEY]["connectionInstructions"]
    assert snapshot is not None and "Honcho" in snapshot["text"]
    continuation_requests = [r for r in model.main_requests() if r not in first_requests]
    assert continuation_requests
    assert all(snapshot["text"] in r.conversation.system for r in continuation_requests)
    assert not any(snapshot["text"] in r.conversation.system for r in first_requests)
    assert not any(
        snapshot["text"] in text for r in continuation_requests for text in r.conversation.user_texts
    )
    workspaces = model.tool_results("list_workspaces")
    assert workspaces and "ws-alpha" in workspaces[0].text
    assert log2.instructions_digest == snapshot["digest"]

    # The continuation's page shows what the CLI did.
    page.goto(f"{live_server}/runs/{second.id}")
    summary = page.locator(".run-summary")
    expect(summary.get_by_text(FINAL_SECOND)).to_be_visible()
    expect(summary.locator("li", has_text="honcho__list_workspaces")).to_contain_text("through the gateway")
    page.locator(".run-log").screenshot(path=str(artifacts / f"agent-cli-{world['adapter_type']}-run.png"))
    context.close()

    # The activity tells the story; no secret is stored in the run logs or activity.
    actions = set(
        db.session.scalars(select(ActivityLog.action).where(ActivityLog.company_id == issue.company_id))
    )
    assert {"issue.connection_intent_connected", "run.succeeded"} <= actions
    for stored in (log, log2):
        text = f"{stored.stdout}{stored.stderr}{stored.events}{stored.summary}"
        assert MODEL_KEY not in text and HONCHO_KEY not in text
    # The person's own CLI setup was never touched; the agent's private home holds the CLI's state.
    # (Chromium, driven by this test, keeps its own profile there.)
    written = [str(p.relative_to(world["home"])) for p in Path(world["home"]).rglob("*")]
    assert not [p for p in written if any(cli in p.lower() for cli in ("claude", "codex", "gemini"))], written
    agent_home = Path(app.config["AGENT_HOME_ROOT"]) / str(agent.id)
    assert stat.S_IMODE(os.stat(agent_home).st_mode) == 0o700


def _wake_and_run(db, agent, issue, reason: str) -> tuple[HeartbeatRun, RunLog]:
    request_wakeup(agent, issue=issue, source="manual", reason=reason, context={"wakeReason": reason})
    db.session.commit()
    assert execute_next_run()
    db.session.expire_all()
    run = db.session.scalars(
        select(HeartbeatRun).where(HeartbeatRun.agent_id == agent.id).order_by(HeartbeatRun.created_at.desc())
    ).first()
    assert run is not None
    return run, _run_log(db, run)


@pytest.mark.parametrize("agent_cli_world", list(CLIS), indirect=True)
def test_a_real_cli_resumes_its_session_only_while_the_instructions_are_unchanged(app, db, agent_cli_world):
    world = agent_cli_world
    model: ScriptedModelServer = world["model"]
    agent, issue, owner, company = world["agent"], world["issue"], world["owner"], world["company"]
    model.set_script(
        [
            Rule(user_text_contains("third look"), Text("A fresh look.")),
            Rule(user_text_contains("second look"), Text("Looked again.")),
            Rule(user_text_contains("first look"), Text("Looked once.")),
        ]
    )
    _first, log1 = _wake_and_run(db, agent, issue, "first look")
    assert log1.resumed_session_id is None and log1.session_id
    assert log1.summary["finalMessage"] == "Looked once."

    # The same instructions (none): the next turn resumes the session, and the model sees the earlier turn.
    _second, log2 = _wake_and_run(db, agent, issue, "second look")
    assert log2.resumed_session_id == log1.session_id
    assert log2.summary["finalMessage"] == "Looked again."
    resumed = model.main_requests()[-1].conversation
    assert "Looked once." in resumed.assistant_texts

    # Honcho is connected for the company: its instructions change the snapshot, so the next turn starts fresh.
    connect(app, owner, company, honcho_body())
    _third, log3 = _wake_and_run(db, agent, issue, "third look")
    assert log3.resumed_session_id is None
    assert log3.instructions_digest and log3.instructions_digest != log2.instructions_digest
    fresh = model.main_requests()[-1].conversation
    assert "Looked once." not in fresh.assistant_texts and "Looked again." not in fresh.assistant_texts
