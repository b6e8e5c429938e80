"""The real agent CLIs (Claude Code, Codex, Gemini CLI) installed as test peers by `make peers` (tests/peers/agent_clis/).

npm installs each CLI's native binary as a platform package; claude-code's postinstall (which would swap the
`bin/claude` placeholder for the binary) does not run under npm 11's script policy, so tests run the native binaries
directly. Gemini CLI is a JavaScript bundle run by node (>= 20). Each finder returns the binary's path
(`gemini_command`: node and the bundle), or None when the peers are not installed (tests then skip, saying
how to install them). See tests/peers/AGENT_CLIS.md for the flags, env and config that keep them on loopback.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path

NODE_MODULES = Path(__file__).resolve().parent / "agent_clis" / "node_modules"
CLAUDE_VERSION = "2.1.332"
CODEX_VERSION = "0.171.0"
GEMINI_VERSION = "0.61.0"
INSTALL_HINT = "agent CLIs not installed: run `make peers` (tests/peers/agent_clis)"

_ARCH = {"x86_64": "x64", "amd64": "x64", "aarch64": "arm64", "arm64": "arm64"}
_RUST_ARCH = {"x64": "x86_64", "arm64": "aarch64"}


def _executable(path: Path) -> str | None:
    return str(path) if path.is_file() and os.access(path, os.X_OK) else None


def claude_binary() -> str | None:
    """The native Claude Code binary (`claude --version` prints "2.1.332 (Claude Code)"), or None."""
    arch = _ARCH.get(platform.machine().lower())
    if arch is None:
        return None
    for suffix in ("", "-musl"):
        found = _executable(NODE_MODULES / "@anthropic-ai" / f"claude-code-linux-{arch}{suffix}" / "claude")
        if found:
            return found
    return None


def codex_binary() -> str | None:
    """The native Codex CLI binary (`codex --version` prints "codex-cli 0.171.0"), or None."""
    arch = _ARCH.get(platform.machine().lower())
    if arch is None:
        return None
    triple = f"{_RUST_ARCH[arch]}-unknown-linux-musl"
    return _executable(NODE_MODULES / "@openai" / f"codex-linux-{arch}" / "vendor" / triple / "bin" / "codex")


def gemini_binary() -> str | None:
    """The Gemini CLI bundle as one executable (`#!/usr/bin/env node`: node >= 20 must be on PATH), for the adapter's
    `binary` setting, or None."""
    command = gemini_command()
    return _executable(Path(command[1])) if command else None


def gemini_command() -> list[str] | None:
    """`[node, <gemini bundle>]` (Gemini CLI 0.61.0 needs node >= 20), or None when either is missing."""
    bundle = NODE_MODULES / "@google" / "gemini-cli" / "bundle" / "gemini.js"
    node = shutil.which("node")
    if node is None or not bundle.is_file():
        return None
    version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=10).stdout
    if int(version.lstrip("v").split(".")[0] or 0) < 20:
        return None
    return [node, str(bundle)]
