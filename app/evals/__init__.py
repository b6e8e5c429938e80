"""Connection evaluations: natural-prompt cases run against a configured agent, scored on what was observed.

`switchboard evals run --agent <id> [--cases FILE]` runs each case as its own task, assigned to the agent and
addressed to a responsible person, through the agent's real adapter (for Claude Code, Codex or Gemini CLI, the real
CLI with its model credential). A case is scored only on what the run did and what Switchboard persisted:

- the calls observed in the agent's machine-readable output (`RunLog.summary`), our two servers only;
- the connection cards on the case's task, and the service each one asks for;
- the gateway calls the agent made (activity), and how the run ended.

Never on the model's words: a run that says it connected, but made no call, fails. Each case's task is cancelled
when the case ends, which expires any card it left, so people are not left with evaluation cards.

A cases file is JSON: `{"version": 1, "cases": [{"name", "prompt", "turns"?, "requires"?, "expect"}]}` where
`requires` is `{"ready": slug}` or `{"notReady": slug}` (a case whose precondition does not hold is skipped, saying
why) and `expect` holds any of: `calls` (runtime or gateway tool names that must be called, in this order),
`noCalls` (names that must not be), `requested` (the service every card asks for), `cards` (how many cards the task
ends with), `gatewayCalls` (connection name prefixes that must be called through the gateway), `noGateway` (no
gateway call at all). `app/evals/default_cases.json` covers discovery, request selection, no duplicate cards, a
ready service used without a card, and a denied target.
"""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from sqlalchemy import select

from app.core.errors import ServiceError
from app.extensions import db
from app.models import Agent, HeartbeatRun, Membership, ThreadInteraction
from app.models.run_logs import RunLog
from app.services.access.eligible import eligible_access
from app.services.runs.wakeups import request_wakeup
from app.services.work import create_issue, update_issue
from app.workers.run_executor import execute_next_run

DEFAULT_CASES = Path(__file__).with_name("default_cases.json")
GATEWAY = "gateway"
RUNTIME = "switchboard"


