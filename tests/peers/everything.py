"""The official MCP reference server `@modelcontextprotocol/server-everything` as a provider peer.

Installed (pinned) by `make peers` under tests/peers/everything; served over streamable HTTP on a free loopback port
(`node dist/index.js streamableHttp`, the port from `PORT`). Tests that need it skip when it is not installed.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

PACKAGE = (
    Path(__file__).parent / "everything" / "node_modules" / "@modelcontextprotocol" / "server-everything"
)
ENTRY = PACKAGE / "dist" / "index.js"
_START_TIMEOUT = 30.0


def installed() -> bool:
    return ENTRY.exists() and shutil.which("node") is not None


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@contextmanager
def serving_everything() -> Iterator[str]:
    """Start the server; yields its MCP URL (`http://127.0.0.1:<port>/mcp`); stops it afterwards."""
    port = _free_port()
    process = subprocess.Popen(
        ["node", str(ENTRY), "streamableHttp"],
        env={**os.environ, "PORT": str(port)},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + _START_TIMEOUT
        while True:
            if process.poll() is not None:
                raise RuntimeError(f"server-everything exited with {process.returncode}")
            try:
                with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise RuntimeError("server-everything did not start listening") from None
                time.sleep(0.05)
        yield f"http://127.0.0.1:{port}/mcp"
    finally:
        process.terminate()
        try:
            process.wait(timeout=5)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
