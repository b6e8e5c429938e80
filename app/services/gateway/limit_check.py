"""The access rule's `limit` check (`access.checks`): a call limit of the connection (`limits`) that is used up
right now for this agent, so its next call would be refused until the window ends.

The explainer answers for runs of an agent, not one run, so it reads the scopes that do not depend on the run: the
identity the agent would act as, the agent itself, and (for a named tool) the tool. The hot paths do not read
counters to list tools (a limit is refused at call time, with `retryAfterSeconds`); the explainer loads them
(`load_limits`, one statement) so that "why can't Builder use Notion right now?" names the limit and when it frees.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import select

from app.extensions import db
from app.models import GatewayCallCounter
from app.services.access.checks import CheckFailure, CheckSubject, register_check
from app.services.gateway.limit_rules import KINDS, WINDOWS, CallLimits
from app.services.gateway.limits import _calls, _key, _scope_words

EXHAUSTED = "exhausted_limits"


@dataclass(frozen=True)
class ExhaustedLimit:
    kind: str  # read or write
    scope: str  # grant, agent or tool
    window: str
    calls: int
    tool_name: str | None  # the tool scope's tool
    frees_at: int  # epoch seconds: when the window ends


def _subjects(access: Any, tool_name: str | None) -> list[tuple[str, tuple[object, ...], str | None]]:
    connection_id = access.connection.id
    subjects: list[tuple[str, tuple[object, ...], str | None]] = [
        ("agent", (connection_id, access.agent_id), None)
    ]
    if access.grant is not None:
        subjects.append(("grant", (access.grant.id,), None))
    if tool_name is not None:
        subjects.append(("tool", (connection_id, tool_name), tool_name))
    return subjects


def load_limits(accesses: Sequence[Any], tool_name: str | None) -> None:
    """Put on each access the limits used up now in its run-independent scopes (one statement for all)."""
    wanted: dict[str, tuple[Any, str, str, str, int, str | None]] = {}
    for access in accesses:
        limits = CallLimits.of(getattr(access.connection, "call_limits", None))
        access.facts[EXHAUSTED] = []
        for scope, subject, tool in _subjects(access, tool_name):
            for kind in KINDS:
                for window in WINDOWS:
                    calls = limits.limit(kind, scope, window)
                    if calls is not None:
                        key = _key(scope, *subject, kind, window)
                        wanted[key] = (access, kind, scope, window, calls, tool)
    if not wanted:
        return
    rows = db.session.execute(
        select(GatewayCallCounter.key, GatewayCallCounter.count, GatewayCallCounter.expires_at).where(
            GatewayCallCounter.key.in_(list(wanted)), GatewayCallCounter.expires_at > int(time.time())
        )
    )
    for key, count, expires_at in rows:
        access, kind, scope, window, calls, tool = wanted[key]
        if count >= calls:
            access.facts[EXHAUSTED].append(ExhaustedLimit(kind, scope, window, calls, tool, expires_at))


def _kinds_in_use(access: Any, tool_name: str | None) -> set[str]:
    tools = [t for t in access.usable_tools if tool_name is None or t.tool.name == tool_name]
    return {"write" if t.tool.is_write else "read" for t in tools}


def _check_limit(subject: CheckSubject) -> CheckFailure | None:
    access = subject.access
    exhausted: list[ExhaustedLimit] = access.facts.get(EXHAUSTED, [])
    if not exhausted:
        return None
    kinds = _kinds_in_use(access, subject.tool_name)
    if not kinds:
        return None
    # Per kind of call, the used-up limit that frees last; the connection is out only when every kind is.
    binding: dict[str, ExhaustedLimit] = {}
    for limit in exhausted:
        if limit.kind in kinds and (
            limit.kind not in binding or limit.frees_at > binding[limit.kind].frees_at
        ):
            binding[limit.kind] = limit
    if set(binding) != kinds:
        return None
    limit = max(binding.values(), key=lambda one: one.frees_at)
    frees = datetime.fromtimestamp(limit.frees_at, UTC).strftime("%Y-%m-%d %H:%M:%S UTC")
    return CheckFailure(
        "limit",
        f"{limit.kind}_{limit.scope}_{limit.window}",
        f"{access.connection.name} allows {limit.calls} {_calls(limit.kind, limit.calls)} per {limit.window} "
        f"{_scope_words(limit.scope, limit.tool_name or '')}, and they are used up: the next call is refused "
        f"until {frees}.",
    )


register_check("limit", _check_limit, label="Call limits", load=load_limits)
