"""Benchmark helpers: a throwaway PostgreSQL database and a large synthetic company seeded with SQL bulk inserts.

Nothing here is used by the app. `seed_company` builds one company the way the services would (a few objects through
the services, the bulk through multi-row INSERTs and `INSERT ... SELECT generate_series`), and `grow_catalog` adds
more of the same so the statement counts can be compared as the catalog grows.
"""

from __future__ import annotations

import copy
import json
import random
import secrets
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime

from sqlalchemy import create_engine, insert, select, text
from sqlalchemy.engine import make_url

_SENTENCE = (
    "issues pull requests pages databases memory notes calendar invoices tickets search sync upload export "
    "messages channels threads docs wiki crm leads deals tasks projects sprints alerts metrics logs traces "
    "deploy builds releases users teams files folders images comments reviews payments orders customers"
)
WORDS = _SENTENCE.split()
VARIANTS = ("Cloud", "Pro", "Team", "Enterprise", "Lite", "Hub", "Works", "Studio", "Labs", "One")
TOOLS_PER_CONNECTION = 40
INSTRUCTIONS = {"enabled": True, "text": "Follow the team's conventions for this service."}


def now() -> datetime:
    return datetime.now(UTC)


# --- the throwaway database ----------------------------------------------------------------------------------


def create_database(admin_url: str) -> tuple[str, str]:
    """Create `switchboard_bench_<random>` next to the admin URL's database; returns (name, SQLAlchemy URL)."""
    name = f"switchboard_bench_{secrets.token_hex(4)}"
    engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    engine.dispose()
    url = make_url(admin_url).set(database=name).render_as_string(hide_password=False)
    return name, url


def drop_database(admin_url: str, name: str) -> None:
    engine = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with engine.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    engine.dispose()


def migrate() -> None:
    """Alembic upgrade to head and the cached catalog from the real definitions (inside an app context)."""
    from flask_migrate import upgrade

    from app.catalog.loader import ingest_definitions
    from app.extensions import db

    upgrade()
    ingest_definitions()
    db.session.commit()


OWNER_PASSWORD = "bench password 1"  # the bench owner signs in to the board pages with it


# --- seeding -------------------------------------------------------------------------------------------------


@dataclass
class Seeded:
    company_id: uuid.UUID
    owner_id: uuid.UUID
    agent_id: uuid.UUID
    issue_id: uuid.UUID
    run_id: uuid.UUID
    ready_slug: str  # a service already usable by the bench agent: connection_request answers "ready"
    pending_slug: str  # a catalog service with no connection: the first request opens a card, then reuses it
    permissions_connection_id: uuid.UUID
    owner_email: str = ""
    agent_ids: list[uuid.UUID] = field(default_factory=list)
    rng: random.Random = field(default_factory=lambda: random.Random(8))
    generated_apps: int = 0
    generated_connections: int = 0


def _bulk(model, rows: list[dict], chunk: int = 2000) -> None:
    from app.extensions import db

    for start in range(0, len(rows), chunk):
        db.session.execute(insert(model.__table__), rows[start : start + chunk])


def _words(rng: random.Random, n: int) -> str:
    return " ".join(rng.choice(WORDS) for _ in range(n))


def add_catalog_apps(seeded: Seeded, count: int) -> list[str]:
    """`count` more cached-catalog rows generated from the real definitions with varied slugs and names."""
    from app.catalog.loader import content_hash, search_fields
    from app.extensions import db
    from app.models import CatalogApp

    real = [
        row
        for row in db.session.scalars(select(CatalogApp).order_by(CatalogApp.slug))
        if row.slug != "custom" and "-g" not in row.slug
    ]
    rows, slugs = [], []
    stamp = now()
    for _ in range(count):
        base = real[seeded.generated_apps % len(real)]
        n = seeded.generated_apps
        seeded.generated_apps += 1
        slug = f"{base.slug}-g{n:05d}"
        name = f"{base.name} {VARIANTS[n % len(VARIANTS)]} {n}"
        definition = copy.deepcopy(base.definition)
        definition.update(slug=slug, name=name, description=f"{base.description} ({_words(seeded.rng, 3)})")
        rows.append(
            {
                "slug": slug,
                "name": name,
                "description": definition["description"],
                "categories": list(base.categories),
                "definition": definition,
                "agent_instructions": base.agent_instructions,
                "content_hash": content_hash(definition),
                "ingested_at": stamp,
                **search_fields(definition),
            }
        )
        slugs.append(slug)
    _bulk(CatalogApp, rows)
    return slugs


