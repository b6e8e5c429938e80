"""The agent runtime tools `connections_search` and `connection_request`, shared by the MCP and REST doors.

Every token use re-validates the run (`load_run_context`, in the order of the reference), so company, agent, task
and responsible person always come from the signed token plus the stored run, never from the agent's arguments.
Search reads only the stored catalog and tool index (it never contacts providers), and reads a connection's indexed
tool text only after the connection's identity audience check. Readiness comes from `effective_access`.
"""

from __future__ import annotations

import heapq
import itertools
import re
import threading
import uuid
from collections import OrderedDict, defaultdict
from dataclasses import dataclass

from flask import current_app
from sqlalchemy import Row, case, false, or_, select

from app.catalog.loader import get_app, get_app_versions
from app.core.errors import Conflict, Forbidden, NotFound, Unprocessable
from app.extensions import db
from app.models import (
    AccessRevision,
    Agent,
    CatalogApp,
    HeartbeatRun,
    Issue,
    Membership,
    ThreadInteraction,
    ToolConnection,
)
from app.models.connections import ATTENTION_HEALTH, CUSTOM_APP_SLUG
from app.services.access.effective import ConnectionAccess, effective_access
from app.services.access.revision import RevisionCache, revision_column
from app.services.intents import card as intents_card
from app.services.intents import creation
from app.services.intents import service as intents_service
from app.services.run_tokens import MintedToken

SERVER_NAME = "paperclip-runtime-tools"
PROTOCOL_VERSION = "2025-03-26"
TOOL_NAMES = ("connections_search", "connection_request")
SEARCH_LIMIT = 20
QUERY_MAX_LENGTH = 200
SERVICE_MAX_LENGTH = 120

DECLINED_IN_CONTINUATION = (
    "The user declined this connection. Pursue alternatives; do not request it again in this continuation."
)
# The instruction of a request that sent a card, as the contract (connection-intents-api.md) words it.
CARD_SENT = "A connection card was sent to the responsible user. End this run and wait for continuation."
ADMIN_DENIAL = (
    "This agent has no permitted actions for this service. Ask an administrator to review tool permissions; "
    "reconnecting will not remove a denial."
)

GUIDANCE = (
    "Connection runtime tools: when the task needs a known external service (named by the user or implied by the "
    "work) and you are not sure you can reach it, call connections_search first. If a result is ready, use its "
    "installed tools. If it is available or needs_user_action, call connection_request with the returned service "
    "identifier and follow the returned instruction. If it is unavailable, explain that and do not request it. "
    "After a request answers needs_user_action, finish independent work, then end the run and wait for the "
    "continuation: do not retry or poll, do not ask for credentials in comments, and never claim access you do "
    "not have. A pending connection card stays open across messages; do not request it again. If the user "
    "declined a connection, pursue alternatives and do not request it again unless the user explicitly asks. "
    "Never connect arbitrary MCP server URLs. When a continuation says a connection is connected, use it."
)

TOOL_DEFINITIONS = [
    {
        "name": "connections_search",
        "description": (
            "Search the known connectable services and report this run's agent-relative access state for each "
            "(ready, needs_user_action, available, unavailable). Call it before connection_request when a task "
            "needs an external service and access is uncertain. An empty query lists everything."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "query": {
                    "type": "string",
                    "maxLength": QUERY_MAX_LENGTH,
                    "description": "Service name or what you need to do, e.g. 'github issues'.",
                }
            },
            "additionalProperties": False,
        },
    },
    {
        "name": "connection_request",
        "description": (
            "Request access to a known connectable service for this run's agent from the task's responsible "
            "user. Returns ready when the service is already usable; otherwise sends one connection card to the "
            "responsible user and tells you to finish independent work, then end the run and wait."
        ),
        "inputSchema": {
            "type": "object",
            "properties": {
                "service": {
                    "type": "string",
                    "minLength": 1,
                    "maxLength": SERVICE_MAX_LENGTH,
                    "description": "The service identifier returned by connections_search.",
                }
            },
            "required": ["service"],
            "additionalProperties": False,
        },
    },
]


