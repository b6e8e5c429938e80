"""Run one turn of an agent CLI: private files, the managed environment, the process group, the JSON events.

A CLI profile (`claude_code`, `codex`, `gemini`) says how its CLI is invoked (`CliTurn`) and how its machine-readable
output reads (`read`). This module owns everything they share:

- the binary: the configured path or name, looked up on the child's `PATH`, with a clear error when missing;
- a private run folder (mode 0700, `switchboard-agent-run-*`) holding the turn's files (mode 0600): the MCP
  configuration, the instruction snapshot. It is removed on every exit path: success, failure, timeout, kill;
- the CLI's private config home, kept per agent (`Invocation.agent_home`) so sessions can be resumed, and never the
  person's own (`~/.claude`, `~/.codex`, `~/.gemini`);
- the environment: the process adapter's (`PAPERCLIP_*`, server secrets removed), the agent's configured variables
  and decrypted secrets, then the profile's. The run token travels only in the environment, read by the CLI's own
  header-from-environment mechanism, so `ps` never shows it;
- the process group, killed whole on timeout; stdout read line by line as JSON events, bounded and scrubbed of every
  secret value the turn was given.
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import tempfile
import threading
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from app.adapters import AdapterResult, Invocation
from app.adapters.agents.events import TurnEvents
from app.adapters.process import LinePump, child_environment, kill_group, wait_for_turn
from app.core import agent_turns

RUN_DIR_PREFIX = "switchboard-agent-run-"
DEFAULT_TIMEOUT_SECONDS = 900.0
_LINE_LIMIT = 1024 * 1024  # one JSON event line; a longer one is skipped, not parsed
# The MCP server keys every profile registers: the runtime tools and the tool gateway (tool names are prefixed with
# them by the CLIs, so they are short: see `app.services.gateway.names`).
RUNTIME_SERVER = "switchboard"
GATEWAY_SERVER = "gateway"
OUR_SERVERS = (RUNTIME_SERVER, GATEWAY_SERVER)


def our_mcp_servers(runtime_tools: Mapping[str, Any] | None) -> list[tuple[str, str]]:
    """The MCP servers a turn is given, as (name the CLI knows it by, URL): the runtime tools and the gateway, each
    only when the run has its endpoint."""
    runtime = runtime_tools or {}
    endpoints = (
        (RUNTIME_SERVER, runtime.get("mcpEndpoint")),
        (GATEWAY_SERVER, runtime.get("gatewayMcpEndpoint")),
    )
    return [(name, str(url)) for name, url in endpoints if url]


TOKEN_ENV = "PAPERCLIP_RUNTIME_TOOLS_TOKEN"  # noqa: S105 (the variable's name, not a secret)


class AgentConfigError(ValueError):
    """The agent's adapter configuration cannot run (the message is shown on the run)."""


@dataclass(frozen=True)
class TurnPaths:
    run_dir: Path  # private, removed when the turn ends
    home: Path  # the CLI's private config home, kept per agent
    instructions_file: str  # the snapshot's `instructions.json` in run_dir, or "" when no instructions apply


@dataclass
class CliTurn:
    argv: list[str]
    stdin: str
    env: dict[str, str] = field(default_factory=dict)


class AgentCli(Protocol):
    adapter_type: str
    label: str
    default_binary: str
    install_hint: str

    def turn(
        self, invocation: Invocation, paths: TurnPaths, binary: str, settings: CliSettings
    ) -> CliTurn: ...

    def read(self, event: dict[str, Any], events: TurnEvents) -> None: ...


@dataclass(frozen=True)
class CliSettings:
    """The agent's adapter configuration, validated: what the Agents page saves."""

    binary: str
    model: str | None
    cwd: str | None
    extra_args: list[str]
    timeout: float
    env: dict[str, str]
    base_url: str | None

    @classmethod
    def of(cls, config: Mapping[str, Any], default_binary: str) -> CliSettings:
        binary = config.get("binary") or default_binary
        if not isinstance(binary, str) or not binary.strip():
            raise AgentConfigError("binary must be a program name or path.")
        model = config.get("model") or None
        if model is not None and not isinstance(model, str):
            raise AgentConfigError("model must be text.")
        cwd = config.get("cwd") or None
        if cwd is not None and not isinstance(cwd, str):
            raise AgentConfigError("cwd must be a folder path.")
        extra = config.get("extraArgs") or []
        if not isinstance(extra, list) or not all(isinstance(a, str) for a in extra):
            raise AgentConfigError("extraArgs must be a list of strings.")
        try:
            timeout = float(config.get("timeoutSeconds") or DEFAULT_TIMEOUT_SECONDS)
        except (TypeError, ValueError) as exc:
            raise AgentConfigError("timeoutSeconds must be a number.") from exc
        if timeout <= 0:
            raise AgentConfigError("timeoutSeconds must be positive.")
        env = config.get("env") or {}
        if not isinstance(env, dict):
            raise AgentConfigError("env must map names to values.")
        base_url = config.get("baseUrl") or None
        if base_url is not None and not (
            isinstance(base_url, str) and base_url.startswith(("http://", "https://"))
        ):
            raise AgentConfigError("baseUrl must be an http(s) URL.")
        return cls(
            binary=binary.strip(),
            model=model.strip() if model else None,
            cwd=cwd,
            extra_args=list(extra),
            timeout=timeout,
            env={str(k): str(v) for k, v in env.items() if v is not None},
            base_url=base_url,
        )


