"""`/metrics` under gunicorn with several processes (issue 31 item 10): with `PROMETHEUS_MULTIPROC_DIR` set, one
scrape adds up the requests every process answered, whichever process answers the scrape.

A real gunicorn (the production `gunicorn.conf.py`, two worker processes) on the test database; requests are sent
many at once so both processes answer some, which the per-process files in the folder show.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.services.gateway.test_cancellation import gunicorn_server

TOKEN = "metrics-token-for-gunicorn"
REQUESTS = 40


def _healthz_count(base: str) -> float:
    answer = httpx.get(f"{base}/metrics", headers={"Authorization": f"Bearer {TOKEN}"}, timeout=30)
    assert answer.status_code == 200
    for family in text_string_to_metric_families(answer.text):
        for sample in family.samples:
            if sample.name == "switchboard_http_requests_total" and sample.labels == {
                "endpoint": "health.healthz",
                "method": "GET",
                "status": "200",
            }:
                return sample.value
    return 0.0


def test_one_scrape_counts_every_process(app, db, tmp_path):
    folder = tmp_path / "prometheus"
    folder.mkdir()
    env = {
        "WEB_CONCURRENCY": "2",
        "PROMETHEUS_MULTIPROC_DIR": str(folder),
        "SWITCHBOARD_METRICS_TOKEN": TOKEN,
    }
    with gunicorn_server(app, tmp_path, extra_env=env) as url:
        base = url.split("/mcp/", 1)[0]
        assert httpx.get(f"{base}/metrics", timeout=30).status_code == 401
        before = _healthz_count(base)  # the start-up wait polled /healthz too

        def healthz(_: int) -> int:
            with httpx.Client(timeout=30) as fresh:  # a connection of its own: any process may take it
                return fresh.get(f"{base}/healthz").status_code

        with ThreadPoolExecutor(8) as pool:
            assert set(pool.map(healthz, range(REQUESTS))) == {200}
        writers = {path.name.rsplit("_", 1)[1] for path in folder.glob("*.db")}
        assert len(writers) == 2, writers  # both processes answered some requests
        # Every scrape sums both processes' files, whichever process answers it.
        assert [_healthz_count(base) - before for _ in range(4)] == [REQUESTS] * 4
