"""Rate limits and the loop breaker for gateway `tools/call`s, counted in the database across every server process.

A connection limits the calls that reach its tools per minute and per day in four scopes: its identity (the
connection grant a call acts as, whatever agent), one agent, one run, and one tool (any agent). Write tools
(`is_write`) are counted and limited apart from read tools, with lower defaults. The loop breaker refuses the same
tool called with the same projected-argument digest more than `repeats` times within `seconds` in one run. The
connection's Permissions page sets every figure (`call_limits` on the connection; null means `DEFAULTS`; an empty
figure means "no limit" in that scope and window).

Counting (`check_call`): one `INSERT ... ON CONFLICT DO UPDATE ... RETURNING` adds the call to all its counters
(`GatewayCallCounter`, keyed by a hash of scope, subject, kind and window) and returns their counts. A window starts
at the first call it counts and lasts its length; the next call after it starts a new one. The rows stay locked (on
PostgreSQL row locks, on SQLite the database's write lock) until the request's transaction commits, which the
gateway does before the provider is called, so two server processes never both pass the last free call. A call over
any limit is refused with an isError result (`rate_limited` or `loop_detected`, with `retryAfterSeconds`: the time
until every exceeded window ends) and is taken off the counters again, so a refused call uses up no quota; the
refusal is counted per connection for its page. Nothing is kept in process memory: a re-`initialize` or another
server process sees the same counts. Only calls that go on to the provider use quota. An allowed call is counted
once its provider target is ready, just before the provider is called. An ask-first call is counted before its
approval step, so a call over a limit neither opens a card nor uses up an approval, and taken off again when it
only asked or was denied (`release_call`). Blocked tools are refused before counting.
"""

from __future__ import annotations

import functools
import hashlib
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from sqlalchemy import Integer, String, Uuid, bindparam, case, delete, select, update
from sqlalchemy.dialects.postgresql import insert as postgresql_insert
from sqlalchemy.dialects.sqlite import insert as sqlite_insert

from app.core.errors import Forbidden, ValidationFailed
from app.extensions import db
from app.models import GatewayCallCounter, Membership, ToolConnection
from app.models.base import table_of
from app.services.access.effective import CONFIGURE_FORBIDDEN, can_configure
from app.services.activity import record_activity
from app.services.gateway.limit_rules import (  # noqa: F401 (re-exported: the limits' figures and names)
    DEFAULT_LOOP,
    DEFAULTS,
    KINDS,
    LOOP_REPEATS_RANGE,
    LOOP_SECONDS_RANGE,
    MAX_LIMIT,
    REFUSALS_WINDOW,
    SCOPE_LABELS,
    SCOPES,
    WINDOWS,
    CallLimits,
    as_mapping,
    figure_of,
)
from app.services.gateway.results import PreparedCall, _refusal

if TYPE_CHECKING:
    from app.services.gateway.tools import CallTarget

RATE_LIMITED = "rate_limited"
LOOP_DETECTED = "loop_detected"

# --- counting a call -------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class _Counter:
    key: str
    seconds: int
    limit: int | None
    kind: str = ""
    scope: str = ""  # "loop" for the loop breaker
    window: str = ""


def _key(*parts: object) -> str:
    return hashlib.sha256("\n".join(str(p) for p in parts).encode()).hexdigest()


def _counters(prepared: PreparedCall, target: CallTarget, limits: CallLimits) -> list[_Counter]:
    kind = "write" if target.is_write else "read"
    connection_id = target.connection_id
    subjects: dict[str, tuple[object, ...]] = {
        "grant": (target.grant_id,),
        "agent": (connection_id, prepared.agent_id),
        "run": (connection_id, prepared.run_id),
        "tool": (connection_id, target.tool_name),
    }
    counters = [
        _Counter(
            _key(scope, *subject, kind, window),
            seconds,
            limits.limit(kind, scope, window),
            kind,
            scope,
            window,
        )
        for scope, subject in subjects.items()
        for window, seconds in WINDOWS.items()
    ]
    if limits.loop_repeats is not None:
        loop_key = _key("loop", prepared.run_id, connection_id, target.tool_name, prepared.arguments_digest)
        counters.append(_Counter(loop_key, limits.loop_seconds, limits.loop_repeats, kind, "loop"))
    return counters


