"""`connections_search`: the catalog and tool index searched per run, cached by access revision."""

from __future__ import annotations

import itertools
import operator
import re
import threading
from collections import OrderedDict, defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field

from sqlalchemy import Row, case, select

from app.catalog.loader import get_app, get_app_versions
from app.extensions import db
from app.models import (
    CatalogApp,
    ToolConnection,
)
from app.models.connections import CUSTOM_APP_SLUG
from app.services.access.effective import effective_access
from app.services.access.revision import RevisionCache
from app.services.access.rows import ConnectionAccess
from app.services.intents import service as intents_service
from app.services.runtime.context import RunContext
from app.services.runtime.readiness import Readiness, readiness

SEARCH_LIMIT = 20


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

    def score(self, needle: str, folded: str, tokens: list[str], tool_words: str) -> int:
        """Exact slug or name (`folded`: the casefolded needle): 1000; else the query tokens found in its words
        or (the first few) its tools'. Every entry scores 1 for an empty needle (`_SearchIndex.ranked`)."""
        if needle == self.slug or folded == self.name_key:
            return 1000
        words = self.words
        found = 0
        for i, token in enumerate(tokens):
            if token in words or (i < MAX_SEARCH_TOKENS and token in tool_words):
                found += 1
        return found


def _by_name(entries: Iterable[_IndexedService]) -> tuple[_IndexedService, ...]:
    """Entries in result order among equal scores: casefolded name, then slug (slugs are unique)."""
    return tuple(sorted(entries, key=lambda entry: (entry.name_key, entry.slug)))


@dataclass(frozen=True)
class _SearchIndex:
    """What one audience can find, and the state of every service that has connections; query-independent."""

    entries: tuple[_IndexedService, ...]  # catalog and configured services, by name (`_by_name`)
    tool_words: dict[str, str]  # by service: words of the indexed tools of its connections in this audience
    states: dict[str, Readiness]  # services without a connection are simply "available"
    # Each service's result as `search_connections` answers it, filled on first use: it depends only on what
    # this index was built from (entry, definition version, state), so it lives and dies with the index.
    results: dict[str, dict] = field(default_factory=dict, compare=False)

    def ranked(self, needle: str, tokens: list[str]) -> list[_IndexedService]:
        """The top entries by score, then name and slug (`entries` is in that order: a stable sort on the score
        alone keeps it among equal scores)."""
        if not needle:
            return list(self.entries[:SEARCH_LIMIT])
        folded = needle.casefold()
        tool_words = self.tool_words
        scored = []
        for entry in self.entries:
            score = entry.score(needle, folded, tokens, tool_words.get(entry.slug, ""))
            if score > 0:
                scored.append((-score, entry))
        scored.sort(key=operator.itemgetter(0))
        return [entry for _score, entry in scored[:SEARCH_LIMIT]]


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

    The revision comes with the run context (no extra statement) and rises in the same transaction as any
    change that could alter an answer (`app.services.access.revision`), so a cached index is never older than
    the revision it is filed under. Building one reads the catalog and the company in batches, so its cost
    does not grow with their size.
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
        entries=_by_name(itertools.chain(catalog, configured)),
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
    known = index.results
    identities = _identities([entry for entry in top if entry.slug not in known])
    for slug, service in identities.items():
        state = index.states.get(slug) or readiness(service, [], [])
        known[slug] = {
            **service.described(),
            "state": state.state,
            "reason": state.reason,
            "connectionId": str(state.connection_id) if state.connection_id else None,
        }
    results = [known[entry.slug] for entry in top if entry.slug in known]
    return {"version": 1, "query": query, "results": results}
