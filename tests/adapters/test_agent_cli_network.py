"""The agent CLIs, as Switchboard runs them, reach only loopback: the model server and our two MCP doors.

Each real CLI runs one turn through its adapter (the real configuration, environment and flags) under `strace -f`;
every socket it connects or sends to must be 127.0.0.1 or ::1 (no DNS lookups, no telemetry, no update checks, no
plugin or app sync). A CLI that phoned home here would do it for every user.
"""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest
from sqlalchemy import select

from app.models import HeartbeatRun, Membership
from app.models.run_logs import RunLog
from app.services.agent_runtime import set_agent_secret
from app.services.runs.wakeups import request_wakeup
from app.workers.run_executor import execute_next_run
from tests.conftest import serving
from tests.peers.agent_clis import INSTALL_HINT, claude_binary, codex_binary, gemini_binary
from tests.peers.model_server import (
    Rule,
    ScriptedModelServer,
    Text,
    ToolCall,
    last_tool_result_from,
    no_tool_result_yet,
)

CLIS = {
    "claude_code": (claude_binary, "ANTHROPIC_API_KEY", ""),
    "codex": (codex_binary, "OPENAI_API_KEY", "/v1"),
    "gemini": (gemini_binary, "GEMINI_API_KEY", ""),
}
ADDRESS = re.compile(r'(?:inet_addr\("([^"]+)"\)|inet_pton\(AF_INET6, "([^"]+)")')
PORT = re.compile(r"sin6?_port=htons\((\d+)\)")


def strace_wrapper(tmp_path: Path, binary: str) -> tuple[str, Path]:
    log = tmp_path / "strace.log"
    wrapper = tmp_path / "traced-cli"
    wrapper.write_text(
        f'#!/bin/sh\nexec strace -f -qq -e trace=connect,sendto,sendmsg,sendmmsg -o "{log}" "{binary}" "$@"\n'
    )
    wrapper.chmod(0o755)
    return str(wrapper), log


@pytest.mark.parametrize("adapter_type", list(CLIS))
def test_a_turn_reaches_only_loopback(app, db, make, monkeypatch, tmp_path, adapter_type):
    find, key_name, path = CLIS[adapter_type]
    binary = find()
    if binary is None:
        pytest.skip(INSTALL_HINT)
    if shutil.which("strace") is None:
        pytest.skip("strace is not installed (apt-get install -y strace; .ci/run does)")
    traced, log = strace_wrapper(tmp_path, binary)
    monkeypatch.setitem(app.config, "AGENT_HOME_ROOT", str(tmp_path / "agent-homes"))
    monkeypatch.setenv("HOME", str(tmp_path))
    script = [
        Rule(no_tool_result_yet, ToolCall("connections_search", {"query": "notion"})),
        Rule(last_tool_result_from("connections_search"), Text("Searched.")),
    ]
    with serving(app) as base, ScriptedModelServer(script) as model:
        monkeypatch.setitem(app.config, "PUBLIC_BASE_URL", base)
        _company, owner, agent, issue = make.team(
            adapter_type=adapter_type,
            adapter_config={
                "binary": traced,
                "model": "m",
                "baseUrl": model.url + path,
                "timeoutSeconds": 180,
            },
        )
        membership = db.session.scalar(select(Membership).where(Membership.user_id == owner.id))
        set_agent_secret(membership, agent, key_name, "sk-scripted-0123456789")
        request_wakeup(agent, issue=issue, source="manual")
        db.session.commit()
        assert execute_next_run()
    db.session.expire_all()
    run = db.session.scalar(select(HeartbeatRun).where(HeartbeatRun.agent_id == agent.id))
    run_log = db.session.get(RunLog, run.id)
    assert run.status == "succeeded", (run.error, run_log.stderr[-2000:])
    assert [c["tool"] for c in run_log.summary["toolCalls"] if c["server"]] == ["connections_search"]

    trace = log.read_text()
    addresses = {a or b for a, b in ADDRESS.findall(trace)}
    assert addresses, "strace saw no network use at all: the trace is not working"
    assert addresses <= {"127.0.0.1", "::1", "::ffff:127.0.0.1"}, addresses
    assert "53" not in PORT.findall(trace), "the CLI looked up a host name over DNS"
