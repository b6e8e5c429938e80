"""`switchboard start-demo` (what `make run` serves, issue 27 item 6): a real process on loopback. The sign-ins are the
last thing printed, and only once the login page answers; request logs stay quiet; SIGTERM stops the app and the
offline demo provider with it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import urllib.request

from tests.paths import ROOT
from tests.peers.notification_peers import free_port

BANNER_END = "Press Ctrl+C to stop."


def _switchboard(*args: str, env: dict, **kwargs) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", "from app.cli import main; main()", *args],
        cwd=str(ROOT),
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        text=True,
        **kwargs,
    )


def test_the_demo_prints_its_sign_ins_last_once_the_login_page_answers(tmp_path):
    env = {
        **os.environ,
        "SWITCHBOARD_INSTANCE_PATH": str(tmp_path),
        "DATABASE_URL": f"sqlite:///{tmp_path / 'demo.db'}",
        "PUBLIC_BASE_URL": "",
    }
    env.pop("SWITCHBOARD_REQUEST_LOG", None)
    upgrade = _switchboard("db", "upgrade", env=env)
    assert upgrade.wait(timeout=300) == 0, upgrade.stdout.read()
    port, provider_port = free_port(), free_port()
    demo = _switchboard(
        "start-demo",
        "--port",
        str(port),
        "--provider-port",
        str(provider_port),
        env=env,
        start_new_session=True,
    )
    lines: list[str] = []
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline:
            line = demo.stdout.readline()
            assert line, f"start-demo ended early: {''.join(lines)}"
            lines.append(line.rstrip("\n"))
            if lines[-1] == BANNER_END:
                break
        # When the banner is printed, the app answers already.
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/login", timeout=5) as answer:
            assert answer.status == 200
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/login", timeout=5) as answer:
            assert answer.status == 200
        text = "\n".join(lines)
        banner = text[text.index("Switchboard is ready:") :]
        assert banner == "\n".join(
            [
                f"Switchboard is ready: http://127.0.0.1:{port}",
                "",
                "Sign in as:",
                "  owner@example.com / demo-owner-password  (owner)",
                "  member@example.com / demo-member-password  (member)",
                "",
                "Without internet: assign the task 'Record the launch decisions in Honcho' to Builder, and answer "
                "its card",
                "with API key demo-honcho-key and workspace demo (a local Honcho-compatible server on",
                f"127.0.0.1:{provider_port}).",
                "",
                BANNER_END,
            ]
        )
        demo.send_signal(signal.SIGTERM)
        rest = demo.communicate(timeout=30)[0]
        # Quiet request logs: the two GET /login above printed nothing.
        assert "GET /login" not in text + rest
        assert demo.returncode == 0
    finally:
        if demo.poll() is None:
            os.killpg(demo.pid, signal.SIGKILL)
    # The app and the demo provider went with it: nothing answers on their ports.
    for probe in (port, provider_port):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{probe}/", timeout=2)
        except OSError:
            continue
        raise AssertionError(f"something still answers on port {probe}")
