"""Two worker threads sweep the continuation deliveries until none is left (the delivery rows of both benchmarks)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any


def sweep_in_two_threads(app: Any, sweep_once: Callable[[], dict], expected: int) -> tuple[int, float]:
    """Run `sweep_once` in two threads, each in its own app context, until a sweep delivers nothing; checks that
    exactly `expected` deliveries happened and none is left. Returns (delivered, seconds)."""
    from sqlalchemy import text

    from app.extensions import db

    delivered = [0, 0]

    def worker(slot: int) -> None:
        with app.app_context():
            while True:
                done = sum(sweep_once().values())
                if not done:
                    break
                delivered[slot] += done
            db.session.remove()

    threads = [threading.Thread(target=worker, args=(slot,)) for slot in (0, 1)]
    t0 = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - t0
    with app.app_context():
        leftover = db.session.scalar(
            text("SELECT count(*) FROM connection_intent_deliveries WHERE delivered_at IS NULL")
        )
        db.session.remove()
    assert leftover == 0 and sum(delivered) == expected, (leftover, delivered)
    return sum(delivered), elapsed