def resolve_binary(binary: str, path: str | None, cli: AgentCli) -> str:
    """The executable to run, or AgentConfigError naming what is missing and how to install it."""
    if os.sep in binary:
        if os.path.isfile(binary) and os.access(binary, os.X_OK):
            return binary
        raise AgentConfigError(f"{cli.label} was not found at {binary} (not an executable file).")
    found = shutil.which(binary, path=path)
    if found is None:
        raise AgentConfigError(
            f"{cli.label} was not found: `{binary}` is not on PATH. Install it ({cli.install_hint}) "
            "or set the binary's path on the agent's page."
        )
    return found


def write_private(path: Path, text: str) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


def private_dir(path: Path) -> Path:
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    with contextlib.suppress(OSError):
        path.chmod(0o700)
    return path


class _EventReader:
    """Hands each complete stdout line that is a JSON object to the profile; the lock guards the events while the
    result is read."""

    def __init__(self, cli: AgentCli, events: TurnEvents) -> None:
        self.cli = cli
        self.events = events
        self.lock = threading.Lock()

    def __call__(self, line: bytes) -> None:
        stripped = line.strip()
        if not stripped.startswith(b"{"):
            return
        try:
            event = json.loads(stripped)
        except ValueError:
            return
        if isinstance(event, dict):
            # An event shape this profile does not know is kept in the raw log only.
            with self.lock, contextlib.suppress(KeyError, TypeError, ValueError, AttributeError):
                self.cli.read(event, self.events)


class AgentCliAdapter:
    """The adapter for one agent CLI profile (`get_adapter("claude_code")`, ...); a profile reads one turn's output,
    so each turn gets its own."""

    def __init__(self, profile: Callable[[], AgentCli]) -> None:
        self.cli = profile()

    def execute(self, invocation: Invocation) -> AdapterResult:
        try:
            settings = CliSettings.of(invocation.config, self.cli.default_binary)
        except AgentConfigError as exc:
            return AdapterResult(ok=False, error=str(exc))
        run_dir = Path(tempfile.mkdtemp(prefix=RUN_DIR_PREFIX))  # mode 0700
        try:
            return self._execute(invocation, settings, run_dir)
        except AgentConfigError as exc:
            return AdapterResult(ok=False, error=str(exc))
        finally:
            shutil.rmtree(run_dir, ignore_errors=True)

    def _execute(self, invocation: Invocation, settings: CliSettings, run_dir: Path) -> AdapterResult:
        instructions_file = ""
        snapshot = invocation.connection_instructions
        if snapshot and snapshot.get("text"):
            instructions_file = str(run_dir / "instructions.json")
            write_private(
                Path(instructions_file),
                json.dumps({"text": snapshot["text"], "digest": snapshot.get("digest")}, ensure_ascii=False),
            )
        home_root = Path(invocation.agent_home) if invocation.agent_home else run_dir / "home"
        home = private_dir(home_root / self.cli.adapter_type)
        paths = TurnPaths(run_dir=run_dir, home=home, instructions_file=instructions_file)

        env = child_environment(invocation, instructions_file)
        env.update(settings.env)
        env.update(invocation.secret_env)
        binary = resolve_binary(settings.binary, env.get("PATH"), self.cli)
        cwd = settings.cwd or str(private_dir(home_root / "workspace"))
        if not os.path.isdir(cwd):
            raise AgentConfigError(f"The working directory {cwd} does not exist.")
        turn = self.cli.turn(invocation, paths, binary, settings)
        # The CLIs' caches and state (Claude Code keeps per-project logs in ~/.cache) stay in the agent's folder.
        env["XDG_CACHE_HOME"] = str(private_dir(home_root / "cache"))
        env["XDG_STATE_HOME"] = str(private_dir(home_root / "state"))
        # Its temporary files and sockets (Claude Code's `cc-socks`) go with the run folder.
        env["TMPDIR"] = str(private_dir(run_dir / "tmp"))
        env.update(turn.env)

        secrets = [*invocation.secret_env.values(), env.get(TOKEN_ENV, "")]
        events = TurnEvents(secrets=secrets)
        try:
            proc = subprocess.Popen(
                turn.argv,
                cwd=cwd,
                env=env,
                stdin=subprocess.PIPE,
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            return AdapterResult(ok=False, error=f"Could not start {self.cli.label}: {exc}")
        agent_turns.agent_started(proc)  # a worker's shutdown may end it (issue 31)
        try:
            return self._wait(proc, turn, settings, events)
        finally:
            if proc.poll() is None:
                kill_group(proc)
                proc.wait()
            agent_turns.agent_ended(proc)

    def _wait(
        self, proc: subprocess.Popen[bytes], turn: CliTurn, settings: CliSettings, events: TurnEvents
    ) -> AdapterResult:
        reader = _EventReader(self.cli, events)
        out, err = LinePump(proc.stdout, reader, line_limit=_LINE_LIMIT), LinePump(proc.stderr)
        timed_out = wait_for_turn(proc, (out, err), turn.stdin.encode("utf-8"), settings.timeout)
        code = proc.returncode
        with reader.lock:
            if timed_out:
                error: str | None = (
                    f"{self.cli.label} timed out after {settings.timeout:g} seconds; its process group was stopped."
                )
                events.fail(error)
            elif code != 0:
                error = events.error or f"{self.cli.label} exited with code {code}."
            elif events.failed:
                error = events.error or f"{self.cli.label} reported that the turn failed."
            else:
                error = None
            return AdapterResult(
                ok=error is None,
                stdout=events.scrub(out.buffer.text()),
                stderr=events.scrub(err.buffer.text()),
                exit_code=code,
                session_id=events.session_id,
                error=error,
                timed_out=timed_out,
                truncated=out.buffer.truncated or err.buffer.truncated,
                events=list(events.events),
                summary=events.summary(),
            )
