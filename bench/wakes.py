"""Wake benchmark: how soon a resolved card's continuation run starts, and how fast two workers deliver continuations.

    .venv/bin/python bench/wakes.py [--cards 40] [--rounds 4] [--deliveries 400] [--baseline-rev ebc3788]

One run on a throwaway PostgreSQL database (dropped at the end):

1. **Wake latency**, commit -> continuation run started. Two `switchboard worker`-like processes run the `runs` job
   side by side and take turns in rounds (the one off turn is paused with SIGSTOP while idle):
   - `poll`: the old behaviour, no listener (nothing reaches another process), a 2 s poll;
   - `listen`: LISTEN/NOTIFY, the same 2 s poll as the fallback.
   Each card is resolved (declined) and committed the way the card's request does it (commit, then the
   continuation delivered after the commit), then the bench waits for the run to be started (`started_at`, stamped
   by the worker) and finished; latency = `started_at` - the commit's wall clock.
2. **Delivery rate**: `--deliveries` resolutions, then two worker threads sweep the outbox until it is empty, in
   rounds alternating the baseline (`app/workers/continuations.py` as it was at `--baseline-rev`, loaded from git)
   and the current code. Deliveries per second, and the ratio.

Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time
import types
from datetime import UTC
from pathlib import Path

from cryptography.fernet import Fernet

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import seed  # noqa: E402  (bench/seed.py, beside this file)
import sweeps  # noqa: E402  (bench/sweeps.py, beside this file)

P50_TARGET_MS = 100.0
P99_TARGET_MS = 500.0
RATE_TARGET = 300.0


def percentile(values: list[float], p: float) -> float:
    if not values:
        return float("nan")
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


# --- the worker processes ------------------------------------------------------------------------------------


def worker_main(mode: str, url: str, poll: float) -> None:
    """`--worker poll|listen`: the runs job forever (as `switchboard worker` runs it)."""
    from app import create_app
    from app.workers.loop import run_worker_forever

    # As `switchboard worker` does (app/cli): no catalog check at start, which takes a database lock that a paused
    # worker holding it would keep from the other one.
    app = create_app({"SQLALCHEMY_DATABASE_URI": url, "CATALOG_INGEST_ON_START": False})
    run_worker_forever(app, poll, jobs=("runs",), listen=(mode == "listen"))


def start_worker(mode: str, url: str, env: dict, poll: float) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, __file__, "--worker", mode, "--url", url, "--poll", str(poll)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
    )


# --- the company ---------------------------------------------------------------------------------------------


def make_company(app) -> dict:
    from app.extensions import db
    from app.services.accounts import create_user
    from app.services.agents import create_agent
    from app.services.tenancy import add_membership, create_company

    with app.app_context():
        company = create_company("Wakes", "WK")
        owner = create_user("owner@wakes.example", "Owner", "correct horse battery staple")
        db.session.flush()
        add_membership(company, owner, "owner")
        agent = create_agent(
            company.id, name="Waker", adapter_type="process", adapter_config={"command": ["true"]}
        )
        manual = create_agent(company.id, name="Manual", adapter_type="manual")
        db.session.commit()
        ids = {"company": company.id, "owner": owner.id, "agent": agent.id, "manual": manual.id}
        db.session.remove()
    return ids


def open_cards(app, ids: dict, agent_key: str, count: int) -> list:
    """`count` pending connection cards, each on its own in-progress task assigned to the agent; committed."""
    from app.extensions import db
    from app.models import Agent
    from app.services.intents import creation
    from app.services.intents import service as intents_service
    from app.services.runs.tokens import open_run
    from app.services.work import create_issue

    with app.app_context():
        agent = db.session.get(Agent, ids[agent_key])
        service = intents_service.resolve_service(ids["company"], "linear", ids["owner"], agent.id)
        cards = []
        for n in range(count):
            issue = create_issue(
                ids["company"],
                title=f"Wake {n}",
                status="in_progress",
                assignee_agent_id=agent.id,
                responsible_user_id=ids["owner"],
            )
            db.session.flush()
            run = open_run(agent, issue, ids["owner"])
            interaction, _ = creation.create_connection_intent(
                issue, agent, service, addressee_user_id=ids["owner"], run_id=run.id
            )
            run.status = "succeeded"
            db.session.flush()
            cards.append(interaction.id)
        db.session.commit()
        db.session.remove()
    return cards


# --- 1. wake latency -----------------------------------------------------------------------------------------


def resolve_and_wait(app, ids: dict, interaction_id, patience: float = 30) -> float:
    """Decline the card as its request does (commit, then deliver); milliseconds until its run started."""
    from sqlalchemy import select

    from app.extensions import db
    from app.models import HeartbeatRun
    from app.services.intents import resolution
    from app.workers.continuations import deliver as deliver_continuation
    from app.workers.continuations import wake_key

    with app.app_context():
        resolution.decline_intent(interaction_id, ids["owner"], None)
        db.session.commit()
        committed = time.time()
        deliver_continuation(interaction_id)
        db.session.remove()
        key = wake_key(interaction_id, "declined")
        from app.models import WakeupRequest

        deadline = time.monotonic() + patience
        while True:
            row = db.session.execute(
                select(HeartbeatRun.started_at, HeartbeatRun.status)
                .join(WakeupRequest, WakeupRequest.run_id == HeartbeatRun.id)
                .where(WakeupRequest.idempotency_key == key)
            ).first()
            db.session.rollback()
            if row is not None and row.started_at is not None and row.status not in ("queued", "running"):
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"the continuation of {interaction_id} did not run: {row}")
            time.sleep(0.002)
        db.session.remove()
    started = row.started_at if row.started_at.tzinfo else row.started_at.replace(tzinfo=UTC)
    return (started.timestamp() - committed) * 1000


class WakeWorkers:
    """One `runs` worker process per mode (`poll`, `listen`), paused with SIGSTOP except during its own turn.

    Each worker wakes one unmeasured card before the first turn, so a slow start (imports, the listener
    connecting) is not counted as wake latency.
    """

    def __init__(
        self, app, ids: dict, url: str, env: dict, poll: float, modes: tuple[str, ...] = ("poll", "listen")
    ):
        self.app, self.ids = app, ids
        self.processes = {mode: start_worker(mode, url, env, poll) for mode in modes}

    def __enter__(self) -> WakeWorkers:
        for process in self.processes.values():
            process.send_signal(signal.SIGSTOP)
        warm_up = random.Random(0)
        for mode in self.processes:
            self.turn(mode, 1, warm_up, patience=120)
        return self

    def __exit__(self, *exc: object) -> None:
        for process in self.processes.values():
            process.send_signal(signal.SIGCONT)
            process.terminate()
            process.wait(10)

    def turn(self, mode: str, count: int, rng: random.Random, patience: float = 30) -> list[float]:
        """`count` cards resolved one after another while only `mode`'s worker runs: their wake latencies (ms)."""
        process = self.processes[mode]
        pending = open_cards(self.app, self.ids, "agent", count)
        process.send_signal(signal.SIGCONT)
        time.sleep(0.2)  # whatever it was doing when paused ends; it idles
        latencies = []
        try:
            for interaction_id in pending:
                latencies.append(resolve_and_wait(self.app, self.ids, interaction_id, patience))
                time.sleep(rng.uniform(0.02, 0.3))  # the worker goes idle, as between real resolutions
        finally:
            process.send_signal(signal.SIGSTOP)
        return latencies


