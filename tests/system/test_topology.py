"""The production topology of the README's "Several instances" on loopback (issue 31 item 11): two app instances
(gunicorn with the repository's `gunicorn.conf.py`, two processes each), two `switchboard worker` processes, one
PostgreSQL database holding the shared state (the sign-in throttle's counts, breakers, the access revision), no
sticky sessions. Each scenario sends its requests to both instances:

- wrong passwords counted once: five on instance A, then instance B refuses the pair (even the right password);
- an access change made through instance A is what instance B's gateway answers at once;
- a connection card answered on instance A wakes its agent through a worker, exactly once;
- instance A stopped during traffic: it refuses new connections (or answers 503 draining) while B serves every
  request.

PostgreSQL only: workers, instances and the test share the database over connections of their own.
"""

from __future__ import annotations

import json
import sys
import textwrap
import threading
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from sqlalchemy import select

from app.models import HeartbeatRun
from app.services.accounts import create_api_key
from tests import servers
from tests.doors import GATEWAY_URL, bearer
from tests.factories import DEFAULT_PASSWORD
from tests.peers.mcp_servers import NOTES_KEY
from tests.services.gateway import test_gateway
from tests.services.gateway.test_gateway import connect
from tests.system.test_shared_throttle import sign_in

world = test_gateway.world
LIMIT = 5  # LOGIN_MAX_FAILURES's default, which the instances run with

AGENT = textwrap.dedent(
    """
    import json, os, pathlib, sys
    folder = pathlib.Path(sys.argv[1])
    turn = len(list(folder.glob("turn-*")))
    (folder / f"turn-{turn}").write_text(json.dumps({"run": os.environ["PAPERCLIP_RUN_ID"]}))
    print(json.dumps({"paperclipSession": {"id": "session-" + str(turn)}}))
    """
)


def _gateway(base: str, token: str, method: str, params: dict | None = None) -> dict:
    message = {"jsonrpc": "2.0", "id": 1, "method": method, "params": params or {}}
    answer = httpx.post(f"{base}{GATEWAY_URL}", json=message, headers=bearer(token), timeout=servers.PATIENCE)
    assert answer.status_code == 200, answer.text
    return answer.json()


def _listed(base: str, token: str) -> set[str]:
    return {tool["name"] for tool in _gateway(base, token, "tools/list")["result"]["tools"]}


@pytest.fixture
def topology(app, db, notes_server, tmp_path):
    """Two instances of two processes and two workers, booted at once; stopped at the end."""
    provider = {"SWITCHBOARD_PROVIDER_SERVER_URLS": json.dumps({"github": notes_server.url})}
    instances = [servers.launch(app, tmp_path, processes=2, extra_env=provider) for _ in range(2)]
    workers = [servers.start_worker(app, tmp_path, name=f"worker-{i}", extra_env=provider) for i in range(2)]
    try:
        for instance in instances:
            instance.wait_serving()
        yield instances
    finally:
        for instance in instances:
            instance.stop()
        for worker in workers:
            worker.terminate()
        for worker in workers:
            try:
                worker.communicate(timeout=servers.PATIENCE)
            except Exception:
                worker.kill()
                worker.communicate()