def _add(connection_id: uuid.UUID, counters: list[tuple[str, int]], now: int) -> dict[str, tuple[int, int]]:
    """Add one to each counter (a new window when its last one ended) in one statement: key -> (count, end)."""
    # Sorted: two requests lock the same rows in the same order (no deadlock on PostgreSQL).
    ordered = sorted(dict(counters).items())
    parameters: dict[str, Any] = {"connection_id": connection_id, "now": now}
    for n, (key, seconds) in enumerate(ordered):
        parameters[f"key_{n}"] = key
        parameters[f"expires_at_{n}"] = now + seconds
    statement = _upsert(db.session.get_bind().dialect.name, len(ordered))
    return {key: (count, expires_at) for key, count, expires_at in db.session.execute(statement, parameters)}


@functools.cache
def _upsert(dialect: str, rows: int) -> Any:
    """The counters' upsert for `rows` counters, its values bound by name: built and compiled once per process and
    row count (built with the values inline, it was compiled again for every call)."""
    table = table_of(GatewayCallCounter)
    insert = postgresql_insert if dialect == "postgresql" else sqlite_insert
    upsert = insert(table).values(
        [
            {
                "key": bindparam(f"key_{n}", type_=String),
                "connection_id": bindparam("connection_id", type_=Uuid),
                "expires_at": bindparam(f"expires_at_{n}", type_=Integer),
                "count": 1,
            }
            for n in range(rows)
        ]
    )
    live = table.c.expires_at > bindparam("now", type_=Integer)
    return upsert.on_conflict_do_update(
        index_elements=[table.c.key],
        set_={
            "count": case((live, table.c.count + 1), else_=1),
            "expires_at": case((live, table.c.expires_at), else_=upsert.excluded.expires_at),
        },
    ).returning(table.c.key, table.c["count"], table.c.expires_at)


def check_call(prepared: PreparedCall, target: CallTarget, limits: CallLimits) -> dict | None:
    """Count the call against its connection's limits; the refusal (and the call taken off again) when over one.

    One statement for a call within its limits; a refusal adds two (taking it off, counting the refusal). The
    first call of a run on a connection also deletes the connection's expired counters.
    """
    now = int(time.time())
    counters = _counters(prepared, target, limits)
    counted = _add(target.connection_id, [(c.key, c.seconds) for c in counters], now)
    run_day = next(c for c in counters if c.scope == "run" and c.window == "day")
    if counted[run_day.key][0] == 1:
        db.session.execute(
            delete(GatewayCallCounter).where(
                GatewayCallCounter.connection_id == target.connection_id, GatewayCallCounter.expires_at <= now
            )
        )
    over = [(c, counted[c.key][1]) for c in counters if c.limit is not None and counted[c.key][0] > c.limit]
    if not over:
        return None
    db.session.execute(
        update(GatewayCallCounter)
        .where(GatewayCallCounter.key.in_([c.key for c in counters]))
        .values(count=GatewayCallCounter.count - 1)
    )
    retry_after = max(1, max(end for _c, end in over) - now)
    loop = next((c for c, _end in over if c.scope == "loop"), None)
    code = LOOP_DETECTED if loop is not None else RATE_LIMITED
    _add(target.connection_id, [(_key("refused", code, target.connection_id), REFUSALS_WINDOW)], now)
    prepared.decision = code
    if loop is not None:
        return _refusal(
            LOOP_DETECTED,
            f"{prepared.visible_name} was called with the same arguments {loop.limit} times within "
            f"{loop.seconds} seconds, so Switchboard stopped it as a likely loop. This call was not run; change "
            f"the arguments or the approach, or try again in {retry_after} seconds.",
            retryAfterSeconds=retry_after,
            limit={"scope": "loop", "calls": loop.limit, "seconds": loop.seconds},
        )
    binding = max(over, key=lambda pair: pair[1])[0]
    return _refusal(
        RATE_LIMITED,
        f"{target.connection_name} allows {binding.limit} {_calls(binding.kind, binding.limit)} per {binding.window} "
        f"{_scope_words(binding.scope, target.name)}. This call was not run; try again in {retry_after} seconds.",
        retryAfterSeconds=retry_after,
        limit={
            "scope": binding.scope,
            "window": binding.window,
            "kind": binding.kind,
            "calls": binding.limit,
        },
    )


def release_call(prepared: PreparedCall, target: CallTarget, limits: CallLimits) -> None:
    """Take a counted call off its counters again (an ask-first call that only asked, or was denied: it did not
    run, so, like a refused call, it uses no quota). One statement."""
    counters = _counters(prepared, target, limits)
    db.session.execute(
        update(GatewayCallCounter)
        .where(GatewayCallCounter.key.in_([c.key for c in counters]), GatewayCallCounter.count > 0)
        .values(count=GatewayCallCounter.count - 1)
    )


def _calls(kind: str, limit: int | None) -> str:
    noun = "write call" if kind == "write" else "call"
    return noun if limit == 1 else noun + "s"