class Expectation(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    calls: list[str] = Field(default_factory=list)
    no_calls: list[str] = Field(default_factory=list, alias="noCalls")
    requested: str | None = None
    cards: int | None = Field(default=None, ge=0)
    gateway_calls: list[str] = Field(default_factory=list, alias="gatewayCalls")
    no_gateway: bool = Field(default=False, alias="noGateway")


class Requirement(BaseModel):
    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    ready: str | None = None
    not_ready: str | None = Field(default=None, alias="notReady")


class Case(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str = Field(min_length=1, max_length=200)
    prompt: str = Field(min_length=1, max_length=20000)
    turns: int = Field(default=1, ge=1, le=5)
    requires: Requirement = Field(default_factory=Requirement)
    expect: Expectation


class CaseFile(BaseModel):
    model_config = ConfigDict(extra="forbid")

    version: int = 1
    cases: list[Case] = Field(min_length=1, max_length=200)


class EvalError(ValueError):
    """The evaluation cannot start (a bad cases file, an unknown agent, no responsible person)."""


def load_cases(path: Path | None) -> list[Case]:
    source = path or DEFAULT_CASES
    try:
        data = json.loads(source.read_text(encoding="utf-8"))
    except OSError as exc:
        raise EvalError(f"Cannot read {source}: {exc.strerror}") from exc
    except ValueError as exc:
        raise EvalError(f"{source} is not JSON: {exc}") from exc
    try:
        return CaseFile.model_validate(data).cases
    except ValidationError as exc:
        problems = "; ".join(f"{'.'.join(map(str, e['loc']))}: {e['msg']}" for e in exc.errors())
        raise EvalError(f"{source} is not a valid cases file: {problems}") from exc


@dataclass
class CaseResult:
    name: str
    status: str  # passed, failed, skipped, error
    reasons: list[str] = field(default_factory=list)
    calls: list[str] = field(default_factory=list)
    gateway_calls: list[str] = field(default_factory=list)
    cards: int = 0
    requested: list[str] = field(default_factory=list)
    run_ids: list[str] = field(default_factory=list)
    issue_id: str | None = None
    seconds: float = 0.0


@dataclass
class Observed:
    """What the case's runs did, read back from the database."""

    calls: list[str]
    gateway_calls: list[str]
    run_errors: list[str]
    cards: list[ThreadInteraction]


def _is_ready(agent: Agent, responsible: uuid.UUID, slug: str) -> bool:
    return any(a.is_ready for a in eligible_access(agent.company_id, agent.id, responsible, app_slug=slug))


def _observe(issue_id: uuid.UUID, run_ids: list[uuid.UUID]) -> Observed:
    calls: list[str] = []
    gateway: list[str] = []
    errors: list[str] = []
    for run_id in run_ids:
        run = db.session.get(HeartbeatRun, run_id)
        log = db.session.get(RunLog, run_id)
        if run is not None and run.status != "succeeded":
            errors.append(run.error or f"the run ended {run.status}")
        for call in ((log.summary or {}).get("toolCalls") or []) if log is not None else []:
            if call.get("server") == RUNTIME:
                calls.append(str(call.get("tool")))
            elif call.get("server") == GATEWAY:
                calls.append(str(call.get("tool")))
                gateway.append(str(call.get("tool")))
    cards = list(
        db.session.scalars(
            select(ThreadInteraction).where(
                ThreadInteraction.issue_id == issue_id, ThreadInteraction.kind == "connection_intent"
            )
        )
    )
    return Observed(calls, gateway, errors, cards)


def _in_order(wanted: list[str], seen: list[str]) -> bool:
    position = 0
    for name in seen:
        if position < len(wanted) and name == wanted[position]:
            position += 1
    return position == len(wanted)


def score(case: Case, observed: Observed) -> list[str]:
    """Every expectation the observed runs missed, as sentences (empty: the case passed)."""
    expect = case.expect
    reasons = [f"The run did not succeed: {error}" for error in observed.run_errors]
    if expect.calls and not _in_order(expect.calls, observed.calls):
        reasons.append(f"Expected calls {expect.calls} in this order; observed {observed.calls}.")
    for name in expect.no_calls:
        if name in observed.calls:
            reasons.append(f"{name} was called; the case forbids it.")
    requested = [str((card.payload or {}).get("serviceSlug")) for card in observed.cards]
    if expect.requested is not None:
        if not requested:
            reasons.append(f"No card asks for {expect.requested}.")
        elif any(slug != expect.requested for slug in requested):
            reasons.append(f"Cards ask for {requested}; expected only {expect.requested}.")
    if expect.cards is not None and len(observed.cards) != expect.cards:
        reasons.append(f"The task has {len(observed.cards)} connection card(s); expected {expect.cards}.")
    for prefix in expect.gateway_calls:
        if not any(call.startswith(f"{prefix}__") or call == prefix for call in observed.gateway_calls):
            reasons.append(f"No gateway call of {prefix}; observed {observed.gateway_calls or 'none'}.")
    if expect.no_gateway and observed.gateway_calls:
        reasons.append(f"Gateway calls were made: {observed.gateway_calls}.")
    return reasons


def _responsible(agent: Agent, email: str | None) -> Membership:
    from app.models import User

    query = (
        select(Membership)
        .join(User, User.id == Membership.user_id)
        .where(Membership.company_id == agent.company_id, Membership.status == "active")
        .order_by(Membership.created_at)
    )
    if email:
        query = query.where(User.email == email.strip().lower())
    for membership in db.session.scalars(query):
        if membership.has_write_access and (email or membership.role in ("owner", "admin")):
            return membership
    raise EvalError(
        f"No active member {email} with write access in the agent's company."
        if email
        else "The agent's company has no active owner or admin to address the cards to (use --responsible)."
    )


def run_case(agent: Agent, responsible: Membership, case: Case) -> CaseResult:
    """Run one case on a task of its own; the task is cancelled at the end (its cards expire)."""
    started = time.monotonic()
    result = CaseResult(name=case.name, status="error")
    requirement = case.requires
    if requirement.ready and not _is_ready(agent, responsible.user_id, requirement.ready):
        return CaseResult(case.name, "skipped", [f"{requirement.ready} is not ready for {agent.name}."])
    if requirement.not_ready and _is_ready(agent, responsible.user_id, requirement.not_ready):
        return CaseResult(
            case.name, "skipped", [f"{requirement.not_ready} is already ready for {agent.name}."]
        )
    issue = create_issue(
        agent.company_id,
        title=f"Evaluation: {case.name}",
        description=case.prompt,
        status="in_progress",
        assignee_agent_id=agent.id,
        responsible_user_id=responsible.user_id,
    )
    db.session.commit()
    result.issue_id = str(issue.id)
    run_ids: list[uuid.UUID] = []
    try:
        for turn in range(case.turns):
            wake = request_wakeup(
                agent, issue=issue, source="evaluation", reason=case.name, context={"wakeReason": case.name}
            )
            db.session.commit()
            if wake.run_id is None or not execute_next_run(wake.run_id):
                result.reasons.append(
                    f"Turn {turn + 1} did not start (the agent is paused or has no adapter)."
                )
                return result
            run_ids.append(wake.run_id)
            db.session.expire_all()
        observed = _observe(issue.id, run_ids)
        result.calls, result.gateway_calls = observed.calls, observed.gateway_calls
        result.cards = len(observed.cards)
        result.requested = [str((c.payload or {}).get("serviceSlug")) for c in observed.cards]
        result.reasons = score(case, observed)
        result.status = "failed" if result.reasons else "passed"
        return result
    finally:
        result.run_ids = [str(r) for r in run_ids]
        result.seconds = round(time.monotonic() - started, 2)
        db.session.rollback()
        try:
            update_issue(responsible, db.session.get(type(issue), issue.id) or issue, status="cancelled")
            db.session.commit()
        except ServiceError:
            db.session.rollback()


def run_evaluation(
    agent_id: str, cases: list[Case], responsible_email: str | None = None
) -> list[CaseResult]:
    try:
        agent = db.session.get(Agent, uuid.UUID(str(agent_id)))
    except ValueError:
        agent = None
    if agent is None:
        raise EvalError(f"No agent {agent_id}.")
    responsible = _responsible(agent, responsible_email)
    return [run_case(agent, responsible, case) for case in cases]


def report(agent: Agent | None, results: list[CaseResult]) -> dict[str, Any]:
    counts = {
        status: sum(r.status == status for r in results)
        for status in ("passed", "failed", "skipped", "error")
    }
    return {
        "agent": {"id": str(agent.id), "name": agent.name, "adapterType": agent.adapter_type}
        if agent
        else None,
        "summary": counts,
        "cases": [asdict(r) for r in results],
    }


def table(results: list[CaseResult]) -> str:
    """A plain-text table: case, result, calls observed, cards, and why a case did not pass."""
    rows = [("case", "result", "calls", "cards", "why")]
    for r in results:
        rows.append((r.name, r.status, ", ".join(r.calls) or "-", str(r.cards), " ".join(r.reasons) or "-"))
    widths = [min(max(len(row[i]) for row in rows), 60 if i < 4 else 200) for i in range(5)]
    lines = []
    for index, row in enumerate(rows):
        lines.append("  ".join(cell.ljust(widths[i]) for i, cell in enumerate(row)).rstrip())
        if index == 0:
            lines.append("  ".join("-" * w for w in widths))
    return "\n".join(lines)