class RunRejected(Forbidden):
    """The token does not match a live run: clients must stop (kept as HTTP 403 even inside MCP tool calls)."""


@dataclass
class RunContext:
    run: HeartbeatRun
    agent: Agent
    issue: Issue
    responsible_user_id: uuid.UUID
    membership: Membership
    access_revision: int = 0  # the company's, read with the run (see `app.services.access_revision`)


def _uuid(value) -> uuid.UUID | None:
    try:
        return uuid.UUID(str(value))
    except (TypeError, ValueError):
        return None


def _check_live_run(run: HeartbeatRun | None, claims: dict) -> HeartbeatRun:
    """Steps 1-2 of run validation: the token's run exists, matches its claims and is still running."""
    if (
        run is None
        or str(run.company_id) != claims.get("company_id")
        or str(run.agent_id) != claims.get("sub")
        or claims.get("responsible_user_id")
        not in {
            str(person) if person else ""
            for person in (run.responsible_user_id, run.handed_over_from_user_id)
        }
    ):
        raise RunRejected("Runtime tool token does not match its heartbeat run")
    if run.status != "running":
        raise RunRejected("Runtime tool token is no longer active")
    return run


def load_live_run(claims: dict) -> HeartbeatRun:
    """The live run of a token (steps 1-2), for calls that need no task context."""
    run_id = _uuid(claims.get("run_id"))
    return _check_live_run(db.session.get(HeartbeatRun, run_id) if run_id else None, claims)


def load_live_run_and_revision(claims: dict) -> tuple[HeartbeatRun, int]:
    """The live run of a token (steps 1-2) and its company's access revision, in one statement."""
    run_id = _uuid(claims.get("run_id"))
    row = None
    if run_id is not None:
        row = db.session.execute(
            select(HeartbeatRun, revision_column())
            .outerjoin(AccessRevision, AccessRevision.company_id == HeartbeatRun.company_id)
            .where(HeartbeatRun.id == run_id)
        ).first()
    run, revision = row if row is not None else (None, 0)
    return _check_live_run(run, claims), revision


def load_run_context(claims: dict) -> RunContext:
    """Full validation for a tool use, in the reference order (each step with its own status and message).

    Every runtime call pays this, so the run, its task, its agent and the responsible person's membership come
    back in one statement; the checks below still run in the reference order on what it returned.
    """
    run_id = _uuid(claims.get("run_id"))
    row = None
    if run_id is not None:
        row = db.session.execute(
            select(HeartbeatRun, Issue, Agent, Membership, revision_column())
            .outerjoin(Issue, Issue.id == HeartbeatRun.issue_id)
            .outerjoin(Agent, Agent.id == HeartbeatRun.agent_id)
            .outerjoin(
                Membership,
                (Membership.company_id == HeartbeatRun.company_id)
                & (Membership.user_id == HeartbeatRun.responsible_user_id),
            )
            .outerjoin(AccessRevision, AccessRevision.company_id == HeartbeatRun.company_id)
            .where(HeartbeatRun.id == run_id)
        ).first()
    run, issue, agent, membership, revision = row if row is not None else (None, None, None, None, 0)
    _check_live_run(run, claims)
    if run.responsible_user_id is None:
        raise Forbidden("This task needs a responsible user to connect a service")
    if issue is None:
        # Runs opened before runs carried their task keep it in the context snapshot.
        snapshot = run.context_snapshot or {}
        issue_id = _uuid(snapshot.get("issueId")) or _uuid(snapshot.get("taskId"))
        if issue_id is None:
            raise Unprocessable("Connection requests require a task-bound heartbeat run")
        issue = db.session.get(Issue, issue_id)
    if (
        issue is None
        or agent is None
        or issue.company_id != run.company_id
        or agent.company_id != run.company_id
    ):
        raise NotFound("Runtime task or agent was not found")
    if membership is None or not membership.has_write_access:
        raise Forbidden("Responsible user is no longer authorized for company write access")
    if issue.assignee_agent_id != agent.id:
        raise Conflict("The requesting agent no longer owns this task")
    if issue.is_closed:
        raise Conflict("Connection requests cannot be created on a closed task")
    return RunContext(
        run=run,
        agent=agent,
        issue=issue,
        responsible_user_id=run.responsible_user_id,
        membership=membership,
        access_revision=revision,
    )


