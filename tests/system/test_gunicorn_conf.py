"""`gunicorn.conf.py` as gunicorn itself loads it: threaded workers, and an access log without query strings."""

from __future__ import annotations

import re

import pytest
from gunicorn.config import Config

from app.config import load_config
from tests.paths import ROOT

CONF = ROOT / "gunicorn.conf.py"


@pytest.fixture
def gunicorn_config(monkeypatch) -> Config:
    for name in ("WEB_CONCURRENCY", "SWITCHBOARD_THREADS", "SWITCHBOARD_BIND"):
        monkeypatch.delenv(name, raising=False)
    namespace: dict = {"__file__": str(CONF)}
    exec(compile(CONF.read_text(), str(CONF), "exec"), namespace)  # noqa: S102  (our own config file)
    config = Config()
    for key, value in namespace.items():
        if key in config.settings:
            config.set(key, value)
    return config


def test_access_log_format_has_no_query_string_or_request_line(gunicorn_config):
    log_format = gunicorn_config.access_log_format
    assert "%(U)s" in log_format
    for leaky in ("%(r)s", "%(q)s", "%(f)s", "{", "RAW_URI"):
        assert leaky not in log_format, leaky
    # Every atom used is one gunicorn knows.
    assert set(re.findall(r"%\((\w+)\)s", log_format)) <= set("htmUHsBMLTDpa")


def test_threaded_workers_with_more_threads_than_one_provider_may_hold(gunicorn_config, tmp_path):
    defaults = load_config(str(tmp_path))
    assert gunicorn_config.worker_class_str == "gthread"
    assert gunicorn_config.workers == 2 and gunicorn_config.threads == 8
    assert gunicorn_config.threads > defaults["PROVIDER_MAX_CONCURRENT_CALLS"]
    assert gunicorn_config.timeout == 60
    assert gunicorn_config.graceful_timeout > defaults["PROVIDER_CALL_TIMEOUT_SECONDS"]
    assert gunicorn_config.bind == ["127.0.0.1:8000"]