def _scope_words(scope: str, tool_name: str) -> str:
    return {
        "grant": "through this identity",
        "agent": "from one agent",
        "run": "in one run",
        "tool": f"to {tool_name}",
    }[scope]


# --- the connection's page -------------------------------------------------------------------------------------


@dataclass
class LimitsState:
    """The Call limits section of a connection's Permissions page."""

    limits: CallLimits
    refused: dict[str, int] = field(
        default_factory=dict
    )  # reason code -> refusals in the current 24-hour window
    since: dict[str, datetime] = field(default_factory=dict)
    values: dict[str, str] | None = None  # a failed save's draft, by field name
    errors: dict[str, str] = field(default_factory=dict)
    saved: bool = False

    def value(self, name: str) -> str:
        if self.values is not None:
            return self.values.get(name, "")
        figure = _figure_of(self.limits, name)
        return "" if figure is None else str(figure)

    @property
    def refused_total(self) -> int:
        return sum(self.refused.values())

    @property
    def refused_since(self) -> datetime | None:
        """When the oldest counted refusal window began (at most 24 hours ago)."""
        return min(self.since.values()) if self.since else None


def field_name(kind: str, scope: str, window: str) -> str:
    return f"{kind}-{scope}-{window}"


def _figure_of(limits: CallLimits, name: str) -> int | None:
    if name == "loop-repeats":
        return limits.loop_repeats
    if name == "loop-seconds":
        return limits.loop_seconds
    kind, scope, window = name.split("-")
    return limits.limit(kind, scope, window)


def limits_state(connection: ToolConnection, **kwargs: Any) -> LimitsState:
    """The connection's limits and its refusals counted in the current 24-hour windows (one statement)."""
    now = int(time.time())
    keys = {_key("refused", code, connection.id): code for code in (RATE_LIMITED, LOOP_DETECTED)}
    rows = db.session.execute(
        select(GatewayCallCounter.key, GatewayCallCounter.count, GatewayCallCounter.expires_at).where(
            GatewayCallCounter.key.in_(list(keys)), GatewayCallCounter.expires_at > now
        )
    )
    refused: dict[str, int] = {}
    since: dict[str, datetime] = {}
    for key, count, expires_at in rows:
        refused[keys[key]] = count
        since[keys[key]] = datetime.fromtimestamp(expires_at - REFUSALS_WINDOW, UTC)
    return LimitsState(CallLimits.of(connection.call_limits), refused, since, **kwargs)


def field_names() -> list[str]:
    names = [field_name(k, s, w) for k in KINDS for s in SCOPES for w in WINDOWS]
    return [*names, "loop-repeats", "loop-seconds"]


def read_limits(values: dict[str, str]) -> dict:
    """The stored `call_limits` a form's figures say; ValidationFailed names each bad field. Empty: no limit."""
    details: list[dict] = []

    def number(name: str, low: int, high: int) -> int | None:
        text = (values.get(name) or "").strip()
        if not text:
            return None
        # ASCII digits only, and short: `int()` refuses other Unicode digits ("²") and very long numbers.
        if not (text.isascii() and text.isdigit() and len(text) <= 9) or not low <= int(text) <= high:
            details.append(
                {
                    "loc": [name],
                    "msg": f"Enter a whole number from {low:,} to {high:,}, or leave it empty.",
                    "type": "value_error",
                }
            )
            return None
        return int(text)

    stored: dict[str, Any] = {
        kind: {
            scope: {window: number(field_name(kind, scope, window), 1, MAX_LIMIT) for window in WINDOWS}
            for scope in SCOPES
        }
        for kind in KINDS
    }
    repeats = number("loop-repeats", *LOOP_REPEATS_RANGE)
    seconds = number("loop-seconds", *LOOP_SECONDS_RANGE)
    if repeats is not None and seconds is None and not details:
        details.append({"loc": ["loop-seconds"], "msg": "Enter the window in seconds.", "type": "missing"})
    if details:
        raise ValidationFailed(details)
    stored["loop"] = {"repeats": repeats, "seconds": seconds or DEFAULT_LOOP["seconds"]}
    return stored


def set_call_limits(membership: Membership, connection: ToolConnection, values: dict[str, str]) -> None:
    """Save the connection's call limits from the page's figures (the creator or a connection manager only)."""
    if not can_configure(membership, connection):
        raise Forbidden(CONFIGURE_FORBIDDEN)
    stored = read_limits(values)
    connection.call_limits = stored
    record_activity(
        company_id=connection.company_id,
        actor_type="user",
        actor_id=membership.user_id,
        action="tool_connection.call_limits_changed",
        entity_type="tool_connection",
        entity_id=connection.id,
        details={"connectionName": connection.name},
    )