# --- readiness -----------------------------------------------------------------------------------------------


@dataclass
class Readiness:
    state: str
    reason: str
    connection_id: uuid.UUID | None = None
    admin_denied: bool = False


def readiness(
    service: intents_service.ServiceIdentity, accesses: list[ConnectionAccess], matching: list
) -> Readiness:
    """The agent-relative state of one service (reference 5.4 table, checked in order).

    `matching` holds the service's live connections (anything with a `health_status`: rows or models).
    """
    ready = next((a for a in accesses if a.is_ready), None)
    if ready is not None:
        return Readiness("ready", "Connection is installed and usable by this agent", ready.connection.id)
    if accesses and not any(a.has_usable_tools for a in accesses) and any(a.has_tools for a in accesses):
        return Readiness(
            "unavailable",
            "An administrator has not permitted executable tools for this agent; reconnecting cannot grant "
            "that permission",
            admin_denied=True,
        )
    if not service.available or not service.methods:
        return Readiness("unavailable", "Connection is disabled or unavailable")
    if matching:
        attention = any(c.health_status in ATTENTION_HEALTH for c in matching)
        return Readiness(
            "needs_user_action",
            "Connection needs attention" if attention else "Review identity and access for this agent",
        )
    return Readiness("available", "Connect this service to continue")


def _accesses_by_service(
    ctx: RunContext, connection_ids: list[uuid.UUID]
) -> dict[str, list[ConnectionAccess]]:
    """Effective access for just the given connections (those of the services being answered), by service."""
    grouped: dict[str, list[ConnectionAccess]] = defaultdict(list)
    if not connection_ids:
        return grouped
    for access in effective_access(
        ctx.run.company_id,
        ctx.agent.id,
        ctx.responsible_user_id,
        connection_ids=connection_ids,
        with_tools=False,
        responsible_membership=ctx.membership,
    ):
        grouped[intents_service.service_slug_of(access.connection)].append(access)
    return grouped


# --- search --------------------------------------------------------------------------------------------------

# Query tokens matched against indexed tools (a 200-character query has few words; the rest rank by name).
MAX_SEARCH_TOKENS = 16
# Audiences (company, agent, responsible person) whose search index a process keeps.
SEARCH_INDEX_CACHE_SIZE = 256


def _tokens(query: str) -> list[str]:
    return re.findall(r"[^\W_]+", query.lower())


@dataclass(frozen=True)
class _IndexedService:
    slug: str
    name_key: str  # casefolded name: the order among equal scores
    words: str  # the service's own lowercase words (slug, name, description, method guidance)
    catalog_version: tuple[str, str] | None = None  # (slug, content_hash) of a catalog app
    identity: intents_service.ServiceIdentity | None = (
        None  # a configured custom connection's, built with the index
    )

    def score(self, needle: str, tokens: list[str], tool_words: str) -> int:
        """Exact slug or name: 1000; else the query tokens found in its words or (the first few) its tools'."""
        if not needle:
            return 1
        if needle == self.slug or needle.casefold() == self.name_key:
            return 1000
        return sum(
            1
            for i, token in enumerate(tokens)
            if token in self.words or (i < MAX_SEARCH_TOKENS and token in tool_words)
        )


@dataclass(frozen=True)
class _SearchIndex:
    """What one audience can find, and the state of every service that has connections; query-independent."""

    catalog: tuple[_IndexedService, ...]  # shared by every audience while the catalog is the same
    configured: tuple[_IndexedService, ...]  # custom connections in this audience
    tool_words: dict[str, str]  # by service: words of the indexed tools of its connections in this audience
    states: dict[str, Readiness]  # services without a connection are simply "available"

    def ranked(self, needle: str, tokens: list[str]) -> list[_IndexedService]:
        scored = (
            (entry.score(needle, tokens, self.tool_words.get(entry.slug, "")), entry)
            for entry in itertools.chain(self.catalog, self.configured)
        )
        top = heapq.nsmallest(
            SEARCH_LIMIT,
            ((score, entry) for score, entry in scored if score > 0),
            key=lambda item: (-item[0], item[1].name_key, item[1].slug),
        )
        return [entry for _score, entry in top]


