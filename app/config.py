"""Settings read from the environment.

Every setting has a safe default for the embedded (SQLite) setup; secrets that are not given are generated once
into the instance folder (never committed) so restarts keep sessions and encrypted data readable.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
from collections.abc import Callable
from pathlib import Path

from cryptography.fernet import Fernet

from app.core import db_liveness
from app.services.gateway import names


def _instance_secret(instance_path: Path, name: str, make: Callable[[], str]) -> str:
    """Read a generated secret from the instance folder, creating it (mode 0600) on first use.

    Several processes may start at once on a fresh instance folder (gunicorn workers, a worker beside the server):
    the secret is written whole to a private file first and then published with a hard link, which fails if another
    process published first; the loser then reads the winner's, so all agree and none reads a half-written file."""
    path = instance_path / name
    if path.exists():
        return path.read_text().strip()
    instance_path.mkdir(parents=True, exist_ok=True)
    value = make()
    draft = instance_path / f".{name}.{os.getpid()}.{secrets.token_hex(4)}"
    fd = os.open(draft, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600)
    try:
        with os.fdopen(fd, "w") as fh:
            fh.write(value)
        os.link(draft, path)
    except FileExistsError:
        return path.read_text().strip()
    finally:
        draft.unlink(missing_ok=True)
    return value


def _bool(value: str | None, default: bool) -> bool:
    if value is None or value == "":
        return default
    return value.strip().lower() in {"1", "true", "yes", "on"}


def _json_object(name: str, value: str | None) -> dict:
    """A JSON object setting; anything else is ignored with a warning (the app still starts)."""
    try:
        parsed = json.loads(value or "{}")
    except json.JSONDecodeError:
        parsed = None
    if not isinstance(parsed, dict):
        logging.getLogger(__name__).warning("%s is not a JSON object; ignoring it", name)
        return {}
    return parsed


def _positive_int(value: str | None, default: int) -> int:
    if value is None or not value.strip():
        return default
    number = int(value)
    if number <= 0:
        raise ValueError(f"expected a positive number, got {value!r}")
    return number


DEFAULT_MAX_CONTENT_LENGTH = 1024 * 1024


def _seconds(env: os._Environ[str] | dict[str, str], name: str, default: int, least: int, most: int) -> int:
    """A lifetime in whole seconds from `name`, within [least, most], else a ValueError naming the setting (the app
    does not start with a lifetime it would silently misread)."""
    value = env.get(name)
    if value is None or not value.strip():
        return default
    try:
        number = int(value.strip())
    except ValueError:
        number = None
    if number is None or not least <= number <= most:
        raise ValueError(f"{name}: expected a whole number of seconds from {least} to {most}, got {value!r}")
    return number


def _assistant_lifetimes(env: os._Environ[str] | dict[str, str]) -> dict[str, int]:
    """The lifetimes of what the assistants' authorization server issues: access tokens are short (15 minutes by
    default, at most a day), refresh tokens outlive them (30 days by default), device codes wait 10 minutes."""
    access = _seconds(env, "SWITCHBOARD_ASSISTANT_ACCESS_TOKEN_SECONDS", 900, 60, 86400)
    refresh = _seconds(env, "SWITCHBOARD_ASSISTANT_REFRESH_TOKEN_SECONDS", 30 * 86400, 3600, 365 * 86400)
    if refresh <= access:
        raise ValueError(
            "SWITCHBOARD_ASSISTANT_REFRESH_TOKEN_SECONDS: must be longer than "
            f"SWITCHBOARD_ASSISTANT_ACCESS_TOKEN_SECONDS ({access}), got {refresh}"
        )
    device = _seconds(env, "SWITCHBOARD_ASSISTANT_DEVICE_CODE_SECONDS", 600, 60, 3600)
    return {
        "ASSISTANT_ACCESS_TOKEN_SECONDS": access,
        "ASSISTANT_REFRESH_TOKEN_SECONDS": refresh,
        "ASSISTANT_DEVICE_CODE_SECONDS": device,
    }


def _tool_name_budget(value: str | None) -> int:
    if value is None or not value.strip():
        return names.DEFAULT_BUDGET
    try:
        return names.checked_budget(value)
    except ValueError as err:
        raise ValueError(f"SWITCHBOARD_GATEWAY_TOOL_NAME_BUDGET: {err}") from None


