"""Process adapter: run the agent's configured local command for one turn.

Agent configuration (`adapter_config`): `command` (a list of arguments, or a string split like a shell would),
optional `args` (appended), `cwd`, `env` (extra variables) and `timeoutSeconds` (default 600).

The contract with the child process:

- stdin carries the shared wake prompt (which already contains the connection-instruction text); the same prompt is
  in `PAPERCLIP_WAKE_PROMPT`.
- `PAPERCLIP_CONNECTION_INSTRUCTIONS_FILE` is always set by the server, overriding configured and inherited values:
  empty when no instructions apply, otherwise the path of `instructions.json` (mode 0600, `{"text", "digest"}`) in a
  private temporary directory `paperclip-connection-instructions-*`. The directory is removed when the turn ends,
  whether the process succeeded, failed, timed out or was killed.
- `PAPERCLIP_RUNTIME_TOOLS_*` describe the runtime tools (MCP URL, REST URLs, bearer token, expiry, tool names,
  guidance) when the run has them; otherwise `PAPERCLIP_RUNTIME_TOOLS_AVAILABLE` is empty.
  `PAPERCLIP_TOOL_GATEWAY_MCP_URL` is the tool gateway (the run's connected tools; same bearer token).
- `PAPERCLIP_RUN_ID`, `PAPERCLIP_AGENT_ID`, `PAPERCLIP_COMPANY_ID`, `PAPERCLIP_TASK_ID` identify the turn;
  `PAPERCLIP_SESSION_ID` is the session to resume (empty: start a fresh session); `PAPERCLIP_WAKE_CONTEXT` is the
  wake context as JSON (`issueId`, and for a continuation `interactionId`, `outcome`, `forceFreshSession`).
- To report a session, print one line on stdout: `{"paperclipSession": {"id": "<session id>"}}` (the last such line
  wins). Exit code 0 means the turn succeeded.

The child inherits the server's environment minus server secrets (`SECRET_KEY`, `DATABASE_URL`, `SWITCHBOARD_*`) and
minus every inherited `PAPERCLIP_*` variable, so nothing forged from the outside reaches it.
"""

from __future__ import annotations

import contextlib
import json
import os
import shlex
import shutil
import signal
import subprocess
import tempfile
import threading
from collections.abc import Callable
from pathlib import Path
from typing import IO, Any

from app.adapters import SESSION_LINE_KEY, AdapterResult, Invocation, TailBuffer
from app.core import agent_turns

INSTRUCTIONS_ENV = "PAPERCLIP_CONNECTION_INSTRUCTIONS_FILE"
TEMP_PREFIX = "paperclip-connection-instructions-"
DEFAULT_TIMEOUT_SECONDS = 600.0
SERVER_SECRET_NAMES = {"SECRET_KEY", "DATABASE_URL", "PAPERCLIP_AGENT_JWT_SECRET", "BETTER_AUTH_SECRET"}
SERVER_PREFIXES = ("SWITCHBOARD_", "PAPERCLIP_")
# Linux refuses single environment strings above 128 KiB; stdin always carries the full prompt.
ENV_PROMPT_LIMIT = 100_000
_MAX_SESSION_LINE = 4096
_READER_GRACE_SECONDS = 5.0


class ProcessConfigError(ValueError):
    pass


def command_of(config: dict) -> list[str]:
    command = config.get("command")
    if isinstance(command, str):
        argv = shlex.split(command)
    elif isinstance(command, list) and all(isinstance(a, str) for a in command):
        argv = list(command)
    else:
        raise ProcessConfigError("The process adapter needs a command (a list of arguments or a string).")
    args = config.get("args") or []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ProcessConfigError("args must be a list of strings.")
    argv += args
    if not argv:
        raise ProcessConfigError("The process adapter needs a command.")
    return argv


