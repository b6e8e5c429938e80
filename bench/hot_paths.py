"""In-process hot paths, the baseline revision's code vs the current code, side by side in one run.

    .venv/bin/python bench/hot_paths.py [--scale 1.0] [--repeat 20] [--baseline-rev ebc3788] [--previous-rev REV]

Seeds the synthetic company of `bench/runtime.py` (bench/seed.py: at scale 1.0 the bench agent has about 100
installed connections, 95 of them eligible for instructions, and about 3,700 visible tools) on a throwaway PostgreSQL
database, then times, alternating baseline and current call by call (so noise lands on both):

- **instruction resolution** (`resolve_instructions_for_run`): the baseline module (`app/services/runs/snapshot.py`
  at `--baseline-rev`, loaded from git); the current one with its cache cleared (a turn right after an access
  change); and the current one warm (a turn after no access change).
- **tools/list rebuild** (the listing built again after an access change): the baseline module's
  `[tool.definition() for tool in tool_map(run).values()]` (`app/services/gateway/tools.py` at `--baseline-rev`) vs
  the current `list_tool_definitions` with its cache cleared; with `--previous-rev`, that revision's
  `list_tool_definitions` too (cache cleared), and whether its text and the current one are byte for byte the same.

Each operation runs in a fresh app context and session, as a request or a worker turn would. Prints the median and
p90 milliseconds, the median CPU milliseconds of this process (`time.process_time`: the database's share and other
processes' load left out), statements per call, and the ratio current/baseline. Timings are printed, never asserted.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import subprocess
import sys
import tempfile
import time
import types
from collections.abc import Callable
from pathlib import Path

from cryptography.fernet import Fernet
from sqlalchemy import event

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "bench"))

import seed  # noqa: E402  (bench/seed.py, beside this file)

RESOLUTION_TARGET_MS = 10.0
LISTING_TARGET_MS = 100.0


def module_at(rev: str, path: str) -> types.ModuleType:
    """`path` as it was at `rev` (written to a scratch file and imported from there)."""
    source = subprocess.run(
        ["git", "show", f"{rev}:{path}"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    target = Path(tempfile.mkdtemp(prefix="switchboard-baseline-")) / Path(path).name
    target.write_text(source)
    spec = importlib.util.spec_from_file_location(f"bench_baseline_{Path(path).stem}", target)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # dataclasses look their module up
    spec.loader.exec_module(module)
    return module


def percentile(values: list[float], p: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(round(p / 100 * (len(ordered) - 1))))]


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
    parser.add_argument("--scale", type=float, default=1.0)
    parser.add_argument("--repeat", type=int, default=20, help="timed calls per operation")
    parser.add_argument("--baseline-rev", default="ebc3788")
    parser.add_argument(
        "--previous-rev",
        help="also time this revision's cached listing rebuilt (`list_tool_definitions`, since issue 19)",
    )
    args = parser.parse_args(argv)

    admin_url = args.admin_url.replace("postgresql://", "postgresql+psycopg://", 1)
    name, url = seed.create_database(admin_url)
    scratch = Path(tempfile.mkdtemp(prefix="switchboard-hot-"))
    os.environ.update(
        {
            "DATABASE_URL": url,
            "SECRET_KEY": os.urandom(24).hex(),
            "SWITCHBOARD_ENCRYPTION_KEY": Fernet.generate_key().decode(),
            "SWITCHBOARD_INSTANCE_PATH": str(scratch / "instance"),
            "RUN_WORKER_IN_PROCESS": "0",
        }
    )
    print(
        f"database {name} (scale {args.scale}, {args.repeat} calls per operation, baseline {args.baseline_rev})"
    )
    try:
        run(args, url)
    finally:
        seed.drop_database(admin_url, name)


def run(args, url: str) -> None:
    from app import create_app
    from app.extensions import db
    from app.models import HeartbeatRun
    from app.services.access.revision import current_revision
    from app.services.gateway import tools as gateway_tools
    from app.services.runs import snapshot

    app = create_app({"SQLALCHEMY_DATABASE_URI": url})
    with app.app_context():
        seed.migrate()
        seeded = seed.seed_company(args.scale)
        db.session.commit()
        db.session.remove()
        engine = db.engine
    old_snapshot = module_at(args.baseline_rev, "app/services/runs/snapshot.py")
    old_tools = module_at(args.baseline_rev, "app/services/gateway/tools.py")

    def in_session(body: Callable[[HeartbeatRun], object]) -> Callable[[], object]:
        def call():
            with app.app_context():
                try:
                    return body(db.session.get(HeartbeatRun, seeded.run_id))
                finally:
                    db.session.remove()

        return call

    def cold_resolution(run):
        snapshot.clear_instruction_sources()
        return snapshot.resolve_instructions_for_run(run)

    def cold_listing(run):
        gateway_tools.clear_listings()
        return gateway_tools.list_tool_definitions(run, current_revision(run.company_id))

    groups = {
        "instruction resolution": {
            "baseline": in_session(old_snapshot.resolve_instructions_for_run),
            "current, after an access change": in_session(cold_resolution),
            "current, no access change": in_session(snapshot.resolve_instructions_for_run),
        },
        "tools/list rebuild": {
            "baseline": in_session(lambda run: [t.definition() for t in old_tools.tool_map(run).values()]),
            "current": in_session(cold_listing),
        },
    }
    if args.previous_rev:
        previous_tools = module_at(args.previous_rev, "app/services/gateway/tools.py")

        def previous_listing(run):
            previous_tools.clear_listings()
            return previous_tools.list_tool_definitions(run, current_revision(run.company_id))

        groups["tools/list rebuild"][f"previous ({args.previous_rev})"] = in_session(previous_listing)
        # Byte for byte: the previous revision's listing text and the current one's.
        same = in_session(previous_listing)().text == in_session(cold_listing)().text
        print(
            f"  tools/list rebuild: the previous and current texts are {'identical' if same else 'DIFFERENT'}"
        )
    # The same answers: the baseline's and the current code's outputs are equal.
    with app.app_context():
        sources = len(snapshot.instruction_sources_for_run(db.session.get(HeartbeatRun, seeded.run_id)))
        db.session.remove()
    for label, variants in groups.items():
        # A listing is kept serialized since issue 19 (`RawJSON`): compare its value.
        answers = [_plain(variant()) for variant in variants.values()]
        assert all(answer == answers[0] for answer in answers), f"{label}: the variants disagree"
        size = len(answers[0]) if isinstance(answers[0], list) else len(answers[0]["text"])
        print(
            f"  {label}: answers agree ({size} {'tools' if isinstance(answers[0], list) else 'characters'})"
        )
    print(f"  {sources} eligible connections")

    statements = {"n": 0}

    def count(*_args):
        statements["n"] += 1

    event.listen(engine, "before_cursor_execute", count)
    for label, variants in groups.items():
        timings: dict[str, list[float]] = {variant: [] for variant in variants}
        cpu: dict[str, list[float]] = {variant: [] for variant in variants}
        counts: dict[str, int] = {}
        for variant in variants.values():
            variant()  # warm
        for _ in range(args.repeat):
            for variant_label, variant in variants.items():
                statements["n"] = 0
                t0, c0 = time.perf_counter(), time.process_time()
                variant()
                cpu[variant_label].append((time.process_time() - c0) * 1000)
                timings[variant_label].append((time.perf_counter() - t0) * 1000)
                counts[variant_label] = statements["n"]
        base = statistics.median(timings["baseline"])
        base_cpu = statistics.median(cpu["baseline"])
        print()
        print(label)
        print(
            f"  {'variant':34} {'median ms':>10} {'p90 ms':>8} {'stmts':>6} {'x baseline':>11}"
            f" {'cpu ms':>8} {'cpu x base':>11}"
        )
        for variant_label, values in timings.items():
            median = statistics.median(values)
            median_cpu = statistics.median(cpu[variant_label])
            print(
                f"  {variant_label:34} {median:10.1f} {percentile(values, 90):8.1f} "
                f"{counts[variant_label]:6d} {median / base:11.3f} {median_cpu:8.1f} {median_cpu / base_cpu:11.3f}"
            )
    event.remove(engine, "before_cursor_execute", count)
    print()
    print(
        f"targets: instruction resolution <= {RESOLUTION_TARGET_MS:g} ms; tools/list rebuild <= {LISTING_TARGET_MS:g} ms"
    )


def _plain(answer):
    return answer.value() if hasattr(answer, "value") else answer


if __name__ == "__main__":
    main()