DEFAULT_THREADS = 8  # gunicorn.conf.py's threads per process (SWITCHBOARD_THREADS)


def _pool_options(env: os._Environ[str] | dict[str, str]) -> dict:
    """The database pool of one process, sized from its request threads (issue 31 item 9).

    A request thread holds its session's connection for the request and can take one more, briefly, on its own
    (the throttle store, the shared breaker, a cancellation watcher, activity writes): `pool_size` keeps one connection
    per thread open (no connect/close churn under load) and `max_overflow` allows the second. Their sum is the most
    this process ever opens; below twice the threads, a thread can wait for a connection (up to `pool_timeout`).
    """
    threads = _positive_int(env.get("SWITCHBOARD_THREADS"), DEFAULT_THREADS)
    pool_size = _positive_int(env.get("SWITCHBOARD_DB_POOL_SIZE"), threads)
    overflow = env.get("SWITCHBOARD_DB_MAX_OVERFLOW")
    max_overflow = threads if overflow is None or not overflow.strip() else int(overflow)
    if max_overflow < 0:
        raise ValueError(f"SWITCHBOARD_DB_MAX_OVERFLOW: expected 0 or more, got {overflow!r}")
    return {"pool_size": pool_size, "max_overflow": max_overflow}


def load_config(instance_path: str) -> dict:
    """Build the Flask config mapping from the process environment."""
    inst = Path(instance_path)
    env = os.environ
    database_url = env.get("DATABASE_URL") or f"sqlite:///{inst / 'switchboard.db'}"
    if database_url.startswith("postgres://"):
        database_url = "postgresql+psycopg://" + database_url[len("postgres://") :]
    elif database_url.startswith("postgresql://"):
        database_url = "postgresql+psycopg://" + database_url[len("postgresql://") :]
    public_base_url = (env.get("PUBLIC_BASE_URL") or "http://127.0.0.1:5000").rstrip("/")
    generated: dict[str, str] = {}
    secret_key = env.get("SECRET_KEY") or ""
    if not secret_key:
        secret_key = generated["SECRET_KEY"] = _instance_secret(
            inst, "secret_key", lambda: secrets.token_hex(32)
        )
    encryption_key = env.get("SWITCHBOARD_ENCRYPTION_KEY") or ""
    if not encryption_key:
        encryption_key = generated["ENCRYPTION_KEY"] = _instance_secret(
            inst, "encryption_key", lambda: Fernet.generate_key().decode()
        )
    return {
        "SQLALCHEMY_DATABASE_URI": database_url,
        # No `pool_pre_ping` (a round trip per checkout): `app.core.db_liveness` checks the socket instead.
        # SQLite (the embedded setup) replaces these in create_app: it has no server connections to budget.
        "SQLALCHEMY_ENGINE_OPTIONS": {"pool_recycle": db_liveness.RECYCLE_SECONDS, **_pool_options(env)},
        "SECRET_KEY": secret_key,
        "ENCRYPTION_KEY": encryption_key,
        # Keys generated into the instance folder (not given): only the embedded SQLite setup may use them, since
        # no other instance shares that folder (`app/services/installation.py` refuses them on a server database).
        "GENERATED_KEYS": generated,
        # Compare this process's keys with the installation's (fingerprints in the database) before serving, and record
        # them on an empty installation. The `switchboard` CLI checks in the commands that use the database instead.
        "INSTALLATION_CHECK": True,
        "INSTALLATION_CHECK_AT_START": True,
        "PUBLIC_BASE_URL": public_base_url,
        "SESSION_COOKIE_SECURE": _bool(
            env.get("SESSION_COOKIE_SECURE"), public_base_url.startswith("https://")
        ),
        "SESSION_COOKIE_HTTPONLY": True,
        "SESSION_COOKIE_SAMESITE": "Lax",
        "REMEMBER_COOKIE_SECURE": _bool(
            env.get("SESSION_COOKIE_SECURE"), public_base_url.startswith("https://")
        ),
        "REMEMBER_COOKIE_HTTPONLY": True,
        "WTF_CSRF_TIME_LIMIT": None,
        # CSRF is enforced by our own before_request hook so bearer-authenticated API calls can skip it.
        "WTF_CSRF_CHECK_DEFAULT": False,
        "LOGIN_MAX_FAILURES": int(env.get("LOGIN_MAX_FAILURES", "5")),
        "LOGIN_FAILURE_WINDOW_SECONDS": int(env.get("LOGIN_FAILURE_WINDOW_SECONDS", "900")),
        # Failed authentications of any kind (passwords for any email, API keys, run tokens) per client address.
        "AUTH_ADDRESS_MAX_FAILURES": int(env.get("SWITCHBOARD_AUTH_ADDRESS_MAX_FAILURES", "30")),
        "AUTH_ADDRESS_WINDOW_SECONDS": int(env.get("SWITCHBOARD_AUTH_ADDRESS_WINDOW_SECONDS", "900")),
        # Open dynamic client registration (`/register`, issue 29) per client address: it writes a row per call.
        "OAUTH_REGISTRATIONS_PER_ADDRESS": int(env.get("SWITCHBOARD_OAUTH_REGISTRATIONS_PER_ADDRESS", "20")),
        "OAUTH_REGISTRATION_WINDOW_SECONDS": int(
            env.get("SWITCHBOARD_OAUTH_REGISTRATION_WINDOW_SECONDS", "3600")
        ),
        "PASSWORD_HASH_METHOD": env.get("PASSWORD_HASH_METHOD", "scrypt"),
        # Larger request bodies are answered 413 from their Content-Length (streamed ones once they pass it).
        "MAX_CONTENT_LENGTH": _positive_int(
            env.get("SWITCHBOARD_MAX_CONTENT_LENGTH"), DEFAULT_MAX_CONTENT_LENGTH
        ),
        # Sign-in throttling: where the counters live. `database` (the default): the app's database, one count for
        # every process and instance; or a `limits` storage URI (`redis://host:6379/0`; `memory://` is per process).
        "LOGIN_THROTTLE_STORAGE_URI": env.get("SWITCHBOARD_LOGIN_THROTTLE_STORAGE_URI") or "database",
        # Reverse proxies in front of the app whose X-Forwarded-For is trusted for the client address (0: none).
        "TRUSTED_PROXY_COUNT": int(env.get("SWITCHBOARD_TRUSTED_PROXIES", "0")),
        # Setup-time exchanges with providers (verifying a key, indexing tools) and OAuth HTTP calls.
        "OUTBOUND_TIMEOUT_SECONDS": float(env.get("OUTBOUND_TIMEOUT_SECONDS", "10")),
        # Gateway tool calls: how long to wait for a provider (an app definition's callTimeoutSeconds wins), how
        # many calls one provider may have in flight per server process, and the circuit breaker (open after this
        # many consecutive timeouts, for this many seconds).
        # Issue 33: what one provider may put in the index (more tools are not indexed; longer descriptions are cut;
        # a tool whose schema and listing fields are larger is left out) and in one answer to an agent (characters of
        # text a call result keeps, about 25k tokens; the rest is cut with a note) and in one HTTP answer (bytes).
        "PROVIDER_MAX_TOOLS": int(env.get("SWITCHBOARD_PROVIDER_MAX_TOOLS", "500")),
        "TOOL_DESCRIPTION_MAX_CHARS": int(env.get("SWITCHBOARD_TOOL_DESCRIPTION_MAX_CHARS", "4000")),
        "TOOL_SCHEMA_MAX_BYTES": int(env.get("SWITCHBOARD_TOOL_SCHEMA_MAX_BYTES", "65536")),
        # How long an approval card waits for an answer, and an approved call for its retry (issue 28).
        "TOOL_APPROVAL_TTL_SECONDS": int(env.get("SWITCHBOARD_TOOL_APPROVAL_TTL_SECONDS", "86400")),
        **_assistant_lifetimes(env),
        "GATEWAY_RESULT_MAX_CHARS": int(env.get("SWITCHBOARD_GATEWAY_RESULT_MAX_CHARS", "100000")),
        "PROVIDER_MAX_RESPONSE_BYTES": int(
            env.get("SWITCHBOARD_PROVIDER_MAX_RESPONSE_BYTES", str(8 * 1024 * 1024))
        ),
        "PROVIDER_CALL_TIMEOUT_SECONDS": float(env.get("SWITCHBOARD_PROVIDER_CALL_TIMEOUT_SECONDS", "30")),
        "PROVIDER_MAX_CONCURRENT_CALLS": int(env.get("SWITCHBOARD_PROVIDER_MAX_CONCURRENT_CALLS", "4")),
        "PROVIDER_BREAKER_TIMEOUTS": int(env.get("SWITCHBOARD_PROVIDER_BREAKER_TIMEOUTS", "3")),
        "PROVIDER_BREAKER_SECONDS": float(env.get("SWITCHBOARD_PROVIDER_BREAKER_SECONDS", "30")),
        # The longest gateway tool name shown to agents whose adapter type has no budget of its own (process, http,
        # manual, external clients): see `app.services.gateway.names`. The client's prefix must fit beside it in 64.
        "GATEWAY_TOOL_NAME_BUDGET": _tool_name_budget(env.get("SWITCHBOARD_GATEWAY_TOOL_NAME_BUDGET")),
        # Issue 32: above this many estimated tokens (characters / 4) or tools (0: not by this), an agent's
        # `tools/list` is three meta tools that search, describe and call its tools (`services/gateway/meta_tools`).
        "GATEWAY_META_TOOLS_ABOVE_TOKENS": int(
            env.get("SWITCHBOARD_GATEWAY_META_TOOLS_ABOVE_TOKENS", "40000")
        ),
        "GATEWAY_META_TOOLS_ABOVE_TOOLS": int(env.get("SWITCHBOARD_GATEWAY_META_TOOLS_ABOVE_TOOLS", "0")),
        # How often a gateway call in flight looks for an agent's cancellation that landed in another server process.
        "GATEWAY_CANCEL_POLL_SECONDS": float(env.get("SWITCHBOARD_GATEWAY_CANCEL_POLL_SECONDS", "0.5")),
        # 2026-07-28 `subscriptions/listen` streams (`app.web.agents.listen`): how often one looks for an access change
        # (one statement; also its keep-alive cadence), and how many one server process keeps open (each holds a
        # server thread: keep it well below SWITCHBOARD_THREADS).
        "GATEWAY_LISTEN_POLL_SECONDS": float(env.get("SWITCHBOARD_GATEWAY_LISTEN_POLL_SECONDS", "1.0")),
        "GATEWAY_LISTEN_MAX_STREAMS": int(env.get("SWITCHBOARD_GATEWAY_LISTEN_MAX_STREAMS", "4")),
        # OAuth clients an operator registered with providers that have no dynamic registration:
        # {"<slug>": {"client_id", "client_secret", "issuer"?, "authorization_endpoint"?, "token_endpoint"?, "scopes"?}}.
        "OAUTH_CLIENTS": _json_object("SWITCHBOARD_OAUTH_CLIENTS", env.get("SWITCHBOARD_OAUTH_CLIENTS")),
        # Operator overrides of provider MCP server URLs, e.g. {"honcho": "https://honcho.internal/mcp"}.
        "PROVIDER_SERVER_URLS": json.loads(env.get("SWITCHBOARD_PROVIDER_SERVER_URLS") or "{}"),
        # Hosts that user- or agent-supplied URLs may reach even when they resolve to private addresses.
        "OUTBOUND_ALLOWED_HOSTS": [
            h for h in (env.get("SWITCHBOARD_OUTBOUND_ALLOWED_HOSTS") or "").split(",") if h.strip()
        ],
        # A CA bundle (PEM file) trusted instead of the public roots when fetching assistants' client ID metadata
        # documents, for a private PKI; unset: the public roots.
        "OUTBOUND_CA_BUNDLE": env.get("SWITCHBOARD_OUTBOUND_CA_BUNDLE") or None,
        # Browser origins besides PUBLIC_BASE_URL's that may call the agent doors (comma-separated, e.g.
        # "http://localhost:5000"); a request from any other Origin gets 403 (MCP transport security).
        "AGENT_ALLOWED_ORIGINS": [
            o.strip().rstrip("/")
            for o in (env.get("SWITCHBOARD_AGENT_ALLOWED_ORIGINS") or "").split(",")
            if o.strip()
        ],
        # Names this installation inside run tokens; derived from SECRET_KEY when unset.
        "SWITCHBOARD_INSTANCE_ID": env.get("SWITCHBOARD_INSTANCE_ID") or None,
        "RUN_WORKER_IN_PROCESS": _bool(env.get("RUN_WORKER_IN_PROCESS"), False),
        # The development server's per-request log lines (`switchboard run`): off, so a newcomer's terminal shows what
        # matters; production servers (gunicorn) keep their own access log.
        "REQUEST_LOG": _bool(env.get("SWITCHBOARD_REQUEST_LOG"), False),
        # `switchboard worker` on SIGTERM: how long the agent turn in progress may go on before its process group is
        # ended and its run handed back to the queue (app/workers/shutdown.py).
        "WORKER_SHUTDOWN_GRACE_SECONDS": float(env.get("SWITCHBOARD_WORKER_SHUTDOWN_GRACE_SECONDS", "30")),
        # A run still `running` this long after its agent's turn timeout lost its worker (killed, or its machine
        # died): another worker hands it back to the queue with its wake (app/services/runs/lifecycle.py).
        "RUN_ABANDONED_GRACE_SECONDS": float(env.get("SWITCHBOARD_RUN_ABANDONED_GRACE_SECONDS", "300")),
        # Agent CLIs (Claude Code, Codex, Gemini CLI): each agent's private config home, where the CLI keeps its
        # sessions between turns (`<root>/<agent id>/`). Workers on several machines resume sessions only when this
        # is shared storage.
        "AGENT_HOME_ROOT": env.get("SWITCHBOARD_AGENT_HOME") or str(inst / "agent-homes"),
        # The app catalog: an operator's own definitions folder (read with app/catalog/definitions/), and whether
        # app start ingests the definitions when they changed (the `switchboard` CLI never does; `db upgrade` does).
        "CATALOG_EXTRA_DIR": env.get("SWITCHBOARD_CATALOG_EXTRA_DIR") or None,
        "CATALOG_INGEST_ON_START": _bool(env.get("SWITCHBOARD_CATALOG_INGEST_ON_START"), True),
        # Notifications (issue 15): outgoing mail (smtp://, smtp+starttls:// or smtps://, user:password@ allowed;
        # unset: no mail is queued), the From address, and the timeouts of mail and webhook deliveries.
        "SMTP_URL": env.get("SWITCHBOARD_SMTP_URL") or None,
        "MAIL_FROM": env.get("SWITCHBOARD_MAIL_FROM") or "Switchboard <switchboard@localhost>",
        "SMTP_TIMEOUT_SECONDS": float(env.get("SWITCHBOARD_SMTP_TIMEOUT_SECONDS", "10")),
        "WEBHOOK_TIMEOUT_SECONDS": float(env.get("SWITCHBOARD_WEBHOOK_TIMEOUT_SECONDS", "10")),
        # Issue 33: one webhook attempt ends within this many seconds however slowly the receiver answers; endpoints
        # one company may have; delivery lanes (threads) and how many of them one company may use at once.
        "WEBHOOK_DEADLINE_SECONDS": float(env.get("SWITCHBOARD_WEBHOOK_DEADLINE_SECONDS", "15")),
        "WEBHOOK_ENDPOINTS_PER_COMPANY": int(env.get("SWITCHBOARD_WEBHOOK_ENDPOINTS_PER_COMPANY", "10")),
        "NOTIFICATION_LANES": int(env.get("SWITCHBOARD_NOTIFICATION_LANES", "8")),
        "NOTIFICATION_LANES_PER_COMPANY": int(env.get("SWITCHBOARD_NOTIFICATION_LANES_PER_COMPANY", "2")),
        # Observability (issue 31 item 10): `/metrics` is served only to a scraper presenting this bearer token
        # (unset: 404); tracing is off, `otlp` (the OTEL_EXPORTER_OTLP_* variables) or `console`; logs are `text`
        # or `json` (one object a line with the request id).
        "METRICS_TOKEN": env.get("SWITCHBOARD_METRICS_TOKEN") or None,
        "TRACING": (env.get("SWITCHBOARD_TRACING") or "off").strip().lower(),
        "LOG_FORMAT": (env.get("SWITCHBOARD_LOG_FORMAT") or "text").strip().lower(),
    }