def runtime_tools_env(descriptor: dict | None) -> dict[str, str]:
    """The `PAPERCLIP_RUNTIME_TOOLS_*` projection of a runtime-tools descriptor (`runtime_descriptor`), plus
    `PAPERCLIP_TOOL_GATEWAY_MCP_URL` (the tool gateway, authenticated with the same token)."""
    if not descriptor:
        return {"PAPERCLIP_RUNTIME_TOOLS_AVAILABLE": ""}
    rest = descriptor.get("rest") or {}
    return {
        "PAPERCLIP_RUNTIME_TOOLS_MCP_URL": str(descriptor.get("mcpEndpoint") or ""),
        "PAPERCLIP_RUNTIME_TOOLS_TOKEN": str(descriptor.get("bearerToken") or ""),
        "PAPERCLIP_RUNTIME_TOOLS_EXPIRES_AT": str(descriptor.get("expiresAt") or ""),
        "PAPERCLIP_RUNTIME_TOOLS_CONNECTIONS_SEARCH_URL": str(rest.get("connectionsSearch") or ""),
        "PAPERCLIP_RUNTIME_TOOLS_CONNECTION_REQUEST_URL": str(rest.get("connectionRequest") or ""),
        "PAPERCLIP_RUNTIME_TOOLS_AVAILABLE": ",".join(descriptor.get("tools") or []),
        "PAPERCLIP_RUNTIME_TOOLS_GUIDANCE": str(descriptor.get("guidance") or ""),
        # The tool gateway (same bearer token): the run's connected tools, under action policy and approvals.
        "PAPERCLIP_TOOL_GATEWAY_MCP_URL": str(descriptor.get("gatewayMcpEndpoint") or ""),
    }


def child_environment(invocation: Invocation, instructions_file: str) -> dict[str, str]:
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in SERVER_SECRET_NAMES and not k.startswith(SERVER_PREFIXES)
    }
    configured = invocation.config.get("env") or {}
    if isinstance(configured, dict):
        env.update({str(k): str(v) for k, v in configured.items() if v is not None})
    # Server-owned variables come last: nothing configured or inherited survives.
    for key in [k for k in env if k.startswith("PAPERCLIP_")]:
        del env[key]
    env[INSTRUCTIONS_ENV] = instructions_file
    env.update(runtime_tools_env(invocation.runtime_tools))
    env.update(
        {
            "PAPERCLIP_RUN_ID": invocation.run_id,
            "PAPERCLIP_AGENT_ID": invocation.agent_id,
            "PAPERCLIP_COMPANY_ID": invocation.company_id,
            "PAPERCLIP_TASK_ID": invocation.issue_id or "",
            "PAPERCLIP_SESSION_ID": invocation.resume_session_id or "",
            "PAPERCLIP_WAKE_PROMPT": invocation.prompt[:ENV_PROMPT_LIMIT],
            "PAPERCLIP_WAKE_CONTEXT": wake_context_json(invocation.context),
        }
    )
    return env


def wake_context_json(context: dict) -> str:
    """The wake context (issue, interaction id, outcome, fresh-session flag) without the snapshot it duplicates."""
    slim = {k: v for k, v in context.items() if k not in ("connectionInstructions", "paperclipWake")}
    return json.dumps(slim, ensure_ascii=False, default=str)[:ENV_PROMPT_LIMIT]


def write_instructions_file(snapshot: dict | None) -> tuple[str, str | None]:
    """Write the snapshot into a fresh private directory; returns (file path or "", directory or None)."""
    if not snapshot or not snapshot.get("text"):
        return "", None
    directory = tempfile.mkdtemp(prefix=TEMP_PREFIX)  # mode 0700
    try:
        path = Path(directory) / "instructions.json"
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            json.dump({"text": snapshot["text"], "digest": snapshot.get("digest")}, fh, ensure_ascii=False)
    except BaseException:
        shutil.rmtree(directory, ignore_errors=True)
        raise
    return str(path), directory


def parse_session_line(line: bytes) -> str | None:
    """`{"paperclipSession": {"id": "..."}}` -> the id; anything else -> None."""
    stripped = line.strip()
    if not stripped.startswith(b"{") or SESSION_LINE_KEY.encode() not in stripped:
        return None
    try:
        data = json.loads(stripped)
    except ValueError:
        return None
    session = data.get(SESSION_LINE_KEY) if isinstance(data, dict) else None
    value = session.get("id") if isinstance(session, dict) else None
    if isinstance(value, str) and 0 < len(value) <= 300:
        return value
    return None