_search_indexes: RevisionCache[_SearchIndex] = RevisionCache(SEARCH_INDEX_CACHE_SIZE)
# Catalog entries by catalog content ((slug, content_hash) of every searchable app): the current and the last.
_catalog_entries: OrderedDict[frozenset, tuple[_IndexedService, ...]] = OrderedDict()
_catalog_entries_lock = threading.Lock()


def clear_search_indexes() -> None:
    _search_indexes.clear()
    with _catalog_entries_lock:
        _catalog_entries.clear()


def _search_index(ctx: RunContext) -> _SearchIndex:
    """The audience's index from this process's cache while the company's access revision is unchanged.

    The revision comes with the run context (no extra statement) and rises in the same transaction as any change
    that could alter an answer (`app.services.access_revision`), so a cached index is never older than the
    revision it is filed under. Building one costs a few statements whatever the catalog or company size.
    """
    return _search_indexes.get_or_build(
        (ctx.run.company_id, ctx.agent.id, ctx.responsible_user_id),
        ctx.access_revision,
        lambda: _build_search_index(ctx),
    )


def _catalog_services() -> tuple[_IndexedService, ...]:
    """The searchable catalog as index entries, one copy per catalog content whatever the number of audiences."""
    rows = db.session.execute(
        select(CatalogApp.slug, CatalogApp.content_hash, CatalogApp.name_key, CatalogApp.search_text).where(
            CatalogApp.searchable.is_(True)
        )
    ).all()
    content = frozenset((row.slug, row.content_hash) for row in rows)
    with _catalog_entries_lock:
        cached = _catalog_entries.get(content)
        if cached is not None:
            _catalog_entries.move_to_end(content)
            return cached
    entries = tuple(
        _IndexedService(
            slug=row.slug,
            name_key=row.name_key,
            words=row.search_text,
            catalog_version=(row.slug, row.content_hash),
        )
        for row in rows
    )
    with _catalog_entries_lock:
        _catalog_entries[content] = entries
        while len(_catalog_entries) > 2:
            _catalog_entries.popitem(last=False)
    return entries


def _build_search_index(ctx: RunContext) -> _SearchIndex:
    catalog = _catalog_services()
    # Privacy gate: a connection's indexed tool words leave the database only inside its identity audience.
    in_audience = intents_service.grant_in_audience_clause(ctx.responsible_user_id, ctx.agent.id)
    connections = db.session.execute(
        select(
            ToolConnection.id,
            ToolConnection.app_slug,
            ToolConnection.name,
            ToolConnection.enabled,
            ToolConnection.auth_kind,
            ToolConnection.health_status,
            in_audience.label("in_audience"),
            case((in_audience, ToolConnection.tool_search_text), else_="").label("tool_search_text"),
        ).where(ToolConnection.company_id == ctx.run.company_id, ToolConnection.status != "archived")
    ).all()

    matching: dict[str, list[Row]] = defaultdict(list)
    tool_words: dict[str, list[str]] = defaultdict(list)
    configured = []
    custom_app = get_app(CUSTOM_APP_SLUG) if any(c.app_slug == CUSTOM_APP_SLUG for c in connections) else None
    for connection in connections:
        slug = intents_service.service_slug_of(connection)
        if connection.app_slug == CUSTOM_APP_SLUG:
            if not connection.in_audience:
                continue  # someone else's custom server is not a service this run can see
            configured.append(
                _IndexedService(
                    slug=slug,
                    name_key=connection.name.casefold(),
                    words=f"{slug} {connection.name}".lower(),
                    identity=intents_service.configured_service(connection, custom_app),
                )
            )
        matching[slug].append(connection)
        if connection.tool_search_text:
            tool_words[slug].append(connection.tool_search_text)

    accesses: dict[str, list[ConnectionAccess]] = defaultdict(list)
    for access in effective_access(
        ctx.run.company_id,
        ctx.agent.id,
        ctx.responsible_user_id,
        with_tools=False,
        responsible_membership=ctx.membership,
    ):
        accesses[intents_service.service_slug_of(access.connection)].append(access)
    connected = [entry for entry in itertools.chain(catalog, configured) if entry.slug in matching]
    states = {
        slug: readiness(service, accesses.get(slug, []), matching[slug])
        for slug, service in _identities(connected).items()
    }
    return _SearchIndex(
        catalog=catalog,
        configured=tuple(configured),
        tool_words={slug: " ".join(words) for slug, words in tool_words.items()},
        states=states,
    )


