"""The task's thread shows the agent's runs as they happen (issue 27 item 1): working, each tool it called through the
gateway (the real door, the real Honcho peer), its final message and how it ended; a run that stopped to ask a
person reads "Waiting for <person>", not "succeeded". The poller's tag changes at each step and only then."""

from __future__ import annotations

import re
from html import unescape

from sqlalchemy import select

from app.adapters import AdapterResult
from app.extensions import db
from app.models import HeartbeatRun, ThreadInteraction
from app.services.run_progress import TOOL_CALLS_SHOWN, issue_runs, progress_of
from app.services.runs.lifecycle import complete_run
from app.services.work import thread_version
from tests.conftest import count_statements
from tests.doors import request_service, rpc
from tests.peers.mcp_servers import HONCHO_KEY
from tests.services.gateway.test_gateway import connect


def _text(html: str) -> str:
    return " ".join(unescape(re.sub(r"<[^>]+>", " ", html)).split())


def _run_entry(client, issue, run) -> str:
    """The run's entry in the thread fragment the page's poller fetches, as text."""
    page = client.get(f"/tasks/{issue.id}/items", headers={"HX-Request": "true"}).get_data(as_text=True)
    found = re.search(rf'<li class="thread-item" id="run-{run.id}">(.*?)</li>\s*(?:<li|</ol>)', page, re.S)
    assert found, page
    return _text(found.group(1))


def _poll(client, issue, version):
    return client.get(f"/tasks/{issue.id}/items?v={version}", headers={"HX-Request": "true"})


def _finish(run, **summary):
    db.session.refresh(run)
    complete_run(run, AdapterResult(ok=True, summary=summary or None))
    db.session.commit()


def test_the_thread_follows_a_run_from_working_to_finished(make, client, providers):
    world = make.task_run(client=client)
    honcho = connect(world, "honcho", HONCHO_KEY)
    tag = thread_version(world.issue)

    entry = _run_entry(world.client, world.issue, world.run)
    assert entry.startswith("Builder is working… working")
    assert "used" not in entry
    assert _poll(world.client, world.issue, tag).status_code == 204

    called = rpc(
        world.client,
        world.token,
        "tools/call",
        {"name": "honcho__search_memory", "arguments": {"query": "launch"}},
    )
    assert called.status_code == 200 and not called.json["result"]["isError"], called.json
    moved = thread_version(world.issue)
    assert moved != tag
    assert _poll(world.client, world.issue, tag).status_code == 200
    used = f"Builder used {honcho['name']} · search_memory"
    assert used in _run_entry(world.client, world.issue, world.run)

    _finish(world.run, finalMessage="I found the launch notes and summarised them.")
    assert thread_version(world.issue) != moved
    entry = _run_entry(world.client, world.issue, world.run)
    assert entry.startswith("Builder finished finished")
    assert used in entry
    assert entry.endswith("I found the launch notes and summarised them.")


def test_a_run_that_asked_a_person_reads_waiting_for_them_until_they_answer(make, client, providers):
    world = make.task_run(client=client)
    world.owner.name = "Dana Owner"
    db.session.commit()
    asked = request_service(world.client, world.token, "notion")
    assert asked.status_code == 200 and asked.json["state"] == "needs_user_action", asked.json
    _finish(world.run)
    db.session.refresh(world.run)
    assert world.run.status == "succeeded"

    entry = _run_entry(world.client, world.issue, world.run)
    assert entry.startswith("Waiting for Dana Owner waiting")
    panel = _text(world.client.get(f"/tasks/{world.issue.id}").get_data(as_text=True))
    assert "Builder waiting" in panel and "succeeded" not in panel
    run_page = _text(world.client.get(f"/runs/{world.run.id}").get_data(as_text=True))
    assert "Status waiting Waiting for Dana Owner" in run_page

    card = db.session.scalars(
        select(ThreadInteraction).where(ThreadInteraction.source_run_id == world.run.id)
    ).one()
    declined = world.client.post(
        f"/intents/{card.id}/decline", headers={"X-CSRFToken": world.csrf, "HX-Request": "true"}
    )
    assert declined.status_code in (200, 303), declined.get_data(as_text=True)
    assert _run_entry(world.client, world.issue, world.run).startswith(
        "Builder stopped to ask Dana Owner finished"
    )


def test_a_failed_run_says_so_and_why(make, client, providers):
    world = make.task_run(client=client)
    db.session.refresh(world.run)
    complete_run(world.run, AdapterResult(ok=False, error="The agent's process exited with status 3."))
    db.session.commit()
    entry = _run_entry(world.client, world.issue, world.run)
    assert entry.startswith("Builder's run failed failed")
    assert entry.endswith("The agent's process exited with status 3.")


def test_the_progress_of_many_runs_costs_three_statements(app, make, client, providers):
    world = make.task_run(client=client)
    connect(world, "honcho", HONCHO_KEY)
    for _ in range(TOOL_CALLS_SHOWN + 3):
        assert rpc(
            world.client,
            world.token,
            "tools/call",
            {"name": "honcho__search_memory", "arguments": {"query": "launch"}},
        )
    _finish(world.run, finalMessage="Done.")
    for _ in range(4):
        run, _token = make.run(world.agent, world.issue)
        _finish(run)
    runs = issue_runs(world.issue, 30)
    assert len(runs) == 5
    db.session.expire_all()
    runs = issue_runs(world.issue, 30)
    with count_statements(db.engine) as statements:
        progress = progress_of(runs)
    assert len(statements) == 3, statements
    first = next(entry for entry in progress if entry.run.id == world.run.id)
    assert len(first.tool_uses) == TOOL_CALLS_SHOWN
    assert first.tool_use_count == TOOL_CALLS_SHOWN + 3 and first.hidden_tool_uses == 3
    assert first.final_message == "Done."
    assert [entry.phase for entry in progress] == ["finished"] * 5
    assert (
        db.session.scalar(select(HeartbeatRun.status).where(HeartbeatRun.id == world.run.id)) == "succeeded"
    )