@pytest.mark.postgres_only
def test_two_instances_and_two_workers_on_one_database_behave_as_one(
    app, db, make, world, topology, tmp_path
):
    first, second = topology
    for instance in topology:
        ready = httpx.get(f"{instance.base}/readyz", timeout=servers.PATIENCE)
        assert (ready.status_code, ready.json()["throttle_store"]) == (
            200,
            {"kind": "database", "status": "ok"},
        )

    # Wrong passwords: counted once for both instances.
    email = world.owner.email
    assert [sign_in(first.base, "wrong", email).status_code for _ in range(LIMIT)] == [401] * LIMIT
    assert sign_in(second.base, "wrong", email).status_code == 429
    assert sign_in(second.base, DEFAULT_PASSWORD, email).status_code == 429

    # An access change made on A: B's gateway (both its processes, whichever answers) stops listing and calling.
    notes = connect(world, "github", NOTES_KEY, name="Notes")
    assert all("notes__search_notes" in _listed(second.base, world.token) for _ in range(4))
    _, key = create_api_key(world.owner, "topology")
    db.session.commit()
    changed = httpx.patch(
        f"{first.base}/api/tool-connections/{notes['id']}",
        json={"enabled": False},
        headers=bearer(key),
        timeout=servers.PATIENCE,
    )
    assert changed.status_code == 200, changed.text
    assert [("notes__search_notes" in _listed(second.base, world.token)) for _ in range(4)] == [False] * 4
    call = _gateway(second.base, world.token, "tools/call", {"name": "notes__search_notes", "arguments": {}})
    assert call["error"] == {"code": -32602, "message": "Unknown tool: notes__search_notes"}

    # A card answered on A wakes its agent through a worker, once.
    folder = tmp_path / "turns"
    folder.mkdir()
    (tmp_path / "agent.py").write_text(AGENT)
    command = [sys.executable, str(tmp_path / "agent.py"), str(folder)]
    _company, owner, agent, issue = make.team(
        "Topology", adapter_type="process", adapter_config={"command": command, "timeoutSeconds": 60}
    )
    card = make.card(issue, agent, owner, run_finished=True)
    _, owner_key = create_api_key(owner, "topology")
    db.session.commit()
    declined = httpx.post(
        f"{first.base}/api/connection-intents/{card.id}/decline",
        json={},
        headers=bearer(owner_key),
        timeout=servers.PATIENCE,
    )
    assert declined.status_code == 200, declined.text

    def continuation_ended() -> bool:
        db.session.expire_all()
        runs = db.session.scalars(select(HeartbeatRun).where(HeartbeatRun.agent_id == agent.id)).all()
        return any(
            (r.context_snapshot or {}).get("interactionId") == str(card.id) and r.finished_at for r in runs
        )

    servers.wait_until(continuation_ended, "the continuation's turn", servers.BOOT_PATIENCE)
    runs = [
        r
        for r in db.session.scalars(select(HeartbeatRun).where(HeartbeatRun.agent_id == agent.id))
        if (r.context_snapshot or {}).get("interactionId") == str(card.id)
    ]
    assert [(r.status, r.context_snapshot["outcome"]) for r in runs] == [("succeeded", "declined")]
    assert [json.loads(path.read_text())["run"] for path in folder.glob("turn-*")] == [str(runs[0].id)]

    # A stopped during traffic: it refuses (or answers 503 draining) while B serves every request.
    stopped = (
        threading.Event()
    )  # set just before the SIGTERM: answers from then on count as "during the stop"
    answers: dict[str, list[object]] = {"first": [], "second": []}

    def traffic(name: str, base: str) -> None:
        with httpx.Client(timeout=servers.PATIENCE) as http:
            while not stopped.is_set() or len(answers[name]) < 20:
                try:
                    answers[name].append((stopped.is_set(), http.get(f"{base}/readyz").status_code))
                except httpx.TransportError:
                    answers[name].append((stopped.is_set(), "refused"))
                if name == "first" and stopped.is_set() and answers[name][-1][1] == "refused":
                    return

    with ThreadPoolExecutor(2) as pool:
        sent = [pool.submit(traffic, "first", first.base), pool.submit(traffic, "second", second.base)]
        servers.wait_until(
            lambda: len(answers["first"]) >= 5 and len(answers["second"]) >= 5, "traffic flowing"
        )
        stopped.set()
        first.stop()  # SIGTERM: the drain; returns once gunicorn exited
        for future in sent:
            future.result(timeout=servers.PATIENCE)
    assert {status for was_stopped, status in answers["first"] if not was_stopped} == {200}
    after_stop = [status for was_stopped, status in answers["first"] if was_stopped]
    assert after_stop and set(after_stop) <= {503, "refused"}, after_stop
    assert {status for _, status in answers["second"]} == {200}
    assert sum(1 for was_stopped, _ in answers["second"] if was_stopped) >= 1