def _identities(entries: list[_IndexedService]) -> dict[str, intents_service.ServiceIdentity]:
    """Service identities for index entries: catalog definitions (parsed once per process, so no query once
    warm) or the identity a configured connection's entry carries."""
    definitions = get_app_versions([e.catalog_version for e in entries if e.catalog_version])
    found = {}
    for entry in entries:
        if entry.identity is not None:
            found[entry.slug] = entry.identity
        elif entry.slug in definitions:  # else the row changed since it was indexed and no longer validates
            found[entry.slug] = intents_service.catalog_service(definitions[entry.slug])
    return found


def search_connections(ctx: RunContext, query: str) -> dict:
    """Ranked services with this agent's state; exact slug/name first, then matched tokens, then name; max 20.

    Ranking runs over the audience's cached index (`_search_index`), so a repeated search costs the run
    validation and a scan of the index in memory; states come from the same index.
    """
    needle = (query or "").strip().lower()
    tokens = _tokens(needle)
    index = _search_index(ctx)
    top = index.ranked(needle, tokens)
    identities = _identities(top)
    results = []
    for entry in top:
        service = identities.get(entry.slug)
        if service is None:
            continue
        state = index.states.get(entry.slug) or readiness(service, [], [])
        results.append(
            {
                "service": service.slug,
                "name": service.name,
                "description": service.description,
                "logoUrl": service.logo_url,
                "methods": service.methods,
                "source": service.source,
                "state": state.state,
                "reason": state.reason,
                "connectionId": str(state.connection_id) if state.connection_id else None,
            }
        )
    return {"version": 1, "query": query, "results": results}


# --- request -------------------------------------------------------------------------------------------------


def _continued_run_ids(ctx: RunContext) -> set[uuid.UUID]:
    """This run, and the run whose card woke it (a continuation carries the card's `interactionId`)."""
    run_ids = {ctx.run.id}
    interaction_id = _uuid((ctx.run.context_snapshot or {}).get("interactionId"))
    if interaction_id is not None:
        source_run_id = db.session.scalar(
            select(ThreadInteraction.source_run_id).where(
                ThreadInteraction.id == interaction_id,
                ThreadInteraction.company_id == ctx.run.company_id,
                ThreadInteraction.kind == intents_card.KIND,
            )
        )
        if source_run_id is not None:
            run_ids.add(source_run_id)
    return run_ids


def _declined_in_this_continuation(ctx: RunContext, slug: str) -> bool:
    """True when this service's card was declined for this run, for the run this continuation continues, or is
    the declined card that woke this run.

    Called with the task row locked (`_lock_task`): a decline locks the task before the card, so a decline racing
    this request either committed before this read or waits until the request's card is decided.
    """
    run_ids = _continued_run_ids(ctx)
    interaction_id = _uuid((ctx.run.context_snapshot or {}).get("interactionId"))
    woken_by = ThreadInteraction.id == interaction_id if interaction_id is not None else false()
    declined = db.session.scalars(
        select(ThreadInteraction)
        .where(
            ThreadInteraction.company_id == ctx.run.company_id,
            ThreadInteraction.issue_id == ctx.issue.id,
            ThreadInteraction.kind == intents_card.KIND,
            ThreadInteraction.status == "rejected",
            or_(ThreadInteraction.source_run_id.in_(run_ids), woken_by),
        )
        .execution_options(populate_existing=True)
    )
    return any((row.payload or {}).get("serviceSlug") == slug for row in declined)