class LinePump(threading.Thread):
    """Copies a pipe into a bounded buffer and hands each complete line, up to `line_limit` bytes, to `on_line`
    (a longer line is dropped, not parsed). Without `on_line` it only copies."""

    def __init__(
        self, stream: Any, on_line: Callable[[bytes], None] | None = None, line_limit: int = _MAX_SESSION_LINE
    ) -> None:  # a Popen pipe, read with read1 (buffered)
        super().__init__(daemon=True)
        self.stream = stream
        self.buffer = TailBuffer()
        self.on_line = on_line
        self.line_limit = line_limit

    def run(self) -> None:
        pending = b""
        try:
            while chunk := self.stream.read1(65536):
                self.buffer.write(chunk)
                if self.on_line is None:
                    continue
                pending += chunk
                *lines, pending = pending.split(b"\n")
                for line in lines:
                    if len(line) <= self.line_limit:
                        self.on_line(line)
                if len(pending) > self.line_limit:
                    pending = b""
            if pending and self.on_line is not None and len(pending) <= self.line_limit:
                self.on_line(pending)
        except (OSError, ValueError):
            pass


class _SessionWatch:
    """Remembers the last session id the agent reported on stdout."""

    def __init__(self) -> None:
        self.session_id: str | None = None

    def __call__(self, line: bytes) -> None:
        found = parse_session_line(line)
        if found is not None:
            self.session_id = found


def wait_for_turn(
    proc: subprocess.Popen[bytes], pumps: tuple[LinePump, ...], stdin: bytes, timeout: float
) -> bool:
    """Starts the pumps, feeds stdin, waits for the process (ending its group at the timeout) and for the pumps to
    finish reading; background children that still hold the pipes open are ended with the turn. True if it timed
    out."""
    for pump in pumps:
        pump.start()
    threading.Thread(target=feed_stdin, args=(proc.stdin, stdin), daemon=True).start()
    timed_out = False
    try:
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        timed_out = True
        kill_group(proc)
        proc.wait()
    for pump in pumps:
        pump.join(_READER_GRACE_SECONDS)
    if any(pump.is_alive() for pump in pumps):
        kill_group(proc)
        for pump in pumps:
            pump.join(_READER_GRACE_SECONDS)
    return timed_out


def feed_stdin(stream: IO[bytes], data: bytes) -> None:
    try:
        stream.write(data)
    except (BrokenPipeError, OSError, ValueError):
        pass
    finally:
        with contextlib.suppress(OSError):
            stream.close()


def kill_group(proc: subprocess.Popen) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(proc.pid, signal.SIGKILL)
    with contextlib.suppress(ProcessLookupError):
        proc.kill()


class ProcessAdapter:
    def execute(self, invocation: Invocation) -> AdapterResult:
        config = invocation.config
        try:
            argv = command_of(config)
            timeout = float(config.get("timeoutSeconds") or DEFAULT_TIMEOUT_SECONDS)
        except (ProcessConfigError, TypeError, ValueError) as exc:
            return AdapterResult(ok=False, error=str(exc))
        cwd = config.get("cwd") or None
        directory = None
        proc = None
        try:
            instructions_file, directory = write_instructions_file(invocation.connection_instructions)
            env = child_environment(invocation, instructions_file)
            try:
                proc = subprocess.Popen(
                    argv,
                    cwd=cwd,
                    env=env,
                    stdin=subprocess.PIPE,
                    stdout=subprocess.PIPE,
                    stderr=subprocess.PIPE,
                    start_new_session=True,
                )
            except OSError as exc:
                return AdapterResult(ok=False, error=f"Could not start the agent process: {exc}")
            agent_turns.agent_started(proc)  # a worker's shutdown may end it (issue 31)
            sessions = _SessionWatch()
            out, err = LinePump(proc.stdout, sessions), LinePump(proc.stderr)
            timed_out = wait_for_turn(proc, (out, err), invocation.prompt.encode("utf-8"), timeout)
            code = proc.returncode
            if timed_out:
                error = f"The agent process timed out after {timeout:g} seconds and was stopped."
            elif code != 0:
                error = f"The agent process exited with code {code}."
            else:
                error = None
            return AdapterResult(
                ok=error is None,
                stdout=out.buffer.text(),
                stderr=err.buffer.text(),
                exit_code=code,
                session_id=sessions.session_id,
                error=error,
                timed_out=timed_out,
                truncated=out.buffer.truncated or err.buffer.truncated,
            )
        finally:
            if proc is not None:
                if proc.poll() is None:
                    kill_group(proc)
                    proc.wait()
                agent_turns.agent_ended(proc)
            if directory is not None:
                shutil.rmtree(directory, ignore_errors=True)