def add_connections(seeded: Seeded, slugs: list[str], count: int, bench_agent_installs: int) -> None:
    """`count` active connections over `slugs`, each with a grant, an install and 40 indexed tools.

    80% are shared through an organization grant, 20% through the responsible person's own grant; 10% are
    installed company-wide and the rest for one agent each, of which `bench_agent_installs` for the bench agent.
    Tool 1 of each connection is allowed, tool 2 blocked, the others default to ask-first.
    """
    from app.extensions import db
    from app.models import ConnectionGrant, ConnectionInstall, ToolConnection

    rng = seeded.rng
    stamp = now()
    connections, grants, installs = [], [], []
    for i in range(count):
        n = seeded.generated_connections
        seeded.generated_connections += 1
        connection_id = uuid.uuid4()
        slug = slugs[n % len(slugs)]
        connections.append(
            {
                "id": connection_id,
                "company_id": seeded.company_id,
                "app_slug": slug,
                "name": f"{slug} {n}",
                "status": "active",
                "enabled": True,
                "health_status": "healthy",
                "auth_kind": "api_key",
                "config": {},
                "agent_instructions": INSTRUCTIONS,
                "created_by_user_id": seeded.owner_id,
                "created_at": stamp,
                "updated_at": stamp,
            }
        )
        personal = n % 5 == 4
        grants.append(
            {
                "id": uuid.uuid4(),
                "company_id": seeded.company_id,
                "connection_id": connection_id,
                "kind": "user" if personal else "organization",
                "subject_user_id": seeded.owner_id if personal else None,
                "status": "active",
                "is_default": not personal,
                "provider_tenant": {},
                "scopes": [],
                "created_at": stamp,
                "updated_at": stamp,
            }
        )
        if i < bench_agent_installs:
            target_type, target_id = "agent", seeded.agent_id
        elif n % 10 == 0:
            target_type, target_id = "company", seeded.company_id
        else:
            target_type, target_id = "agent", rng.choice(seeded.agent_ids[1:])
        installs.append(
            {
                "id": uuid.uuid4(),
                "company_id": seeded.company_id,
                "connection_id": connection_id,
                "target_type": target_type,
                "target_id": target_id,
                "created_at": stamp,
            }
        )
    _bulk(ToolConnection, connections)
    _bulk(ConnectionGrant, grants)
    _bulk(ConnectionInstall, installs)
    ids = [c["id"] for c in connections]
    words = " ".join(WORDS)
    # The gateway's stored listing entry, as the ORM writes it with every tool row (`gateway.listing`).
    from app.services.connections.tool_index import stored_entry

    schema = {"type": "object", "properties": {"query": {"type": "string"}}}
    db.session.execute(
        text(
            """
            INSERT INTO connection_tools (id, company_id, connection_id, name, description, input_schema, is_write,
                                          listed_entry, status, version_hash, first_seen_at, last_seen_at)
            SELECT gen_random_uuid(), c.company_id, c.id, 'tool_' || g,
                   'Works with ' || split_part(:words, ' ', 1 + (g * 7 + length(c.name)) % :nwords) || ' and '
                   || split_part(:words, ' ', 1 + (g * 13) % :nwords),
                   CAST(:schema AS jsonb), g % 3 = 0,
                   CASE WHEN g % 3 = 0 THEN :write_entry ELSE :read_entry END,
                   'active', 'v1', now(), now()
            FROM tool_connections c CROSS JOIN generate_series(1, :per) AS g
            WHERE c.id = ANY(:ids)
            """
        ),
        {
            "words": words,
            "nwords": len(WORDS),
            "per": TOOLS_PER_CONNECTION,
            "ids": ids,
            "schema": json.dumps(schema),
            "write_entry": stored_entry(schema, True, None),
            "read_entry": stored_entry(schema, False, None),
        },
    )
    # What the indexer keeps for search: the distinct lowercase words of the tools' names and descriptions.
    db.session.execute(
        text(
            """
            UPDATE tool_connections c SET tool_search_text = sub.words
            FROM (
                SELECT t.connection_id, string_agg(DISTINCT w, ' ' ORDER BY w) AS words
                FROM connection_tools t,
                     regexp_split_to_table(lower(t.name || ' ' || t.description), '[^[:alnum:]]+') AS w
                WHERE t.connection_id = ANY(:ids) AND w <> ''
                GROUP BY t.connection_id
            ) sub
            WHERE sub.connection_id = c.id
            """
        ),
        {"ids": ids},
    )
    db.session.execute(
        text(
            """
            INSERT INTO tool_policies (id, company_id, connection_id, tool_name, action, created_at, updated_at)
            SELECT gen_random_uuid(), c.company_id, c.id, 'tool_' || g, CASE g WHEN 1 THEN 'allow' ELSE 'block' END,
                   now(), now()
            FROM tool_connections c CROSS JOIN generate_series(1, 2) AS g
            WHERE c.id = ANY(:ids)
            """
        ),
        {"ids": ids},
    )