def _lock_task(ctx: RunContext) -> None:
    """Lock the run's task row (PostgreSQL; SQLite serializes writers itself), in the order every writer uses."""
    db.session.scalar(select(Issue.id).where(Issue.id == ctx.issue.id).with_for_update())


def request_connection(ctx: RunContext, slug: str) -> dict:
    """Ready when usable now; otherwise create or reuse one pending card addressed to the responsible person."""
    service = intents_service.resolve_service(ctx.run.company_id, slug, ctx.responsible_user_id, ctx.agent.id)
    if service is None or not service.available or not service.methods:
        raise Unprocessable(f"Connection service {slug} is not available")
    matching = intents_service.matching_connections(ctx.run.company_id, service.slug)
    accesses = _accesses_by_service(ctx, [c.id for c in matching]).get(service.slug, [])
    state = readiness(service, accesses, matching)
    if state.state == "ready":
        return {
            "version": 1,
            "service": service.slug,
            "state": "ready",
            "connectionId": str(state.connection_id),
            "interactionId": None,
            "instruction": f"{service.name} is connected and available in this run. Use its installed tools.",
        }
    if state.admin_denied:
        raise Forbidden(ADMIN_DENIAL)
    _lock_task(ctx)
    if _declined_in_this_continuation(ctx, service.slug):
        raise Conflict(DECLINED_IN_CONTINUATION)
    interaction, created = creation.create_connection_intent(
        ctx.issue, ctx.agent, service, addressee_user_id=ctx.responsible_user_id, run_id=ctx.run.id
    )
    if interaction.status != "pending":
        raise Conflict("This connection request has already been resolved. Follow its recorded outcome.")
    if created:
        creation.record_card_created(
            company_id=ctx.run.company_id,
            agent_id=ctx.agent.id,
            issue_id=ctx.issue.id,
            run_id=ctx.run.id,
            interaction_id=interaction.id,
            kind=intents_card.KIND,
            purpose=None,
        )
    return {
        "version": 1,
        "service": service.slug,
        "state": "needs_user_action",
        "connectionId": None,
        "interactionId": str(interaction.id),
        "instruction": CARD_SENT,
    }


# --- what a run is handed ------------------------------------------------------------------------------------


def runtime_urls() -> dict[str, str]:
    base = str(current_app.config["PUBLIC_BASE_URL"]).rstrip("/")
    return {
        "mcp": f"{base}/mcp/runtime-tools",
        "search": f"{base}/runtime-tools/connections/search",
        "request": f"{base}/runtime-tools/connections/request",
    }


def runtime_descriptor(token: MintedToken) -> dict:
    """The typed descriptor for adapters (`paperclipRuntimeTools` in the HTTP adapter body)."""
    urls = runtime_urls()
    return {
        "version": 1,
        "guidance": GUIDANCE,
        "mcpEndpoint": urls["mcp"],
        "rest": {"connectionsSearch": urls["search"], "connectionRequest": urls["request"]},
        "bearerToken": token.token,
        "expiresAt": token.expires_at_iso,
        "tools": list(TOOL_NAMES),
    }


def runtime_env(token: MintedToken) -> dict[str, str]:
    """The `PAPERCLIP_RUNTIME_TOOLS_*` environment for shell-based runtimes."""
    urls = runtime_urls()
    return {
        "PAPERCLIP_RUNTIME_TOOLS_MCP_URL": urls["mcp"],
        "PAPERCLIP_RUNTIME_TOOLS_TOKEN": token.token,
        "PAPERCLIP_RUNTIME_TOOLS_EXPIRES_AT": token.expires_at_iso,
        "PAPERCLIP_RUNTIME_TOOLS_CONNECTIONS_SEARCH_URL": urls["search"],
        "PAPERCLIP_RUNTIME_TOOLS_CONNECTION_REQUEST_URL": urls["request"],
        "PAPERCLIP_RUNTIME_TOOLS_AVAILABLE": ",".join(TOOL_NAMES),
        "PAPERCLIP_RUNTIME_TOOLS_GUIDANCE": GUIDANCE,
    }
