"""Which gunicorn worker setup for a 2-core machine: sync vs gthread, healthy and with a frozen provider.

    .venv/bin/python bench/server_config.py [--seconds 3] [--rounds 2] [--clients 8] [--frozen 12] [--setups ...]

One run: a throwaway SQLite database (the demo company, a live run of its agent, and a GitHub connection pointed at
a real MCP peer whose tool never answers until released), then for each server setup it starts gunicorn with
`gunicorn.conf.py` (worker class, workers and threads overridden on the command line) and measures:

1. **healthy**: `--clients` threads, half loading the board home page (signed in) and half calling the runtime
   `connections_search` over REST, for `--seconds`;
2. **frozen**: the same load while `--frozen` gateway calls to the frozen provider are in flight (the provider
   bulkhead lets `SWITCHBOARD_PROVIDER_MAX_CONCURRENT_CALLS` of them per process reach the provider; the rest are
   answered at once with "busy").

It prints requests per second, p50/p99 and, for the frozen phase, the throughput as a ratio of the same setup's
healthy phase and of the best healthy setup. Nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from contextlib import contextmanager
from pathlib import Path

import requests
from cryptography.fernet import Fernet

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tests.peers.mcp_servers import NOTES_KEY, start_frozen_server  # noqa: E402

SETUPS = [
    ("sync", 4, 1),
    ("sync", 5, 1),
    ("gthread", 2, 4),
    ("gthread", 2, 8),
    ("gthread", 4, 4),
]
LOGIN_CSRF = 'id="csrf_token" name="csrf_token" type="hidden" value="'


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def prepare(env: dict) -> dict:
    """Migrate, load the demo, open a run and connect GitHub (at the frozen peer) in-process; return what to drive."""
    os.environ.update(env)
    from flask_migrate import upgrade

    from app import create_app
    from app.catalog.loader import ingest_definitions
    from app.extensions import db
    from app.models import Agent, Issue
    from app.services.demo import load_demo
    from app.services.runs.tokens import mint_run_token, open_run

    app = create_app()
    with app.app_context():
        upgrade()
        ingest_definitions()
        demo = load_demo()
        db.session.commit()
        issue_id = next(i["id"] for i in demo["issues"] if i["status"] == "in_progress")
        issue = db.session.get(Issue, uuid.UUID(issue_id))
        agent = db.session.get(Agent, issue.assignee_agent_id)
        run = open_run(agent, issue)
        db.session.commit()
        token = mint_run_token(run).token
        owner = next(u for u in demo["users"] if u["role"] == "owner")
    client = app.test_client()
    page = client.get("/login").get_data(as_text=True)
    csrf = page.split(LOGIN_CSRF, 1)[1].split('"', 1)[0]
    signed_in = client.post("/login", data={"csrf_token": csrf, **_credentials(owner)})
    assert signed_in.status_code == 303, signed_in.status_code
    home = client.get("/").get_data(as_text=True)
    csrf = home.split('"X-CSRFToken": "', 1)[1].split('"', 1)[0]
    body = {"appSlug": "github", "identity": "organization", "credentials": {"authorization": NOTES_KEY}}
    created = client.post(
        f"/api/companies/{demo['company']['id']}/tools/apps/connect", json=body, headers={"X-CSRFToken": csrf}
    )
    assert created.status_code == 201, created.get_data(as_text=True)
    return {"token": token, "owner": owner}


def _credentials(user: dict) -> dict:
    return {"email": user["email"], "password": user["password"]}


@contextmanager
def gunicorn(env: dict, worker_class: str, workers: int, threads: int, log: Path):
    port = free_port()
    command = [
        sys.executable,
        *("-m", "gunicorn", "-c", "gunicorn.conf.py"),
        *("--worker-class", worker_class, "--workers", str(workers), "--threads", str(threads)),
        *("--bind", f"127.0.0.1:{port}", "--access-logfile", "/dev/null", "--error-logfile", str(log)),
        "wsgi:app",
    ]
    process = subprocess.Popen(
        command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if requests.get(f"{base}/healthz", timeout=2).status_code == 200:
                    break
            except requests.RequestException:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                raise RuntimeError(f"gunicorn did not start; see {log}")
            time.sleep(0.2)
        yield base
    finally:
        process.terminate()
        try:
            process.wait(40)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def board_session(base: str, owner: dict) -> requests.Session:
    session = requests.Session()
    page = session.get(f"{base}/login", timeout=30).text
    csrf = page.split(LOGIN_CSRF, 1)[1].split('"', 1)[0]
    response = session.post(
        f"{base}/login", data={"csrf_token": csrf, **_credentials(owner)}, allow_redirects=False, timeout=30
    )
    assert response.status_code == 303, response.status_code
    return session


def sessions_for(base: str, prepared: dict, clients: int) -> list[requests.Session]:
    """Even slots: a signed-in board session; odd slots: a plain session for the runtime tools."""
    return [
        board_session(base, prepared["owner"]) if i % 2 == 0 else requests.Session() for i in range(clients)
    ]


def load(base: str, prepared: dict, sessions: list[requests.Session], seconds: float) -> dict:
    """Half the clients load the board home page, half call connections_search; count what completes in time."""
    latencies: dict[str, list[float]] = {"board": [], "search": []}
    errors = [0]
    lock = threading.Lock()
    clients = len(sessions)
    stop_at = time.monotonic() + seconds

    def client(slot: int) -> None:
        kind = "board" if slot % 2 == 0 else "search"
        session = sessions[slot]
        while time.monotonic() < stop_at:
            started = time.monotonic()
            try:
                if kind == "board":
                    response = session.get(f"{base}/", timeout=seconds + 5, allow_redirects=False)
                else:
                    response = session.post(
                        f"{base}/runtime-tools/connections/search",
                        json={"query": "github"},
                        headers={"Authorization": f"Bearer {prepared['token']}"},
                        timeout=seconds + 5,
                    )
                ok = response.status_code == 200
            except requests.RequestException:
                ok = False
            finished = time.monotonic()
            with lock:
                if ok and finished <= stop_at + 0.5:
                    latencies[kind].append(finished - started)
                elif not ok:
                    errors[0] += 1

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return {**latencies, "errors": errors[0], "seconds": seconds}


def summarize(samples: list[dict]) -> dict:
    """Pool the rounds of one setup and phase: requests per second, p50/p99 over every request."""
    board = [x for sample in samples for x in sample["board"]]
    search = [x for sample in samples for x in sample["search"]]
    seconds = sum(sample["seconds"] for sample in samples)
    every = sorted(board + search)
    return {
        "rps": len(every) / seconds,
        "board": len(board),
        "search": len(search),
        "errors": sum(sample["errors"] for sample in samples),
        "p50": _pct(every, 0.50),
        "p99": _pct(every, 0.99),
    }


def _pct(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    return values[min(len(values) - 1, int(p * len(values)))] * 1000


def frozen_calls(base: str, token: str, count: int) -> tuple[list[threading.Thread], list]:
    results: list = [None] * count
    message = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "github__wait_for_release", "arguments": {"label": "bench"}},
    }

    def call(i: int) -> None:
        try:
            answer = requests.post(
                f"{base}/mcp/gateway", json=message, headers={"Authorization": f"Bearer {token}"}, timeout=600
            ).json()["result"]
            # A refusal's fields: its structuredContent, or for a tool with an output schema its last text block.
            fields = answer.get("structuredContent")
            if fields is None and answer.get("isError"):
                try:
                    fields = json.loads(answer["content"][-1]["text"])
                except (ValueError, KeyError, IndexError):
                    fields = {"reasonCode": "tool_error"}
            results[i] = (fields or {}).get("reasonCode") or "ok"
        except requests.RequestException as exc:
            results[i] = type(exc).__name__

    threads = [threading.Thread(target=call, args=(i,), daemon=True) for i in range(count)]
    for thread in threads:
        thread.start()
    return threads, results


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seconds", type=float, default=3.0, help="measured seconds per phase")
    parser.add_argument("--clients", type=int, default=8, help="load threads (half board, half runtime)")
    parser.add_argument("--rounds", type=int, default=2, help="rounds over every setup (order alternates)")
    parser.add_argument("--frozen", type=int, default=12, help="gateway calls to the frozen provider")
    parser.add_argument(
        "--provider-limit", type=int, default=4, help="SWITCHBOARD_PROVIDER_MAX_CONCURRENT_CALLS"
    )
    parser.add_argument(
        "--setups",
        default=",".join(f"{kind}:{workers}x{threads}" for kind, workers, threads in SETUPS),
        help="comma-separated worker_class:WORKERSxTHREADS (default: %(default)s)",
    )
    args = parser.parse_args(argv)
    setups = []
    for item in args.setups.split(","):
        kind, shape = item.split(":")
        workers, threads = shape.split("x")
        setups.append((kind, int(workers), int(threads)))

    scratch = Path(tempfile.mkdtemp(prefix="switchboard-bench-config-"))
    peer = start_frozen_server()
    env = {
        **os.environ,
        "DATABASE_URL": f"sqlite:///{scratch / 'bench.db'}",
        "SECRET_KEY": "bench-secret",
        "SWITCHBOARD_ENCRYPTION_KEY": Fernet.generate_key().decode(),
        "SWITCHBOARD_INSTANCE_PATH": str(scratch / "instance"),
        "PASSWORD_HASH_METHOD": "pbkdf2:sha256:1000",
        "SWITCHBOARD_PROVIDER_SERVER_URLS": json.dumps({"github": peer.url}),
        "SWITCHBOARD_PROVIDER_CALL_TIMEOUT_SECONDS": "600",  # frozen for the whole phase
        "SWITCHBOARD_PROVIDER_MAX_CONCURRENT_CALLS": str(args.provider_limit),
        "LOGIN_MAX_FAILURES": "1000",
        "RUN_WORKER_IN_PROCESS": "0",
    }
    try:
        prepared = prepare(env)
        measured: dict[str, dict[str, list]] = {}
        for round_number in range(args.rounds):
            # Alternate the order each round, so the machine's noise lands on every setup.
            for worker_class, workers, threads in setups if round_number % 2 == 0 else setups[::-1]:
                label = f"{worker_class} {workers}x{threads}"
                samples = measured.setdefault(label, {"healthy": [], "frozen": [], "busy": []})
                with gunicorn(env, worker_class, workers, threads, scratch / "gunicorn.log") as base:
                    sessions = sessions_for(base, prepared, args.clients)
                    load(base, prepared, sessions, 1.0)  # warm up every process
                    samples["healthy"].append(load(base, prepared, sessions, args.seconds))
                    peer.release.clear()
                    stuck, outcomes = frozen_calls(base, prepared["token"], args.frozen)
                    time.sleep(1.0)  # let the frozen calls reach the provider or be refused
                    samples["frozen"].append(load(base, prepared, sessions, args.seconds))
                    peer.release.set()
                    for thread in stuck:
                        thread.join(timeout=60)
                samples["busy"].append(sum(outcome == "provider_busy" for outcome in outcomes))
                print(f"round {round_number + 1}: measured {label}", file=sys.stderr)
        rows = [
            (
                f"{kind} {workers}x{threads}",
                summarize(measured[f"{kind} {workers}x{threads}"]["healthy"]),
                summarize(measured[f"{kind} {workers}x{threads}"]["frozen"]),
                sum(measured[f"{kind} {workers}x{threads}"]["busy"]),
            )
            for kind, workers, threads in setups
        ]
        report(args, rows)
    finally:
        peer.release.set()
        peer.stop()


def report(args, rows) -> None:
    best = max(healthy["rps"] for _, healthy, _, _ in rows)
    print(
        f"\n{args.clients} clients (half board GET /, half runtime connections_search), {args.rounds} rounds of "
        f"{args.seconds:g}s per phase; "
        f"frozen phase: {args.frozen} gateway calls to a provider that never answers, "
        f"provider limit {args.provider_limit} per process\n"
    )
    header = (
        f"{'setup':<14}{'healthy r/s':>12}{'p50 ms':>8}{'p99 ms':>8}{'x best':>8}"
        f"{'frozen r/s':>12}{'p50 ms':>8}{'p99 ms':>8}{'x own':>7}{'x best':>8}{'board/search':>14}{'busy':>6}"
    )
    print(header)
    print("-" * len(header))
    for label, healthy, frozen, refused in rows:
        print(
            f"{label:<14}{healthy['rps']:>12.1f}{healthy['p50']:>8.1f}{healthy['p99']:>8.1f}"
            f"{healthy['rps'] / best:>8.2f}{frozen['rps']:>12.1f}{frozen['p50']:>8.1f}{frozen['p99']:>8.1f}"
            f"{frozen['rps'] / healthy['rps'] if healthy['rps'] else 0:>7.2f}{frozen['rps'] / best:>8.2f}"
            f"{str(frozen['board']) + '/' + str(frozen['search']):>14}{refused:>6}"
        )


if __name__ == "__main__":
    main()
