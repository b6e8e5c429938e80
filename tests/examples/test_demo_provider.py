"""The demo's local memory provider (examples/demo_provider.py), as `make run` starts it: a separate process with
a real MCP server; the catalog's Honcho app connects to it with the demo key and indexes its tools, offline."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import uuid

import pytest
from sqlalchemy import select

from tests.paths import ROOT
from tests.services.runtime.test_runtime_rest import board_api

DEMO_PROVIDER = ROOT / "examples" / "demo_provider.py"


@pytest.fixture
def demo_provider(app, monkeypatch):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    process = subprocess.Popen(
        [sys.executable, str(DEMO_PROVIDER), "--port", str(port)], stdout=subprocess.PIPE, text=True
    )
    try:
        banner = process.stdout.readline()
        assert f"http://127.0.0.1:{port}/mcp" in banner and "demo-honcho-key" in banner
        for _ in range(200):  # the banner comes before uvicorn binds: wait until it accepts connections
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.05)
        monkeypatch.setitem(app.config, "PROVIDER_SERVER_URLS", {"honcho": f"http://127.0.0.1:{port}/mcp"})
        monkeypatch.setitem(app.config, "OUTBOUND_ALLOWED_HOSTS", ["127.0.0.1"])
        yield port
    finally:
        process.terminate()
        process.wait(timeout=10)


def connect_honcho(app, owner, company, key):
    body = {
        "appSlug": "honcho",
        "identity": "organization",
        "credentials": {"authorization": key},
        "methodConfig": {"workspaceId": "demo"},
    }
    return board_api(
        app.test_client(), owner, "POST", f"/api/companies/{company.id}/tools/apps/connect", body
    )


def test_the_demo_provider_connects_offline_with_the_demo_key(app, db, make, demo_provider):
    company = make.company("Acme")
    owner = make.member(company, "owner")
    response = connect_honcho(app, owner, company, "demo-honcho-key")
    assert response.status_code == 201, response.json
    assert response.json["status"] == "active"
    tools = {t["name"]: t["isWrite"] for t in response.json["tools"]}
    assert tools == {"list_workspaces": False, "save_memory": True, "search_memory": False}


def test_the_demo_provider_refuses_another_key(app, db, make, demo_provider):
    company = make.company("Acme")
    owner = make.member(company, "owner")
    response = connect_honcho(app, owner, company, "not-the-demo-key")
    assert response.status_code == 422
    assert response.json["connectionId"]


def test_the_offline_demo_loop(app, db, make, demo_provider):
    """The newcomer's path without internet: assign the demo's Honcho task to Builder, answer its card with the
    demo key, and watch Builder continue with a Honcho tool through the gateway."""
    from app.models import ThreadInteraction
    from app.models.run_logs import RunLog
    from app.services.accounts import find_user_by_email
    from app.services.demo import load_demo
    from app.workers.continuations import deliver
    from app.workers.run_executor import execute_next_run
    from tests.conftest import serving
    from tests.web.cards.test_intent_cards import Htmx
    from tests.workers.test_runs_worker import runs_of

    demo = load_demo()
    db.session.commit()
    owner = find_user_by_email("owner@example.com")
    builder = next(a for a in demo["agents"] if a["name"] == "Builder")
    task = next(i for i in demo["issues"] if i["title"] == "Record the launch decisions in Honcho")
    saved = app.config["PUBLIC_BASE_URL"]
    with serving(app) as base:
        app.config["PUBLIC_BASE_URL"] = base
        try:
            while execute_next_run():  # the demo's Notion task runs first; its card waits for Notion
                pass
            board = Htmx(app, owner)
            assigned = board.post(f"/tasks/{task['id']}/assignee", {"assignee": builder["id"]})
            assert assigned.status_code == 200, assigned.get_data(as_text=True)
            assert execute_next_run()
            card = db.session.scalar(
                select(ThreadInteraction).where(ThreadInteraction.issue_id == uuid.UUID(task["id"]))
            )
            assert card is not None and card.payload["serviceSlug"] == "honcho"
            provider = demo["demoProvider"]
            form = {
                "method_key": "mcp-api-key",
                "identity": "organization",
                "credentials-authorization": provider["apiKey"],
                "config-workspaceId": provider["workspace"],
                "audience": "all",
            }
            answered = board.post(f"/intents/{card.id}/setup", form)
            assert answered.status_code == 200, answered.get_data(as_text=True)
            assert "Honcho connected" in answered.get_data(as_text=True)
            deliver(card.id)  # the request delivered it after its commit; this finds nothing more to do
            assert execute_next_run()
        finally:
            app.config["PUBLIC_BASE_URL"] = saved
    from app.models import Agent

    continuation = runs_of(db, db.session.get(Agent, uuid.UUID(builder["id"])))[-1]
    log = db.session.get(RunLog, continuation.id)
    assert continuation.status == "succeeded", (continuation.error, log.stdout, log.stderr)
    assert "connected Honcho for this task" in log.stdout
    # The example agent calls the first read-only tool it is given; the answer comes from the local provider.
    assert "gateway tools/call honcho__list_workspaces({})" in log.stdout
    assert '\\"workspaces\\": [\\n    \\"demo\\"\\n  ]' in log.stdout