def seed_company(scale: float) -> Seeded:
    """The large company at `scale` (1.0: 300 apps, 500 connections, 20,000 tools, 200 agents); commits."""
    from app.extensions import db
    from app.models import Agent, Issue
    from app.services.accounts import create_user
    from app.services.agents import create_agent
    from app.services.runs.tokens import open_run
    from app.services.tenancy import add_membership, create_company
    from app.services.work import create_issue

    n_apps = max(20, round(300 * scale))
    n_connections = max(20, round(500 * scale))
    n_agents = max(10, round(200 * scale))

    company = create_company("Bench Corp", "BEN")
    owner = create_user(f"owner-{secrets.token_hex(3)}@bench.example", "Bench Owner", OWNER_PASSWORD)
    add_membership(company, owner, "owner")
    agent = create_agent(company.id, name="Bench agent", adapter_type="manual")
    db.session.flush()
    stamp = now()
    others = [
        {
            "id": uuid.uuid4(),
            "company_id": company.id,
            "name": f"Agent {n}",
            "title": "",
            "instructions": "",
            "adapter_type": "manual",
            "adapter_config": {},
            "status": "active",
            "created_at": stamp,
            "updated_at": stamp,
        }
        for n in range(1, n_agents)
    ]
    _bulk(Agent, others)
    issue = create_issue(
        company.id,
        title="Benchmark task",
        status="in_progress",
        assignee_agent_id=agent.id,
        responsible_user_id=owner.id,
    )
    db.session.flush()
    _bulk(
        Issue,
        [
            {
                "id": uuid.uuid4(),
                "company_id": company.id,
                "identifier": f"BEN-X{n}",
                "title": f"Task {n}: {_words(random.Random(n), 4)}",
                "description": "",
                "status": "todo",
                "assignee_agent_id": others[n % len(others)]["id"],
                "responsible_user_id": owner.id,
                "created_at": stamp,
                "updated_at": stamp,
            }
            for n in range(n_agents * 2)
        ],
    )
    run = open_run(agent, issue, owner.id)
    seeded = Seeded(
        company_id=company.id,
        owner_id=owner.id,
        agent_id=agent.id,
        issue_id=issue.id,
        run_id=run.id,
        ready_slug="notion",
        pending_slug="",
        permissions_connection_id=uuid.uuid4(),
        owner_email=owner.email,
        agent_ids=[agent.id] + [a["id"] for a in others],
    )
    slugs = add_catalog_apps(seeded, n_apps - _catalog_size())
    # The real services first (so connection_request "ready" has a stable target), then the generated ones.
    real = ["notion", "github", "linear", "slack", "honcho", "mem0", "zep", "cognee", "supermemory"]
    add_connections(seeded, real, len(real), bench_agent_installs=len(real))
    bench_installs = min(100, n_connections) - len(real) - n_connections // 10
    # Connections cover 60% of the generated apps: the rest stay "available" (connectable, not connected).
    connectable = slugs[: max(1, len(slugs) * 3 // 5)]
    add_connections(
        seeded, connectable, n_connections - len(real), bench_agent_installs=max(0, bench_installs)
    )
    connected = set(db.session.scalars(text("SELECT DISTINCT app_slug FROM tool_connections")))
    seeded.pending_slug = next(s for s in sorted(slugs, reverse=True) if s not in connected)
    seeded.permissions_connection_id = db.session.scalar(
        text("SELECT id FROM tool_connections WHERE app_slug = 'notion'")
    )
    db.session.commit()
    # A live database has planner statistics (autovacuum keeps them); a bulk-loaded one has none until analyzed,
    # and the planner would then pick nested loops sized for empty tables.
    db.session.execute(text("ANALYZE"))
    db.session.commit()
    return seeded


def grow_catalog(seeded: Seeded, factor: int) -> None:
    """Grow apps, connections and tools to `factor` times their size; commits (raising the access revision, as any
    writer that bypasses the ORM must: caches of search indexes, listings and instruction sources key on it)."""
    from app.extensions import db
    from app.services.access.revision import touch

    apps = _catalog_size()
    connections = seeded.generated_connections
    slugs = add_catalog_apps(seeded, apps * (factor - 1))
    add_connections(seeded, slugs[: len(slugs) * 3 // 5], connections * (factor - 1), bench_agent_installs=0)
    touch(seeded.company_id)
    db.session.commit()
    db.session.execute(text("ANALYZE"))
    db.session.commit()


def _catalog_size() -> int:
    from app.extensions import db

    return db.session.scalar(text("SELECT count(*) FROM catalog_apps"))


def counts() -> dict[str, int]:
    from app.extensions import db

    tables = ("catalog_apps", "tool_connections", "connection_tools", "agents")
    return {t: db.session.scalar(text(f"SELECT count(*) FROM {t}")) for t in tables}  # noqa: S608