def wake_latency(app, ids: dict, url: str, env: dict, cards: int, rounds: int, poll: float) -> dict:
    latencies: dict[str, list[float]] = {"poll": [], "listen": []}
    rng = random.Random(19)
    per_round = max(1, cards // rounds)
    with WakeWorkers(app, ids, url, env, poll) as workers:
        for _round in range(rounds):
            for mode in latencies:
                latencies[mode] += workers.turn(mode, per_round, rng)
            print(
                f"  wake round {_round + 1}/{rounds}: "
                + "; ".join(
                    f"{m} " + " ".join(f"{v:.0f}" for v in latencies[m][-per_round:]) for m in latencies
                ),
                flush=True,
            )
    return latencies


# --- 2. delivery rate ----------------------------------------------------------------------------------------


def baseline_module(rev: str) -> types.ModuleType:
    """`app/workers/continuations.py` as it was at `rev` (written to a scratch file and imported from there)."""
    source = subprocess.run(
        ["git", "show", f"{rev}:app/workers/continuations.py"],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    path = Path(tempfile.mkdtemp(prefix="switchboard-baseline-")) / "baseline_continuations.py"
    path.write_text(source)
    spec = importlib.util.spec_from_file_location("bench_baseline_continuations", path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def delivery_round(app, ids: dict, sweep, count: int, limit: int) -> float:
    """Resolve `count` cards (declined) without delivering, then two threads sweep: deliveries per second."""
    from app.extensions import db
    from app.services.intents import resolution

    cards = open_cards(app, ids, "manual", count)
    with app.app_context():
        for interaction_id in cards:
            resolution.decline_intent(interaction_id, ids["owner"], None)
        db.session.commit()
        db.session.remove()
    _delivered, elapsed = sweeps.sweep_in_two_threads(app, lambda: sweep(limit), count)
    return count / elapsed


def delivery_rates(app, ids: dict, rev: str, deliveries: int, rounds: int, limit: int) -> dict:
    from app.workers import continuations

    old = baseline_module(rev)
    sweepers = {
        f"baseline ({rev})": lambda n: old.sweep_pending(limit=n),
        "current": continuations.sweep_pending,
    }
    rates: dict[str, list[float]] = {label: [] for label in sweepers}
    per_round = max(1, deliveries // rounds)
    for _round in range(rounds):
        for label, sweep in sweepers.items():
            rates[label].append(delivery_round(app, ids, sweep, per_round, limit))
    return rates


# --- main ----------------------------------------------------------------------------------------------------


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument(
        "--admin-url",
        default=os.environ.get(
            "BENCH_ADMIN_DATABASE_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
        ),
    )
    parser.add_argument("--cards", type=int, default=40, help="cards per worker mode for the wake latency")
    parser.add_argument("--rounds", type=int, default=4, help="turns each mode takes")
    parser.add_argument("--poll", type=float, default=2.0, help="the workers' poll interval (the fallback)")
    parser.add_argument(
        "--deliveries", type=int, default=400, help="resolutions per variant for the delivery rate"
    )
    parser.add_argument("--sweep-limit", type=int, default=50, help="rows per sweep (the worker's default)")
    parser.add_argument(
        "--baseline-rev", default="ebc3788", help="git revision of the baseline delivery code"
    )
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--skip-rate", action="store_true")
    parser.add_argument("--worker", choices=("poll", "listen"), help=argparse.SUPPRESS)
    parser.add_argument("--url", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        worker_main(args.worker, args.url, args.poll)
        return

    admin_url = args.admin_url.replace("postgresql://", "postgresql+psycopg://", 1)
    name, url = seed.create_database(admin_url)
    scratch = Path(tempfile.mkdtemp(prefix="switchboard-wakes-"))
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "SECRET_KEY": os.urandom(24).hex(),
        "SWITCHBOARD_ENCRYPTION_KEY": Fernet.generate_key().decode(),
        "SWITCHBOARD_INSTANCE_PATH": str(scratch / "instance"),
        "PUBLIC_BASE_URL": "http://127.0.0.1:5000",
        "RUN_WORKER_IN_PROCESS": "0",
    }
    os.environ.update(env)
    print(f"database {name}")
    try:
        from app import create_app

        app = create_app({"SQLALCHEMY_DATABASE_URI": url})
        with app.app_context():
            seed.migrate()
        ids = make_company(app)
        if not args.skip_latency:
            latencies = wake_latency(app, ids, url, env, args.cards, args.rounds, args.poll)
            print()
            print(
                f"Wake latency, commit -> continuation run started ({args.cards} cards per mode, poll {args.poll:g} s)"
            )
            print(f"{'worker':10} {'p50 ms':>9} {'p99 ms':>9} {'max ms':>9} {'mean ms':>9}")
            for mode, values in latencies.items():
                print(
                    f"{mode:10} {percentile(values, 50):9.1f} {percentile(values, 99):9.1f} "
                    f"{max(values):9.1f} {statistics.mean(values):9.1f}"
                )
            poll_v, listen_v = latencies["poll"], latencies["listen"]
            print(
                f"ratio listen/poll: p50 {percentile(listen_v, 50) / percentile(poll_v, 50):.3f}, "
                f"p99 {percentile(listen_v, 99) / percentile(poll_v, 99):.3f}; targets p50 < {P50_TARGET_MS:g} ms, "
                f"p99 < {P99_TARGET_MS:g} ms: "
                + (
                    "ok"
                    if percentile(listen_v, 50) < P50_TARGET_MS and percentile(listen_v, 99) < P99_TARGET_MS
                    else "MISS"
                )
            )
        if not args.skip_rate:
            rates = delivery_rates(
                app, ids, args.baseline_rev, args.deliveries, args.rounds, args.sweep_limit
            )
            print()
            print(
                f"Continuation deliveries, two worker threads, sweeps of {args.sweep_limit} ({args.rounds} rounds)"
            )
            for label, values in rates.items():
                print(
                    f"{label:22} {statistics.mean(values):8.1f}/s  rounds: "
                    + ", ".join(f"{v:.0f}" for v in values)
                )
            base, current = (statistics.mean(v) for v in rates.values())
            verdict = "ok" if current >= RATE_TARGET else "MISS"
            print(f"ratio current/baseline: {current / base:.2f}; target >= {RATE_TARGET:g}/s: {verdict}")
    finally:
        seed.drop_database(admin_url, name)


if __name__ == "__main__":
    main()
